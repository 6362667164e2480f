"""KEDA ScaledObjects: the right queue metric per engine, the profile's threshold, warm capacity."""

from __future__ import annotations

from typing import Any

import promql_parser
import pytest

from components.autoscaling.keda import ScalingBehavior, queue_query, scaled_object
from components.observability.dashboards import ENGINES, Engine
from crdcheck import validate
from promql import reads_own_series_only

QUEUE_METRIC: dict[Engine, str] = {
    "vllm": "vllm:num_requests_waiting{",
    "triton": 'nv_trt_llm_request_metrics{request_type="waiting",',
    "llamacpp": "llamacpp:requests_deferred{",
}


def _build(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "model": "llama-8b",
        "namespace": "serving",
        "engine": "vllm",
        "threshold": 2,
        "max_replicas": 8,
    }
    return scaled_object(**(args | overrides))


def _trigger(obj: dict[str, Any], name: str = "queue-depth") -> dict[str, Any]:
    return next(t for t in obj["spec"]["triggers"] if t["name"] == name)


@pytest.mark.parametrize("engine", ENGINES)
def test_query_names_the_engine_queue_metric(engine: Engine) -> None:
    # GIVEN a model served by `engine`
    # WHEN its ScaledObject is built
    query = _trigger(_build(engine=engine))["metadata"]["query"]

    # THEN KEDA reads that engine's waiting-requests gauge, for this model only
    assert query.startswith("sum(" + QUEUE_METRIC[engine])
    assert 'namespace="serving",inferstack_model="llama-8b",inferstack_site=""}' in query


@pytest.mark.parametrize("engine", ENGINES)
def test_query_never_reads_the_other_engine(engine: Engine) -> None:
    # GIVEN a model served by `engine`
    # WHEN its ScaledObject is built
    query = _trigger(_build(engine=engine))["metadata"]["query"]

    # THEN the other engine's metric is absent
    other = next(e for e in ENGINES if e != engine)
    assert QUEUE_METRIC[other].split("{")[0] not in query


@pytest.mark.parametrize(("threshold", "expected"), [(1, "1"), (4, "4"), (2.5, "2.5")])
def test_threshold_follows_the_input(threshold: float, expected: str) -> None:
    # GIVEN a profile's waiting-requests-per-replica target
    # WHEN the ScaledObject is built with it
    metadata = _trigger(_build(threshold=threshold))["metadata"]

    # THEN the trigger carries it as KEDA's string threshold, with average-per-replica semantics
    assert metadata["threshold"] == expected
    assert _trigger(_build(threshold=threshold))["metricType"] == "AverageValue"


def test_warm_capacity_by_default() -> None:
    # GIVEN no scaling options
    # WHEN the ScaledObject is built
    spec = _build()["spec"]

    # THEN one replica always stays warm
    assert spec["minReplicaCount"] == 1


def test_zero_min_replicas_without_opt_in_is_refused() -> None:
    # GIVEN min_replicas 0 without scale_to_zero
    # WHEN / THEN the builder refuses, naming the opt-in
    with pytest.raises(ValueError, match="scale_to_zero=True"):
        _build(min_replicas=0)


def test_scale_to_zero_opt_in_sets_min_zero() -> None:
    # GIVEN a model that opts into scale to zero
    # WHEN the ScaledObject is built
    spec = _build(scale_to_zero=True)["spec"]

    # THEN it may reach zero, after the cooldown
    assert spec["minReplicaCount"] == 0
    assert spec["cooldownPeriod"] == ScalingBehavior().cooldown_s


def test_scale_to_zero_wakes_on_gateway_requests_for_the_model() -> None:
    # GIVEN a model at zero replicas exports no queue of its own
    # WHEN its ScaledObject is built with scale_to_zero
    trigger = _trigger(_build(scale_to_zero=True), "gateway-requests")

    # THEN a gateway trigger activates it on any request the gateway saw for that model
    assert (
        'sum(rate(inferstack_gateway_model_requests_total{model="llama-8b",inferstack_site=""}[1m]))'
        in trigger["metadata"]["query"]
    )
    assert trigger["metadata"]["activationThreshold"] == "0"


def test_gateway_wake_trigger_never_asks_for_more_than_one_replica() -> None:
    # GIVEN a scale-to-zero model whose queue target is 2 waiting requests per replica
    # WHEN its ScaledObject is built
    trigger = _trigger(_build(scale_to_zero=True, threshold=2), "gateway-requests")
    # THEN the request-rate trigger's value is capped at 1 against a per-replica target of 1: the HPA takes the highest
    # trigger, so a model answering 30 req/s with an empty queue must not get ceil(30 / 2) = 15 replicas from it
    expr = promql_parser.parse(trigger["metadata"]["query"])
    assert (expr.func.name, str(expr.args[1])) == ("clamp_max", "1")
    assert (trigger["metricType"], trigger["metadata"]["threshold"]) == ("AverageValue", "1")


def test_warm_model_has_only_the_queue_trigger() -> None:
    # GIVEN a warm model
    # WHEN its ScaledObject is built
    names = [t["name"] for t in _build()["spec"]["triggers"]]

    # THEN only queue depth drives it
    assert names == ["queue-depth"]


def test_scale_up_is_immediate_and_scale_down_is_stabilized() -> None:
    # GIVEN default behavior
    # WHEN the ScaledObject is built
    behavior = _build()["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]

    # THEN bursts get replicas at the next poll and replicas are removed only after a 10 min window, one at a time
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]


def test_behavior_is_configurable() -> None:
    # GIVEN a custom scale-down window
    # WHEN the ScaledObject is built with it
    behavior = _build(behavior=ScalingBehavior(scale_down_stabilization_s=900))["spec"]["advanced"]
    # THEN the HPA gets it
    assert behavior["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 900


def test_prometheus_outage_does_not_scale_in() -> None:
    # GIVEN Prometheus unreachable for a few polls
    # WHEN KEDA falls back
    fallback = _build(min_replicas=2)["spec"]["fallback"]

    # THEN it keeps the current count (or the floor), never fewer
    assert fallback == {"failureThreshold": 3, "replicas": 2, "behavior": "currentReplicasIfHigher"}


def test_deployment_target() -> None:
    # GIVEN a single-node model
    # WHEN its ScaledObject is built
    ref = _build()["spec"]["scaleTargetRef"]
    # THEN it scales the Deployment named after the model
    assert ref == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-8b"}


def test_leaderworkerset_target_scales_whole_groups() -> None:
    # GIVEN a multi-node model served by a LeaderWorkerSet
    # WHEN its ScaledObject is built
    ref = _build(target_kind="LeaderWorkerSet", target_name="llama-405b-lws")["spec"]["scaleTargetRef"]

    # THEN it targets the LWS scale subresource (replicas = groups)
    assert ref == {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "llama-405b-lws"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"threshold": 0}, "threshold"),
        ({"max_replicas": 0}, "max_replicas"),
        ({"engine": "tgi"}, "engine"),
        ({"model": "Llama_8B"}, "DNS-1123"),
        ({"target_kind": "StatefulSet"}, "target_kind"),
    ],
)
def test_invalid_inputs_name_the_field(overrides: dict[str, Any], message: str) -> None:
    # GIVEN an input outside what KEDA or Kubernetes accepts
    # WHEN / THEN the error names the offending field
    with pytest.raises(ValueError, match=message):
        _build(**overrides)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("scale_to_zero", [False, True])
@pytest.mark.parametrize("target_kind", ["Deployment", "LeaderWorkerSet"])
def test_validates_against_keda_crd(engine: Engine, scale_to_zero: bool, target_kind: str) -> None:
    # GIVEN every combination the builder distinguishes
    # WHEN the ScaledObject is checked against KEDA v2.20.2's CRD, strictly
    # THEN it is valid
    assert validate(_build(engine=engine, scale_to_zero=scale_to_zero, target_kind=target_kind)) == []


def test_queue_query_parses_as_promql() -> None:
    # GIVEN each engine's queue query
    # WHEN Prometheus' grammar parses it (promql-parser, a port of the Prometheus parser)
    # THEN it is well formed
    for engine in ENGINES:
        promql_parser.parse(queue_query(engine, "m", "ns"))


def test_scale_to_zero_wakes_on_requests_for_route_aliases_that_reach_the_model() -> None:
    # GIVEN a scale-to-zero model that the gateway route alias "chat" may send requests to; the gateway counts a
    # request under the alias the client asked for
    trigger = _trigger(_build(scale_to_zero=True, wake_aliases=("chat",)), "gateway-requests")
    # WHEN / THEN requests for "chat" wake the model as well as requests for its own name
    assert (
        'inferstack_gateway_model_requests_total{model=~"chat|llama-8b",inferstack_site=""}'
        in trigger["metadata"]["query"]
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_on_a_hub_every_query_counts_its_own_series_only(engine: Engine) -> None:
    # GIVEN a hub whose Prometheus receives edge sites' samples, each labelled inferstack_site=<site> (a site may serve
    # a model, or route alias, of the same name)
    triggers = _build(engine=engine, scale_to_zero=True)["spec"]["triggers"]
    assert [t["name"] for t in triggers] == ["queue-depth", "gateway-requests"]  # its queue, and its wake on requests
    # WHEN each of a model's triggers is parsed
    for trigger in triggers:
        # THEN every series it reads is the cluster's own (no site label): a site's queue or requests never scale it
        assert reads_own_series_only(trigger["metadata"]["query"]) == [], trigger["name"]
