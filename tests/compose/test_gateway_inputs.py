"""A user's own Gateway: a mistake in what it is given is refused when it is built, naming what to fix."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from pydantic import ValidationError

from components.cache.redis_cache import RedisCache, RedisCacheArgs
from components.gateway.gateway import Gateway, GatewayArgs, HubUpstream, embedder_for
from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.specs import GatewaySpec, ModelDeploySpec, RouteSpec
from inferstack_cli.plan import MockEngine, mock_engine
from inferstack_gateway.config import ConfigError

LLAMA = ModelDeploySpec(name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", pool="h100")


@pytest.fixture
def gateway_args(cluster: ExistingCluster) -> Callable[..., GatewayArgs]:
    """``GatewayArgs`` of a gateway in ``gw`` in front of ``llama-8b``, with ``overrides``."""
    cache = RedisCache("cache", RedisCacheArgs(namespace="cache", provider=cluster.k8s_provider, client_namespace="gw"))

    def make(**overrides: Any) -> GatewayArgs:
        fields: dict[str, Any] = {
            "spec": GatewaySpec(),
            "models": [LLAMA],
            "upstream_urls": {"llama-8b": "http://llama-8b.ml.svc:8000/v1"},
            "cache": cache.endpoint,
            "namespace": "gw",
            "provider": cluster.k8s_provider,
            "image": "registry.example/gateway:1",
        }
        return GatewayArgs(**{**fields, **overrides})

    return make


def test_a_model_without_an_upstream_url_is_refused_by_name(gateway_args: Callable[..., GatewayArgs]) -> None:
    # GIVEN a model the gateway serves, and its URL forgotten (it was a TypeError, or a KeyError, raised inside the
    # config's apply at `pulumi up`)
    # WHEN the arguments are built THEN the field, the model and the fix are named
    with pytest.raises(ValidationError) as caught:
        gateway_args(upstream_urls={"llama-70b": "http://llama-70b.ml.svc:8000/v1"})
    (error,) = caught.value.errors()
    assert "upstream_urls: no URL for 'llama-8b' (models[].name); got 'llama-70b'" in error["msg"]
    assert "pulumi.Output.concat(server.endpoint, '/v1')" in error["msg"]


def test_a_config_the_gateway_would_refuse_fails_when_the_component_is_built(
    engine: MockEngine, gateway_args: Callable[..., GatewayArgs]
) -> None:
    # GIVEN a route whose complex prompts go to a model the gateway does not serve
    spec = GatewaySpec(routes=(RouteSpec(alias="chat", small="llama-8b", large="llama-70b"),))
    # WHEN the Gateway is built THEN the gateway's own schema refuses it there, not inside an apply at `pulumi up`
    with pytest.raises(ConfigError, match=re.escape("models.chat.complexity.0.tier: 'llama-70b' is not defined")):
        Gateway("gateway", gateway_args(spec=spec))


def test_a_gateway_outside_the_namespace_its_cache_admits_is_refused(
    gateway_args: Callable[..., GatewayArgs],
) -> None:
    # GIVEN the cache made for a gateway in `gw` WHEN a gateway in `team-b` is given it THEN both namespaces and the
    # fix are named (its pod waited for a password Secret that was never written there, behind a NetworkPolicy that
    # did not admit it)
    with pytest.raises(ValidationError) as caught:
        gateway_args(namespace="team-b")
    (error,) = caught.value.errors()
    assert (
        "namespace: 'team-b' is not where the cache admits its gateway and writes its password Secret ('gw')"
        in (error["msg"])
    )
    assert "RedisCacheArgs.client_namespace" in error["msg"]


def test_an_embedder_for_a_model_outside_the_catalog_is_refused_by_name() -> None:
    # (it was a KeyError from the catalog lookup)
    with pytest.raises(ValueError, match=re.escape("model_id: 'BAAI/bge-small' is not in the model catalog")):
        embedder_for("BAAI/bge-small", "http://embeddings.ml.svc:8080/v1")


def test_two_gateways_in_one_namespace_are_found_at_plan_time(
    engine: MockEngine, gateway_args: Callable[..., GatewayArgs]
) -> None:
    # GIVEN two gateways of a user's program in one namespace: their Deployments select the same pod labels, so each
    # takes the other's pods for its own and each Service sends requests to both, with the other's keys and models
    from policies.rules import check_plan

    Gateway("gateway-a", gateway_args())
    Gateway("gateway-b", gateway_args())
    # WHEN the stack is planned THEN the policy pack names both Deployments and the fix
    found = [v["message"] for v in check_plan(engine.settle()) if v["policy"] == "stack-workload-selectors-disjoint"]
    assert any(
        m.startswith("Deployment gw/gateway-a's selector (app.kubernetes.io/name=inferstack-gateway) also matches the "
                     "pods of Deployment gw/gateway-b") and "own namespace" in m
        for m in found
    ), found  # fmt: skip


def test_a_rotated_hub_key_rolls_the_gateway_pods() -> None:
    # GIVEN a gateway in front of a hub, whose key reaches the pods as a variable from a Secret (set at start only)
    def pod_annotations(hub_key: str) -> dict[str, str]:
        with mock_engine("test", {}, [], "us-east-1") as engine:
            cluster = ExistingCluster("dc1", ExistingClusterArgs(kubeconfig=pulumi.Output.secret("apiVersion: v1")))
            cache = RedisCache(
                "cache", RedisCacheArgs(namespace="cache", provider=cluster.k8s_provider, client_namespace="gw")
            )
            hub = HubUpstream(url="https://hub.example/v1", api_key=pulumi.Output.secret(hub_key))
            Gateway(
                "gateway",
                GatewayArgs(
                    spec=GatewaySpec(),
                    models=[LLAMA],
                    upstream_urls={"llama-8b": "http://llama-8b.ml.svc:8000/v1"},
                    cache=cache.endpoint,
                    namespace="gw",
                    provider=cluster.k8s_provider,
                    image="registry.example/gateway:1",
                    hub=hub,
                ),
            )
            (deployment,) = [r for r in engine.settle() if r.type == "kubernetes:apps/v1:Deployment"]
            annotations: dict[str, str] = deployment.inputs["spec"]["template"]["metadata"]["annotations"]
            return annotations

    # WHEN the hub's key changes (the hub replaced the key it issued) and the stack is planned again
    before, after = pod_annotations("first-key"), pod_annotations("second-key")
    # THEN the pod template changes and the pods roll onto the new key, where they kept sending the old one
    assert before["inferstack.io/keys-sha256"] != after["inferstack.io/keys-sha256"]
    assert before["inferstack.io/config-sha256"] == after["inferstack.io/config-sha256"]
