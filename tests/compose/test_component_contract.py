"""A user's own program on an existing cluster (the on-prem/edge style) with a Kubernetes provider of its own: the
serving, cache and gateway components keep the component contract (design card, "Contracts: Component").

Every Kubernetes object goes through the given provider, every resource hangs under the component that made it,
and what the README tells a user to wire on resolves."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.cache.redis_cache import RedisCache, RedisCacheArgs
from components.gateway.gateway import Gateway, GatewayArgs
from components.onprem.specs import OnpremGpuPoolSpec
from components.serving.inference_server import InferenceServer, InferenceServerArgs
from components.serving.serving_base import ServingBase, ServingBaseArgs
from components.specs import GatewaySpec, ModelDeploySpec
from inferstack_cli.mocks import Registration
from inferstack_cli.plan import MockEngine

POOL = OnpremGpuPoolSpec(name="h100", gpu="H100", nodes=1, node_selector={"nvidia.com/gpu.product": "H100"})
MODEL = ModelDeploySpec(name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", pool=POOL.name)


@pytest.fixture
def program(engine: MockEngine) -> dict[str, Any]:
    """The program, as a user writes it: their provider, the kit's namespaces (ServingBase), one model, a cache and
    the gateway in front of both."""
    provider = k8s.Provider("dc1", kubeconfig=pulumi.Output.secret("apiVersion: v1"), context="dc1-admin")
    base = ServingBase("serving", ServingBaseArgs(provider=provider, tier="onprem"))
    after_base = pulumi.ResourceOptions(depends_on=[base])
    server = InferenceServer(
        MODEL.name,
        InferenceServerArgs(
            spec=MODEL,
            pool=POOL,
            namespace=base.serving_namespace,
            provider=provider,
            model_source=f"s3://models/{MODEL.model}/hf",
            engine_store="s3://models",
            loader_image="registry.example/model-loader:1",
            service_account=base.service_account,
            priority_class=base.priority_class,
            rollout_surge=False,
            fabric="none",
            gateway_namespace=base.gateway_namespace,
            monitoring_namespace=base.monitoring_namespace,
        ),
        opts=after_base,
    )
    cache = RedisCache(
        "cache",
        RedisCacheArgs(namespace=base.cache_namespace, provider=provider, client_namespace=base.gateway_namespace),
        opts=after_base,
    )
    gateway = Gateway(
        "gateway",
        GatewayArgs(
            spec=GatewaySpec(),
            models=[MODEL],
            upstream_urls={MODEL.name: pulumi.Output.concat(server.endpoint, "/v1")},
            cache=cache.endpoint,
            namespace=base.gateway_namespace,
            provider=provider,
            image="registry.example/gateway:1",
        ),
        opts=after_base,
    )
    resources = engine.settle()
    return {"resources": resources, "server": server, "cache": cache, "gateway": gateway}


def by_urn(resources: list[Registration]) -> dict[str, Registration]:
    return {r.urn: r for r in resources}


def test_every_kubernetes_object_goes_through_the_users_provider(program: dict[str, Any]) -> None:
    # GIVEN the user's own k8s.Provider, passed to each component as provider=
    resources = program["resources"]
    (provider,) = [r for r in resources if r.type == "pulumi:providers:kubernetes"]
    # WHEN the program runs THEN no Kubernetes object falls back to the default provider (the ambient kubeconfig)
    objects = [r for r in resources if r.custom and r.type.startswith("kubernetes:")]
    assert len(objects) > 20
    assert sorted({(r.provider or "the default provider") for r in objects}) == [provider.urn]


def test_every_resource_a_component_makes_hangs_under_it(program: dict[str, Any]) -> None:
    # GIVEN the resources the components registered (the user's provider and the stack itself are the user's)
    resources = program["resources"]
    index = by_urn(resources)
    components = {r.urn for r in resources if not r.custom and r.type.startswith("inferstack:")}
    assert {index[u].type for u in components} == {
        "inferstack:serving_base:ServingBase",
        "inferstack:inference_server:InferenceServer",
        "inferstack:redis_cache:RedisCache",
        "inferstack:gateway:Gateway",
    }
    # WHEN each custom resource's parent chain is followed up to the stack
    orphans = []
    for r in resources:
        if not r.custom or r.type == "pulumi:providers:kubernetes":
            continue
        parent = r.parent
        while parent and parent not in components:
            parent = index[parent].parent if parent in index else None
        if parent is None:
            orphans.append(r.urn)
    # THEN every one reaches a component (parent=self): none sits at the top of the user's stack
    assert orphans == []


def test_what_the_readme_says_to_wire_on_resolves(program: dict[str, Any], engine: MockEngine) -> None:
    # GIVEN the outputs the README's wiring table names for these components
    server, cache, gateway = program["server"], program["cache"], program["gateway"]
    # WHEN they are resolved THEN each is the address or name the next component (or a client) needs
    assert engine.resolve(server.service_name) == "llama-8b"
    assert engine.resolve(server.endpoint) == "http://llama-8b.inferstack-serving.svc:8000"
    assert engine.resolve(cache.endpoint.url()) == "redis://cache.inferstack-cache.svc.cluster.local:6379"
    assert cache.endpoint.secret_name == "cache-auth"
    assert cache.endpoint.client_namespaces == ("inferstack-gateway",)
    assert gateway.service_name == "gateway"
    assert engine.resolve(gateway.url) == "http://gateway.inferstack-gateway.svc/v1"
    assert engine.resolve(gateway.burst_url) == engine.resolve(gateway.url)
