"""A user's own on-prem-like stack, two of most things, on the user's own provider and namespaces."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pulumi
import pytest

from components.addons.cluster_addons import ClusterAddons, ClusterAddonsArgs
from components.cache.redis_cache import RedisCache, RedisCacheArgs
from components.gateway.gateway import Gateway, GatewayArgs
from components.kube.existing_cluster import ExistingCluster
from components.observability.observability import Observability, ObservabilityArgs
from components.serving.inference_server import InferenceServer
from components.serving.serving_base import ServingBase, ServingBaseArgs
from components.specs import GatewaySpec, ModelDeploySpec
from inferstack_cli.mocks import Registration
from inferstack_cli.plan import MockEngine
from policies.rules import check_plan

MODELS = ("llama-8b", "llama-8b-canary")


@pytest.fixture
def registered_outputs(engine: MockEngine) -> dict[str, set[str]]:
    """Component type → the names of the outputs it registered (``register_outputs``), as the state records them."""
    seen: dict[str, set[str]] = {}
    register = engine.monitor.RegisterResourceOutputs

    def record(request: Any) -> Any:
        seen[request.urn.rsplit("::", 2)[1].rsplit("$", 1)[-1]] = set(request.outputs.fields)
        return register(request)

    engine.monitor.RegisterResourceOutputs = record  # type: ignore[method-assign]
    return seen


@pytest.fixture
def stack(engine: MockEngine, cluster: ExistingCluster, serve: Callable[..., InferenceServer]) -> dict[str, Any]:
    """ServingBase, two models, and per team (``team-a``, ``team-b``) a cache and a gateway; then Observability and
    ClusterAddons, as a user's own program composes them."""
    provider = cluster.k8s_provider
    base = ServingBase("serving", ServingBaseArgs(provider=provider, tier="onprem"))
    after_base = pulumi.ResourceOptions(depends_on=[base])
    teams = ("team-a", "team-b")
    # Both teams' gateways send requests to every model: each model admits both.
    servers = {name: serve(name, after_base, gateway_namespace=teams) for name in MODELS}
    models = [
        ModelDeploySpec(name=n, model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", pool="h100") for n in MODELS
    ]
    gateways, caches = {}, {}
    for team in teams:
        cache = caches[team] = RedisCache(
            f"{team}-cache", RedisCacheArgs(namespace=f"{team}-cache", provider=provider, client_namespace=team)
        )
        gateways[team] = Gateway(
            f"{team}-gateway",
            GatewayArgs(
                spec=GatewaySpec(),
                models=models,
                upstream_urls={n: pulumi.Output.concat(s.endpoint, "/v1") for n, s in servers.items()},
                cache=cache.endpoint,
                namespace=team,
                provider=provider,
                image="registry.example/gateway:1",
                issue_burst_key=True,
            ),
        )
    observability = Observability(
        "obs",
        ObservabilityArgs(
            provider=provider,
            serving_namespace="ml",
            gateway_namespace="team-a",
            gateway_name="team-a-gateway",
            extra_gateways=[("team-b", "team-b-gateway")],
            cache_url=caches["team-a"].endpoint.url(),
            cache_secret=(caches["team-a"].endpoint.secret_name, caches["team-a"].endpoint.secret_key),
            extra_caches={"team-b": caches["team-b"].endpoint},
        ),
        opts=after_base,
    )
    ClusterAddons("addons", ClusterAddonsArgs(provider=provider, gpu_stack="gpu-operator"))
    return {"resources": engine.settle(), "gateways": gateways, "observability": observability}


def kubernetes_objects(resources: list[Registration]) -> list[Registration]:
    return [r for r in resources if r.custom and r.type.startswith("kubernetes:")]


def test_two_of_a_component_in_one_program_collide_neither_in_urns_nor_in_the_cluster(stack: dict[str, Any]) -> None:
    resources: list[Registration] = stack["resources"]
    assert [urn for urn, n in Counter(r.urn for r in resources).items() if n > 1] == []
    names = Counter(
        (r.type, r.inputs["metadata"].get("namespace"), r.inputs["metadata"]["name"])
        for r in kubernetes_objects(resources)
        if "metadata" in r.inputs
    )
    assert [key for key, n in names.items() if n > 1] == []
    # the policy pack's rules for the same, which `inferstack plan` and `pulumi preview` run
    rules = ("k8s-names-valid", "stack-kube-objects-unique")
    assert [v["message"] for v in check_plan(resources) if v["policy"] in rules] == []


def test_every_kubernetes_object_uses_the_users_provider_never_the_default(
    stack: dict[str, Any],
) -> None:
    (provider,) = [r for r in stack["resources"] if r.type == "pulumi:providers:kubernetes"]
    objects = kubernetes_objects(stack["resources"])
    assert len(objects) > 50
    # The URN of each registration's provider reference; the default provider's is empty under the mock engine.
    assert {r.provider for r in objects} == {provider.urn}


def test_secrets_a_user_exports_stay_secret(stack: dict[str, Any], engine: MockEngine) -> None:
    for team, gateway in stack["gateways"].items():
        assert engine.resolve(gateway.burst_api_key) == "[secret]", team
    assert engine.resolve(stack["observability"].grafana_admin_password) == "[secret]"


@pytest.mark.parametrize("team", ["team-a", "team-b"])
def test_the_gateway_alerts_watch_each_of_the_users_gateways_by_its_name(stack: dict[str, Any], team: str) -> None:
    # GIVEN Observability told which Gateways it watches: "team-a-gateway" (gateway_name) and "team-b-gateway"
    # (extra_gateways), whose Deployments carry those names
    (rule,) = [r for r in stack["resources"] if r.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule"]
    (group,) = [g for g in rule.inputs["spec"]["groups"] if g["name"] == "inferstack.gateway"]
    (deployment,) = [
        r for r in kubernetes_objects(stack["resources"])
        if r.type == "kubernetes:apps/v1:Deployment" and r.inputs["metadata"]["namespace"] == team
    ]  # fmt: skip
    # WHEN / THEN the alert that pages on no ready replica reads that Deployment, in its namespace
    (unavailable,) = [
        r for r in group["rules"] if r["alert"] == "InferstackGatewayUnavailable" and r["labels"]["namespace"] == team
    ]
    assert deployment.inputs["metadata"]["name"] == f"{team}-gateway"
    assert f'namespace="{team}",inferstack_site="",deployment="{team}-gateway"}}' in unavailable["expr"]
    assert unavailable["annotations"]["summary"].startswith(f"{team}/{team}-gateway:")


def test_each_teams_cache_has_its_own_exporter_monitor_and_alerts(stack: dict[str, Any], engine: MockEngine) -> None:
    # GIVEN Observability told of team-a's cache (cache_url) and team-b's (extra_caches)
    resources = stack["resources"]
    exporters = {
        r.inputs["name"]: r.inputs["values"]
        for r in resources
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["chart"] == "prometheus-redis-exporter"
    }
    # WHEN the stack is planned THEN each cache has an exporter of its own, reading its address and its own Secret
    assert set(exporters) == {"prometheus-redis-exporter", "prometheus-redis-exporter-team-b"}
    assert exporters["prometheus-redis-exporter"]["auth"]["secret"]["name"] == "team-a-cache-auth"
    assert exporters["prometheus-redis-exporter-team-b"]["auth"]["secret"]["name"] == "team-b-cache-auth"
    assert "team-b-cache" in engine.resolve(exporters["prometheus-redis-exporter-team-b"]["redisAddress"])
    # and a ServiceMonitor selecting each release's Service (the chart's selector labels)
    monitors = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"]
        for r in resources
        if r.inputs.get("kind") == "ServiceMonitor" and r.inputs["metadata"]["name"].startswith("inferstack-cache")
    }
    assert monitors == {
        "inferstack-cache": "prometheus-redis-exporter",
        "inferstack-cache-team-b": "prometheus-redis-exporter-team-b",
    }
    # and alerts that read each exporter's series alone, team-b's labelled with its name
    (rule,) = [r for r in resources if r.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule"]
    down = [r for g in rule.inputs["spec"]["groups"] for r in g["rules"] if r.get("alert") == "InferstackCacheDown"]
    assert [(d["labels"].get("cache"), d["expr"]) for d in down] == [
        (None, 'redis_up{inferstack_site="",service="prometheus-redis-exporter"} == 0'),
        ("team-b", 'redis_up{inferstack_site="",service="prometheus-redis-exporter-team-b"} == 0'),
    ]


def test_what_a_user_wires_between_components_is_a_registered_output(
    registered_outputs: dict[str, set[str]], stack: dict[str, Any]
) -> None:
    # THEN the URLs, Secret names and namespaces the README says each component hands on are in its state, where
    # `pulumi stack export` shows them (ServingBase and Observability registered none, RedisCache only its host)
    assert registered_outputs["inferstack:serving_base:ServingBase"] >= {
        "serving_namespace",
        "gateway_namespace",
        "cache_namespace",
        "monitoring_namespace",
        "priority_class",
        "service_account",
    }
    assert registered_outputs["inferstack:inference_server:InferenceServer"] == {"service_name", "endpoint"}
    assert registered_outputs["inferstack:redis_cache:RedisCache"] == {"host", "port", "secret_name"}
    assert registered_outputs["inferstack:gateway:Gateway"] == {"service_name", "url", "burst_url", "burst_api_key"}
    assert registered_outputs["inferstack:observability:Observability"] == {
        "prometheus_url",
        "otlp_endpoint",
        "grafana_admin_password",
    }
