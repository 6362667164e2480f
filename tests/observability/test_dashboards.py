"""Grafana dashboards: the metrics they chart, their shape, their ConfigMap, golden renders."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import promql_parser
import pytest

from components.observability.dashboards import (
    DASHBOARD_METRICS,
    DASHBOARDS,
    GatewayMetrics,
    cache_dashboard,
    dashboard_configmap,
    gpu_dashboard,
    serving_dashboard,
)
from promql import nodes, selectors

KUBERNETES_VERSION = "1.33"


def _exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def _panel(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    return next(p for p in dashboard["panels"] if p["title"] == title)


def _panel_exprs(dashboard: dict[str, Any], title: str) -> str:
    return "\n".join(t["expr"] for t in _panel(dashboard, title)["targets"])


@pytest.mark.parametrize(
    ("panel", "needles"),
    [
        (
            "Time to first token",
            [
                "histogram_quantile(0.5, sum by (le, inferstack_site, namespace, inferstack_model) "
                "(rate(vllm:time_to_first_token_seconds_bucket{",
                "histogram_quantile(0.99, sum by (le, inferstack_site, namespace, inferstack_model) "
                "(rate(vllm:time_to_first_token_seconds_bucket{",
                # Triton and llama.cpp export no TTFT as the kit runs them: the gateway's per-upstream histogram.
                "histogram_quantile(0.5, sum by (le, inferstack_site, upstream) (rate(inferstack_gateway_upstream_ttft"
                '_seconds_bucket{inferstack_site=~"$site",upstream=~"$model"}[5m])))',
                "histogram_quantile(0.99, sum by (le, inferstack_site, upstream) (rate(inferstack_gateway_upstream_ttft"
                '_seconds_bucket{inferstack_site=~"$site",upstream=~"$model"}[5m])))',
            ],
        ),
        ("Inter-token latency", ["(0.5, ", "(0.99, ", "vllm:inter_token_latency_seconds_bucket{"]),
        ("Queue depth", ["vllm:num_requests_waiting{", 'nv_trt_llm_request_metrics{request_type="waiting",']),
        ("KV-cache usage", ["vllm:kv_cache_usage_perc{", 'kv_cache_block_type="used"', 'kv_cache_block_type="max"']),
        ("Request rate", ["rate(vllm:request_success_total{", "rate(nv_inference_request_success{"]),
        ("Replicas", ["kube_deployment_status_replicas_available", "kube_statefulset_status_replicas_ready"]),
    ],
)
def test_serving_dashboard_charts_each_engine(panel: str, needles: list[str]) -> None:
    # GIVEN the serving dashboard
    # WHEN a panel's queries are read
    exprs = _panel_exprs(serving_dashboard(), panel)
    # THEN they read the named metrics of both engines
    for needle in needles:
        assert needle in exprs


def test_serving_panels_filter_by_model_and_namespace() -> None:
    # GIVEN the serving dashboard's per-model panels (the replica panel reads kube-state-metrics: no model label)
    panels = [p for p in serving_dashboard()["panels"] if p["title"] != "Replicas"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    # WHEN / THEN every query honours the model and namespace variables; the gateway's TTFT, scraped in the gateway's
    # namespace, selects the model by its upstream (named after the model)
    engine = [e for e in exprs if "inferstack_gateway_" not in e]
    gateway = [e for e in exprs if "inferstack_gateway_" in e]
    assert all('inferstack_model=~"$model"' in e and 'namespace=~"$namespace"' in e for e in engine)
    assert gateway and all('upstream=~"$model"' in e for e in gateway)


def test_no_panel_reads_tritons_first_response_histogram() -> None:
    # GIVEN every dashboard; the Triton OpenAI frontend (r25.09) cannot turn on histogram_latencies
    # WHEN / THEN no query reads nv_inference_first_response_histogram_ms
    assert not [e for build in DASHBOARDS for e in _exprs(build()) if "nv_inference_first_response" in e]


def test_cache_hit_rate_counts_exact_and_semantic_hits_over_cacheable_requests() -> None:
    # GIVEN the gateway & cache dashboard
    # WHEN the hit-rate query is read
    expr = _panel_exprs(cache_dashboard(), "Cache hit rate")
    # THEN hits of both caches are divided by every request that was looked up (bypass excluded)
    assert expr == (
        f"sum by (inferstack_site, model) (rate({GatewayMetrics.REQUESTS_TOTAL}"
        '{inferstack_site=~"$site",model=~"$model",cache=~"hit|semantic"}[5m])) / '
        f"sum by (inferstack_site, model) (rate({GatewayMetrics.REQUESTS_TOTAL}"
        '{inferstack_site=~"$site",model=~"$model",cache!="bypass"}[5m]))'
    )


@pytest.mark.parametrize(
    ("panel", "metric", "unit"),
    [
        ("GPU utilization", "DCGM_FI_DEV_GPU_UTIL", "percent"),
        ("GPU memory used", "DCGM_FI_DEV_FB_USED", "mbytes"),
        ("GPU temperature", "DCGM_FI_DEV_GPU_TEMP", "celsius"),
    ],
)
def test_gpu_dashboard_reads_dcgm(panel: str, metric: str, unit: str) -> None:
    # GIVEN the GPU dashboard
    found = _panel(gpu_dashboard(), panel)
    # WHEN / THEN the panel charts the DCGM field in its unit
    assert found["targets"][0]["expr"].startswith(metric + "{")
    assert found["fieldConfig"]["defaults"]["unit"] == unit


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_every_query_parses_as_promql(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard, with Grafana's variables substituted as Grafana would
    exprs = _exprs(build())
    assert exprs
    for expr in exprs:
        concrete = expr.replace("$model", "m").replace("$namespace", "n").replace("$node", "h").replace("$site", "s")
        # WHEN / THEN Prometheus' grammar accepts the query
        promql_parser.parse(concrete)


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_on_a_hub_each_sites_series_stay_apart_and_named(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard on a hub whose Prometheus stores its edge sites' samples too, each labelled
    # inferstack_site=<site> (a site may serve a model, run a cache or a GPU of the same name as the hub's)
    dashboard = build()
    # WHEN its variables and queries are read
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    # THEN it has a site variable, whose "All" also matches the hub's own series (no site label)
    assert variables["site"]["query"]["query"] == "label_values(inferstack_site)"
    assert variables["site"]["allValue"] == ".*"
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            tree = promql_parser.parse(target["expr"].replace("$", ""))
            # every series read honours the site variable
            for vs in selectors(tree):
                assert any(m.name == "inferstack_site" and m.value == "site" for m in vs.matchers.matchers), vs
            # no sum, max or average merges two sites' series into one line, and the legend names the site
            for agg in nodes(tree):
                if isinstance(agg, promql_parser.AggregateExpr):
                    assert agg.modifier is not None and "inferstack_site" in agg.modifier.labels, target["expr"]
            assert "{{inferstack_site}}" in target["legendFormat"], panel["title"]


def _metrics_read(query: str) -> set[str]:
    """The metric names a panel query or a ``label_values(<selector>, <label>)`` variable query reads: selectors'
    names, and the alternatives of a ``__name__=~`` matcher. A variable with no selector (a label across every series)
    reads no metric of its own."""
    import promql_parser

    if query.startswith("label_values("):
        inner = query.removeprefix("label_values(").removesuffix(")")
        query = inner.rpartition(",")[0].strip() if "," in inner else ""
        if not query or query.isidentifier():  # label_values(<label>): a label, no metric
            return set()
    names: set[str] = set()
    for vs in selectors(promql_parser.parse(query.replace("$", ""))):
        if vs.name:
            names.add(vs.name)
        for m in vs.matchers.matchers:
            if m.name == "__name__":
                names.update(m.value.split("|"))
    return names


def test_dashboard_metrics_lists_exactly_what_the_dashboards_read() -> None:
    # GIVEN every panel and variable query of every dashboard
    read: set[str] = set()
    for build in DASHBOARDS:
        dashboard = build()
        read.update(name for expr in _exprs(dashboard) for name in _metrics_read(expr))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                read.update(_metrics_read(variable["query"]["query"]))
    # WHEN / THEN DASHBOARD_METRICS, which an edge site forwards to its hub, is that set: none missing (a hub panel
    # would stay empty for every site), none extra (samples sent for nothing)
    assert read and set(DASHBOARD_METRICS) == read
    assert list(DASHBOARD_METRICS) == sorted(DASHBOARD_METRICS)


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_panels_are_unique_and_inside_the_grid(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard
    panels = build()["panels"]
    # WHEN its layout is read
    ids = [p["id"] for p in panels]
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                cells.add((x, y))
    # THEN ids are unique and no two panels overlap
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_every_panel_uses_the_datasource_variable(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard
    dashboard = build()
    # WHEN / THEN every panel and target queries the selectable Prometheus datasource
    assert dashboard["templating"]["list"][0]["name"] == "datasource"
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_rendering_is_deterministic(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard function
    # WHEN it is called twice
    # THEN the output is identical (no clocks, no random ids)
    assert build() == build()


def test_configmap_carries_the_sidecar_label() -> None:
    # GIVEN a dashboard
    # WHEN it is wrapped for the Grafana sidecar
    cm = dashboard_configmap(serving_dashboard())
    # THEN the ConfigMap is labelled for the sidecar and lives in Grafana's namespace
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert list(cm["data"]) == ["inferstack-serving.json"]


def test_configmap_round_trips_the_dashboard() -> None:
    # GIVEN a dashboard wrapped in a ConfigMap
    dashboard = gpu_dashboard()
    # WHEN its data is parsed back
    # THEN it is the same dashboard
    assert json.loads(dashboard_configmap(dashboard)["data"]["inferstack-gpus.json"]) == dashboard


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_configmap_passes_kubernetes_validate_strict(build: Callable[[], dict[str, Any]]) -> None:
    # GIVEN a dashboard ConfigMap
    # WHEN the official Kubernetes OpenAPI schema checks it, rejecting unknown fields
    # THEN it is valid (kubernetes-validate raises otherwise)
    kubernetes_validate.validate(dashboard_configmap(build()), KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("build", DASHBOARDS, ids=lambda f: f.__name__)
def test_golden(build: Callable[[], dict[str, Any]], golden: Callable[[str, Any], None]) -> None:
    # GIVEN a dashboard
    dashboard = build()
    # WHEN it is rendered
    # THEN it equals the reviewed golden file
    golden(f"dashboard-{dashboard['uid']}", dashboard)
