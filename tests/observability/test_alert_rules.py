"""PrometheusRules: per-model SLO thresholds, engine-specific metrics, platform alerts, golden render."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import promql_parser
import pytest

from components.observability.alerts import FATAL_XIDS, ModelSlo, model_slos, prometheus_rule
from components.observability.observability import FORWARDED_METRICS
from crdcheck import validate
from helpers import ROOT, helm_release, raw_environment
from inferstack_cli.plan import Plan
from promql import reads_own_series_only, selectors
from stacks.environment import load_environment


def _rules(rule: dict[str, Any], group: str) -> list[dict[str, Any]]:
    return next(g["rules"] for g in rule["spec"]["groups"] if g["name"] == group)


def _alerts(rule: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == name]


def _for_model(alerts: list[dict[str, Any]], model: str) -> dict[str, Any]:
    matches = [a for a in alerts if f'"{model}"' in a["expr"]]
    assert len(matches) == 1, matches
    return matches[0]


@pytest.mark.parametrize(("model", "threshold_s"), [("llama-8b", "0.11"), ("llama-70b-trt", "0.165")])
def test_ttft_burn_fires_at_target_times_1_1_for_5m(fleet: list[ModelSlo], model: str, threshold_s: str) -> None:
    # GIVEN models with TTFT p99 targets of 100 ms and 150 ms
    # WHEN the rules are rendered
    alert = _for_model(_alerts(prometheus_rule(fleet), "InferstackTTFTSLOBurn"), model)
    # THEN each alert compares that model's p99 with its own target x 1.1, in seconds, held 5 minutes
    assert alert["expr"] == (
        "inferstack_model:ttft_seconds:p99_rate5m"
        f'{{namespace="serving",inferstack_model="{model}",inferstack_site=""}} > {threshold_s}'
    )
    assert alert["for"] == "5m"


def test_vllm_ttft_p99_is_recorded_from_its_own_histogram() -> None:
    # GIVEN the recording rules
    recorded = [
        r
        for r in _rules(prometheus_rule([]), "inferstack.recording")
        if r["record"] == "inferstack_model:ttft_seconds:p99_rate5m" and r["labels"]["engine"] == "vllm"
    ]
    # WHEN / THEN vLLM's histogram feeds the shared series, in seconds
    assert len(recorded) == 1
    assert 'rate(vllm:time_to_first_token_seconds_bucket{inferstack_site=""}[5m])' in recorded[0]["expr"]


def test_no_rule_reads_tritons_first_response_histogram(fleet: list[ModelSlo]) -> None:
    # GIVEN a fleet with a Triton model; Triton exports nv_inference_first_response_histogram_ms only with
    # --metrics-config histogram_latencies=true, for which its OpenAI frontend (r25.09) has no flag
    # WHEN the rules are rendered
    exprs = [r["expr"] for g in prometheus_rule(fleet)["spec"]["groups"] for r in g["rules"]]
    # THEN none reads it
    assert not [e for e in exprs if "nv_inference_first_response" in e]


def test_triton_ttft_p99_is_recorded_from_the_gateway_per_model(fleet: list[ModelSlo]) -> None:
    # GIVEN a Triton model behind the gateway in namespace "gateway"
    # WHEN the rules are rendered
    recorded = [
        r
        for r in _rules(prometheus_rule(fleet), "inferstack.recording")
        if r["record"] == "inferstack_model:ttft_seconds:p99_rate5m" and r["labels"]["engine"] == "triton"
    ]
    # THEN its TTFT p99 is the gateway's histogram of its upstream, labelled as the engine series would be
    assert recorded == [
        {
            "record": "inferstack_model:ttft_seconds:p99_rate5m",
            "expr": "histogram_quantile(0.99, sum by (le) (rate(inferstack_gateway_upstream_ttft_seconds_bucket"
            '{namespace="gateway",upstream="llama-70b-trt",inferstack_site=""}[5m])))',
            "labels": {
                "engine": "triton",
                "source": "gateway",
                "namespace": "serving",
                "inferstack_model": "llama-70b-trt",
            },
        }
    ]


def test_a_triton_model_behind_two_gateways_has_its_ttft_from_both() -> None:
    # GIVEN a Triton model in front of which two teams run gateways (InferenceServerArgs.gateway_namespace admits
    # both), named twice and in any order
    slo = ModelSlo(
        "llama",
        "triton",
        ttft_p99_ms=150,
        itl_p99_ms=25,
        namespace="ml",
        gateway_namespace=["team-b", "team-a", "team-b"],
    )
    # WHEN the rules are rendered
    (recorded,) = [r for r in _rules(prometheus_rule([slo]), "inferstack.recording") if r["labels"].get("source")]
    # THEN its TTFT p99 merges the buckets of both gateways' histograms: one gateway's streams alone would hide a slow
    # model behind the other
    assert recorded["expr"] == (
        "histogram_quantile(0.99, sum by (le) (rate(inferstack_gateway_upstream_ttft_seconds_bucket"
        '{namespace=~"team-b|team-a",upstream="llama",inferstack_site=""}[5m])))'
    )
    assert slo.gateway_namespaces == ("team-b", "team-a")
    assert _alerts(prometheus_rule([slo]), "InferstackTTFTSLOBurn")


def test_model_slos_takes_every_gateway_in_front_of_the_models() -> None:
    # GIVEN the bundled edge site's models, fronted by two teams' gateways, their SLOs made with model_slos
    env = load_environment(raw_environment("edge"), "stacks/Pulumi.edge.yaml")
    nodes = {n.name: n for n in env.nodes}
    slos = model_slos(env.models, "ml", nodes.__getitem__, ("team-a", "team-b"))
    # THEN each chat model's SLO names both, and the embedder none (no gateway relays it)
    assert {s.name: s.gateway_namespaces for s in slos} == {"llama-3b": ("team-a", "team-b"), "minilm": ()}


@pytest.mark.parametrize(
    ("gateways", "message"),
    [
        ([], r"ModelSlo.gateway_namespace: an empty list"),
        (["team-a", "Team_B"], r"ModelSlo.gateway_namespace\[\]: 'Team_B'"),
    ],
)
def test_a_bad_list_of_gateways_is_refused_by_field(gateways: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelSlo("m", "triton", ttft_p99_ms=100, itl_p99_ms=20, namespace="s", gateway_namespace=gateways)  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ["triton", "llamacpp"])
def test_no_ttft_alert_where_nothing_measures_ttft(engine: str) -> None:
    # GIVEN a model whose engine exports no TTFT histogram and that no gateway relays
    slo = ModelSlo("m", engine, ttft_p99_ms=100, itl_p99_ms=20, namespace="serving")  # type: ignore[arg-type]
    # WHEN the rules are rendered
    rule = prometheus_rule([slo])
    # THEN it gets no TTFT alert (one that could never fire) and no TTFT recording of its own
    assert _alerts(rule, "InferstackTTFTSLOBurn") == []
    assert not [r for r in _rules(rule, "inferstack.recording") if r["labels"].get("inferstack_model") == "m"]
    assert _alerts(rule, "InferstackModelUnavailable")


def test_itl_burn_only_where_the_engine_exports_itl(fleet: list[ModelSlo]) -> None:
    # GIVEN a vLLM and a Triton model
    # WHEN the rules are rendered
    itl = _alerts(prometheus_rule(fleet), "InferstackITLSLOBurn")
    # THEN only vLLM models get an ITL alert (Triton exports no inter-token histogram)
    assert _for_model(itl, "llama-8b")["expr"].endswith("> 0.022")
    assert not [a for a in itl if '"llama-70b-trt"' in a["expr"]]


def test_sustained_queue_alert(fleet: list[ModelSlo]) -> None:
    # GIVEN a model with the default per-replica queue alert level
    # WHEN the rules are rendered
    alert = _for_model(_alerts(prometheus_rule(fleet), "InferstackQueueSustained"), "llama-8b")
    # THEN it fires when more than 4 requests wait per replica for 10 minutes
    assert alert["expr"].endswith('inferstack_model="llama-8b",inferstack_site=""} > 4')
    assert alert["for"] == "10m"


def test_the_sustained_queue_alert_sits_above_each_models_own_keda_target() -> None:
    # GIVEN prod's models, the 8B one on the balanced profile (KEDA aims for 4 waiting requests per replica; its larger
    # batches need a looser ITL target) and the 70B one with autoscaling.queueDepth 8
    raw = raw_environment("prod")
    raw["models"][0].update(profile="balanced", slo={"ttftP99Ms": 500, "itlP99Ms": 200})
    raw["models"][1]["autoscaling"] = {**raw["models"][1]["autoscaling"], "queueDepth": 8}
    env = load_environment(raw, "stacks/Pulumi.prod.yaml")
    # WHEN their rules are rendered
    alerts = _alerts(prometheus_rule(model_slos(env.models, "serving", env.pool)), "InferstackQueueSustained")
    # THEN each fires at 4 x its own target, not at a fixed 4 that KEDA's normal load per replica already exceeds
    assert _for_model(alerts, "llama-8b")["expr"].endswith("} > 16")
    assert _for_model(alerts, "llama-70b")["expr"].endswith("} > 32")


def test_zero_ready_replicas_for_a_deployment(fleet: list[ModelSlo]) -> None:
    # GIVEN a model served by a Deployment
    # WHEN the rules are rendered
    alert = _for_model(_alerts(prometheus_rule(fleet), "InferstackModelUnavailable"), "llama-8b")
    # THEN it fires when none is available while some are wanted (a model scaled to zero stays quiet)
    assert alert["expr"] == (
        '(kube_deployment_status_replicas_available{namespace="serving",inferstack_site="",deployment="llama-8b"} '
        '== 0) and (kube_deployment_spec_replicas{namespace="serving",inferstack_site="",deployment="llama-8b"} > 0)'
    )
    assert alert["labels"] == {"severity": "critical", "inferstack_model": "llama-8b"}


def test_zero_ready_groups_for_a_leaderworkerset(fleet: list[ModelSlo]) -> None:
    # GIVEN a multi-node model served by a LeaderWorkerSet
    # WHEN the rules are rendered
    alert = _for_model(_alerts(prometheus_rule(fleet), "InferstackModelUnavailable"), "llama-405b")
    # THEN readiness is read from its leader StatefulSet
    assert alert["expr"].startswith(
        '(kube_statefulset_status_replicas_ready{namespace="serving",inferstack_site="",statefulset="llama-405b"} == 0)'
    )


def test_fatal_xids_page() -> None:
    # GIVEN the platform alerts
    alert = _alerts(prometheus_rule([]), "InferstackGpuXidFatal")[0]
    # WHEN / THEN every XID needing a reset or drain is matched, and the alert is critical
    for code in FATAL_XIDS:
        assert f'max_over_time(DCGM_FI_DEV_XID_ERRORS{{inferstack_site=""}}[5m]) == {code})' in alert["expr"]
    assert alert["labels"]["severity"] == "critical"


def test_a_new_xid_warns_and_a_sticky_one_resolves() -> None:
    # GIVEN the platform alerts, and DCGM_FI_DEV_XID_ERRORS as dcgm-exporter 4.8 exports it: the last XID held for
    # ever (until DCGM restarts), one series per code (label err_code = the value)
    alert = _alerts(prometheus_rule([]), "InferstackGpuXidError")[0]
    # WHEN its expression is parsed
    expr = promql_parser.parse(alert["expr"])
    # THEN it keeps a non-zero XID series only if the same GPU had no series with that code 5 minutes earlier, so a
    # GPU whose last XID stays 31 for an hour warns for 5 minutes and then resolves (a plain "> 0" warned for ever)
    assert str(expr.op) == "unless"
    assert str(expr.lhs) == 'DCGM_FI_DEV_XID_ERRORS{inferstack_site=""} > 0'
    assert list(expr.modifier.matching.labels) == ["UUID", "err_code"]
    assert (expr.rhs.name, expr.rhs.offset.total_seconds()) == ("DCGM_FI_DEV_XID_ERRORS", 300)
    assert alert["labels"]["severity"] == "warning"


def test_cache_unavailable() -> None:
    # GIVEN the platform alerts
    # WHEN / THEN redis_up == 0 for a minute is critical
    alert = _alerts(prometheus_rule([]), "InferstackCacheDown")[0]
    assert (alert["expr"], alert["for"], alert["labels"]["severity"]) == (
        'redis_up{inferstack_site="",service="prometheus-redis-exporter"} == 0',
        "1m",
        "critical",
    )


def test_each_cache_is_watched_through_its_own_exporter() -> None:
    # GIVEN the stack's cache and a second team's, each with its own exporter
    rule = prometheus_rule(
        [], caches=[(None, "prometheus-redis-exporter"), ("team-b", "prometheus-redis-exporter-team-b")]
    )
    # WHEN its cache alerts are read THEN each cache's read only its exporter's series, and the second's is named
    down = _alerts(rule, "InferstackCacheDown")
    absent = _alerts(rule, "InferstackCacheMetricsAbsent")
    assert [a["expr"] for a in down] == [
        'redis_up{inferstack_site="",service="prometheus-redis-exporter"} == 0',
        'redis_up{inferstack_site="",service="prometheus-redis-exporter-team-b"} == 0',
    ]
    # absent() of one exporter's series: with a single selector for both, one exporter's series hid the other's loss
    assert [a["expr"] for a in absent] == [
        'absent(redis_up{inferstack_site="",service="prometheus-redis-exporter"})',
        'absent(redis_up{inferstack_site="",service="prometheus-redis-exporter-team-b"})',
    ]
    assert [a["labels"].get("cache") for a in down] == [None, "team-b"]
    assert [a["annotations"]["summary"] for a in down] == [
        "The response cache is unreachable",
        "The response cache team-b is unreachable",
    ]


def test_on_a_hub_every_rule_reads_its_own_series_only(fleet: list[ModelSlo]) -> None:
    # GIVEN a hub whose Prometheus also stores what its edge sites forward, each sample labelled inferstack_site=<site>
    # (their raw series, their recorded series and their ALERTS; a site may serve a model of the same name)
    rule = prometheus_rule(fleet, gateways=[("gateway", "gateway")], receives_sites=True)
    # WHEN each rule is parsed (but the sites' heartbeat, whose subject is the sites: below)
    own = [r for group in rule["spec"]["groups"] if group["name"] != "inferstack.sites" for r in group["rules"]]
    assert len(own) > 20 and any(r.get("alert") == "InferstackGatewayUnavailable" for r in own)
    for r in own:
        # THEN every series it reads is the cluster's own: no site's model is measured against the hub's target or
        # merged into its percentile, a site's redis_up does not hide the hub's missing exporter from absent(), and no
        # series a site already sends is recorded again
        assert reads_own_series_only(r["expr"]) == [], r.get("alert") or r.get("record")


def test_a_hub_warns_when_a_site_stops_forwarding_and_forgets_it_after_a_day(fleet: list[ModelSlo]) -> None:
    # GIVEN a hub that receives its sites' samples, and a cluster that does not
    hub, alone = prometheus_rule(fleet, receives_sites=True), prometheus_rule(fleet)
    # WHEN their site rules are read
    assert "inferstack.sites" not in {g["name"] for g in alone["spec"]["groups"]}
    record, alert = _rules(hub, "inferstack.sites")
    # THEN the hub records, per site, when the site's Watchdog heartbeat (its ALERTS, which every site forwards) last
    # arrived, reading the sites' series only and never its own (the hub's own Watchdog says nothing of a site)
    assert record["record"] == "inferstack_site:last_sample_timestamp_seconds"
    recorded = promql_parser.parse(record["expr"])
    assert recorded.modifier is not None and list(recorded.modifier.labels) == ["inferstack_site"]
    (heartbeat,) = selectors(recorded)
    matchers = {(m.name, str(m.op), m.value) for m in heartbeat.matchers.matchers}
    assert heartbeat.name == "ALERTS" and ("alertname", "MatchOp.Equal", "Watchdog") in matchers
    assert ("inferstack_site", "MatchOp.NotEqual", "") in matchers
    assert "ALERTS" in FORWARDED_METRICS
    # and warns when the newest heartbeat is over 10 minutes old, remembering a silent site for one day
    assert alert["alert"] == "InferstackSiteSilent" and alert["labels"]["severity"] == "warning"
    assert alert["expr"] == "time() - max_over_time(inferstack_site:last_sample_timestamp_seconds[1d]) > 600"
    assert "{{ $labels.inferstack_site }}" in alert["annotations"]["summary"]
    # and the manifest is one the operator accepts
    assert validate(hub) == []


@pytest.mark.parametrize(("stack", "watches_sites"), [("onprem", True), ("prod", False), ("edge", False)])
def test_the_bundled_hub_watches_its_sites(stack: str, watches_sites: bool, plan_of: Callable[[str], Plan]) -> None:
    # GIVEN a bundled stack: onprem receives the edge site's samples (observability.remoteWriteReceiver)
    plan = plan_of(stack)
    (rule,) = [r for r in plan.resources if r.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule"]
    # WHEN / THEN only the hub watches sites' heartbeats
    groups = {g["name"] for g in rule.inputs["spec"]["groups"]}
    assert ("inferstack.sites" in groups) is watches_sites
    # and no stack turns off the chart's Watchdog, every site's heartbeat (defaultRules.rules.general, on by default)
    release = helm_release(plan.resources, "kube-prometheus-stack")
    rules = release.inputs["values"].get("defaultRules", {})
    assert rules.get("create", True) and rules.get("rules", {}).get("general", True)


def test_the_gateway_pages_when_no_replica_is_ready_or_its_answers_fail() -> None:
    # GIVEN a stack whose gateway runs in namespace "gateway"
    rule = prometheus_rule([], gateways=[("gateway", "gateway")])
    # WHEN its gateway alerts are read
    unavailable = _alerts(rule, "InferstackGatewayUnavailable")[0]
    errors = _alerts(rule, "InferstackGatewayErrors")[0]
    # THEN no ready replica pages after 2 minutes (a gateway scaled to nothing on purpose stays quiet)
    assert unavailable["expr"] == (
        '(kube_deployment_status_replicas_available{namespace="gateway",inferstack_site="",deployment="gateway"} '
        '== 0) and (kube_deployment_spec_replicas{namespace="gateway",inferstack_site="",deployment="gateway"} > 0)'
    )
    assert (unavailable["for"], unavailable["labels"]["severity"]) == ("2m", "critical")
    # and more than 5 % of answers being 5xx for 5 minutes pages, once there is traffic to judge: 429 (the key's
    # limits) and 499 (the client left) are not the gateway failing
    expr = promql_parser.parse(errors["expr"])
    assert str(expr.op) == "and"
    ratio, traffic = expr.lhs.expr, expr.rhs.expr  # each side is parenthesised
    assert (str(ratio.op), ratio.rhs.val) == (">", 0.05)
    assert (str(traffic.op), traffic.rhs.val) == (">", 0.1)
    (failed,) = selectors(ratio.lhs.lhs)
    (answered,) = selectors(ratio.lhs.rhs)
    assert {(m.name, m.value) for m in failed.matchers.matchers} >= {("status", "5..")}
    assert "status" not in {m.name for m in answered.matchers.matchers}
    assert (errors["for"], errors["labels"]["severity"]) == ("5m", "critical")


def test_each_gateway_has_its_own_alerts_told_apart_by_their_labels() -> None:
    # GIVEN two teams' gateways, each in its own namespace
    rule = prometheus_rule([], gateways=[("team-b", "team-b-gateway"), ("team-a", "team-a-gateway")])
    # WHEN the gateway alerts are read THEN each gateway has both, watching its own Deployment and series
    for name in ("InferstackGatewayUnavailable", "InferstackGatewayErrors"):
        alerts = _alerts(rule, name)
        assert [(a["labels"]["namespace"], a["labels"]["deployment"]) for a in alerts] == [
            ("team-a", "team-a-gateway"),
            ("team-b", "team-b-gateway"),
        ]
        for alert in alerts:
            namespace = alert["labels"]["namespace"]
            other = "team-b" if namespace == "team-a" else "team-a"
            assert f'namespace="{namespace}"' in alert["expr"] and f'namespace="{other}"' not in alert["expr"]
            assert alert["annotations"]["summary"].startswith(f"{namespace}/{namespace}-gateway: ")


def test_every_alert_has_a_row_in_the_readmes_alert_table(fleet: list[ModelSlo]) -> None:
    # GIVEN every alert the kit renders: models, platform, a cache, a gateway and a hub's site watch
    rule = prometheus_rule(fleet, gateways=[("gateway", "gateway")], receives_sites=True)
    rendered = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    # WHEN the README's "What to watch" table (`| Alert | Fires when |`) is read
    lines = (ROOT / "README.md").read_text().split("| Alert | Fires when |", 1)[1].splitlines()[2:]
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines)
    documented = {name for row in rows for name in re.findall(r"`(Inferstack\w+)`", row.split("|")[1])}
    # THEN each alert a user can be paged or warned by says there when it fires, and the table names no other
    assert documented == rendered


def test_the_readmes_queue_alert_row_gives_each_profiles_target_and_threshold() -> None:
    # GIVEN each latency profile's KEDA target per replica, and the alert's factor over it
    from components.catalog.profiles import PROFILES
    from components.observability.alerts import QUEUE_ALERT_FACTOR

    # WHEN the README's row for InferstackQueueSustained is read
    (row,) = [
        line for line in (ROOT / "README.md").read_text().splitlines() if "| `InferstackQueueSustained` |" in line
    ]
    # THEN it names each profile with its own target (what autoscaling.queueDepth replaces), and then the thresholds,
    # in the profiles' order: the target is not mistaken for the threshold
    targets = ", ".join(
        f"{p.keda_queue_depth_per_replica}{'' if i else ' for'} `{name}`"
        for i, (name, p) in enumerate(PROFILES.items())
    )
    thresholds = ", ".join(str(QUEUE_ALERT_FACTOR * p.keda_queue_depth_per_replica) for p in PROFILES.values())
    assert f"its profile's {targets}: the alert at {thresholds})" in row


def test_without_a_gateway_there_are_no_gateway_alerts(fleet: list[ModelSlo]) -> None:
    # GIVEN a stack without a gateway
    # WHEN / THEN no rule reads the gateway's series as a gateway alert
    rule = prometheus_rule(fleet)
    assert not [
        r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert", "").startswith("InferstackGateway")
    ]


def test_input_order_does_not_change_the_manifest(fleet: list[ModelSlo]) -> None:
    # GIVEN the same models listed in two orders
    # WHEN the rules are rendered
    # THEN the manifests are identical
    assert prometheus_rule(fleet) == prometheus_rule(list(reversed(fleet)))


def test_duplicate_model_is_refused(fleet: list[ModelSlo]) -> None:
    # GIVEN a model listed twice in one namespace
    # WHEN / THEN rendering refuses
    with pytest.raises(ValueError, match="listed twice"):
        prometheus_rule([*fleet, fleet[0]])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"engine": "tgi"}, "ModelSlo.engine"),
        ({"ttft_p99_ms": 0}, "ModelSlo.ttft_p99_ms"),
        ({"namespace": "Serving"}, "ModelSlo.namespace"),
        ({"namespace": "serving\n"}, "ModelSlo.namespace"),  # a `$`-anchored match took the newline
        ({"workload_kind": "StatefulSet"}, "ModelSlo.workload_kind"),
        ({"gateway_namespace": "Gateway"}, "ModelSlo.gateway_namespace"),
    ],
)
def test_invalid_slo_names_the_field(overrides: dict[str, Any], message: str) -> None:
    # GIVEN an SLO outside the allowed values
    args: dict[str, Any] = {"name": "m", "engine": "vllm", "ttft_p99_ms": 100, "itl_p99_ms": 20, "namespace": "s"}
    # WHEN / THEN construction fails naming the field
    with pytest.raises(ValueError, match=message):
        ModelSlo(**(args | overrides))


def test_validates_against_prometheus_operator_crd(fleet: list[ModelSlo]) -> None:
    # GIVEN the rules for a fleet
    # WHEN checked strictly against prometheus-operator v0.93.0's PrometheusRule CRD
    # THEN they are valid
    assert validate(prometheus_rule(fleet)) == []


def test_every_expression_parses_as_promql(fleet: list[ModelSlo]) -> None:
    # GIVEN every rule expression
    # WHEN Prometheus' grammar parses it
    exprs = [rule["expr"] for group in prometheus_rule(fleet)["spec"]["groups"] for rule in group["rules"]]
    assert len(exprs) > 20, "the fleet's SLO recordings and alerts, and the platform's"
    # THEN none is malformed
    for expr in exprs:
        promql_parser.parse(expr)


def test_golden(fleet: list[ModelSlo], golden: Callable[[str, Any], None]) -> None:
    # GIVEN the reference fleet
    # WHEN the rules are rendered
    # THEN they equal the reviewed golden file
    golden("prometheusrule", prometheus_rule(fleet))


def test_golden_check_fails_on_any_change(
    fleet: list[ModelSlo], golden: Callable[[str, Any], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the golden rules and a render that differs by one threshold (never rewritten, even under refresh)
    monkeypatch.delenv("UPDATE_SNAPSHOT", raising=False)
    changed = prometheus_rule([ModelSlo("llama-8b", "vllm", 101, 20, "serving"), *fleet[1:]])
    # WHEN it is compared with the golden file
    # THEN the comparison fails
    with pytest.raises(AssertionError, match="differs from"):
        golden("prometheusrule", changed)
