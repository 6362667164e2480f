"""One Observability in a user's own cluster, watching models and gateways in more than one namespace."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from components.kube.existing_cluster import ExistingCluster
from components.observability.alerts import ModelSlo
from components.observability.observability import Observability, ObservabilityArgs
from inferstack_cli.plan import MockEngine


def slo(namespace: str, gateway_namespace: str | tuple[str, ...]) -> ModelSlo:
    return ModelSlo(
        name="llama-8b",
        engine="vllm",
        ttft_p99_ms=100,
        itl_p99_ms=20,
        namespace=namespace,
        gateway_namespace=gateway_namespace,
    )


def test_every_namespace_a_model_or_gateway_runs_in_is_scraped_once(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    # GIVEN a team's model and gateway in team-a-ml/team-a-gw, another team's model in team-b-ml behind the gateways
    # of team-b-gw and team-c-gw
    Observability(
        "obs",
        ObservabilityArgs(
            provider=cluster.k8s_provider,
            models=[slo("team-a-ml", "team-a-gw"), slo("team-b-ml", ("team-b-gw", "team-c-gw"))],
            serving_namespace="team-a-ml",
            gateway_namespace="team-a-gw",
        ),
    )
    monitors = [
        (r.inputs["kind"], r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"])
        for r in engine.settle()
        if r.inputs.get("kind") in ("PodMonitor", "ServiceMonitor")
    ]
    # THEN every team's engines and gateways are scraped (team-b's alert rules read series that exist), each once
    assert sorted(monitors) == [
        ("PodMonitor", ns, f"inferstack-{engine_name}")
        for ns in ("team-a-ml", "team-b-ml")
        for engine_name in ("triton", "vllm")
    ] + [("ServiceMonitor", ns, "inferstack-gateway") for ns in ("team-a-gw", "team-b-gw", "team-c-gw")]


def test_a_second_gateway_in_a_namespace_that_has_one_is_refused_by_name(cluster: ExistingCluster) -> None:
    fields = {"provider": cluster.k8s_provider, "serving_namespace": "ml", "gateway_namespace": "team-a"}
    with pytest.raises(
        ValidationError, match=r"extra_gateways\[0\]: 'team-a' already has a gateway \(gateway_namespace"
    ):
        ObservabilityArgs(**fields, extra_gateways=[("team-a", "other")])
    with pytest.raises(
        ValidationError, match=r"extra_gateways\[1\]: 'team-b' already has a gateway \(extra_gateways\[0\]"
    ):
        ObservabilityArgs(**fields, extra_gateways=[("team-b", "gw"), ("team-b", "gw-2")])
    with pytest.raises(ValidationError, match=r"extra_gateways\[0\] name: 'Team_B' is not a DNS-1123 label"):
        ObservabilityArgs(**fields, extra_gateways=[("team-b", "Team_B")])


def test_a_further_caches_name_must_fit_its_exporters_release_name(cluster: ExistingCluster) -> None:
    from components.cache.redis_cache import RedisCache, RedisCacheArgs

    endpoint = RedisCache(
        "c", RedisCacheArgs(namespace="c", provider=cluster.k8s_provider, client_namespace="gw")
    ).endpoint
    fields = {"provider": cluster.k8s_provider, "serving_namespace": "ml", "gateway_namespace": "gw"}
    with pytest.raises(ValidationError, match=r"extra_caches: set cache_url"):
        ObservabilityArgs(**fields, extra_caches={"team-b": endpoint})
    fields["cache_url"] = "redis://cache.cache.svc:6379"
    with pytest.raises(ValidationError, match=r"extra_caches\['Team_B'\]: 'Team_B' is not a DNS-1123 label"):
        ObservabilityArgs(**fields, extra_caches={"Team_B": endpoint})
    with pytest.raises(ValidationError, match=r"at most 27 characters \(its exporter's Helm release"):
        ObservabilityArgs(**fields, extra_caches={"t" * 28: endpoint})
    assert ObservabilityArgs(**fields, extra_caches={"t" * 27: endpoint}).extra_caches
