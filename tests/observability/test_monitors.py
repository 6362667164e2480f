"""ServiceMonitors and PodMonitors: what Prometheus scrapes, and how series get their model label."""

from __future__ import annotations

from typing import Any

import pytest

from components.catalog.charts import CHARTS
from components.observability.monitors import (
    engine_pod_monitor,
    gateway_service_monitor,
    redis_exporter_service_monitor,
)
from crdcheck import validate


def _seconds(interval: str) -> int:
    assert interval.endswith("s"), interval
    return int(interval[:-1])


def test_vllm_is_scraped_on_its_api_port() -> None:
    # GIVEN the vLLM PodMonitor
    # WHEN it is rendered
    endpoint = engine_pod_monitor("vllm", "serving")["spec"]["podMetricsEndpoints"][0]
    # THEN Prometheus scrapes vLLM's API port (named "http"; vLLM serves /metrics there)
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")


def test_triton_is_scraped_on_its_openai_frontend_port() -> None:
    # GIVEN the Triton PodMonitor
    # WHEN it is rendered
    endpoint = engine_pod_monitor("triton", "serving")["spec"]["podMetricsEndpoints"][0]
    # THEN Prometheus scrapes the OpenAI frontend's port (named "http"), which serves Triton's /metrics
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")


def _all_monitors() -> list[dict[str, Any]]:
    return [
        engine_pod_monitor("vllm", "serving"),
        engine_pod_monitor("triton", "serving"),
        gateway_service_monitor("gateway"),
        redis_exporter_service_monitor("monitoring"),
    ]


@pytest.mark.parametrize("monitor", _all_monitors(), ids=lambda m: m["metadata"]["name"])
def test_scrape_interval_is_15s_or_less(monitor: dict[str, Any]) -> None:
    # GIVEN any monitor the kit renders
    spec = monitor["spec"]
    endpoints = spec.get("podMetricsEndpoints") or spec["endpoints"]
    # WHEN / THEN it scrapes at 15 s or faster (issue 4)
    assert all(_seconds(e["interval"]) <= 15 for e in endpoints)


@pytest.mark.parametrize("monitor", _all_monitors(), ids=lambda m: m["metadata"]["name"])
def test_kube_prometheus_stack_picks_the_monitor_up(monitor: dict[str, Any]) -> None:
    # GIVEN any monitor the kit renders
    # WHEN / THEN it carries the release label the chart's Prometheus selects on
    assert monitor["metadata"]["labels"]["release"] == CHARTS["kube-prometheus-stack"].name


def test_redis_exporter_monitor_matches_the_chart_service() -> None:
    # GIVEN the redis exporter chart's Service labels and port name
    # WHEN the ServiceMonitor is rendered for a release
    spec = redis_exporter_service_monitor("monitoring", release="cache-exporter")["spec"]
    # THEN it selects that release's Service on its named port
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "prometheus-redis-exporter",
        "app.kubernetes.io/instance": "cache-exporter",
    }
    assert spec["endpoints"][0]["port"] == "redis-exporter"


def test_gateway_selector_is_configurable() -> None:
    # GIVEN the gateway Service labelled differently
    # WHEN the ServiceMonitor is rendered with those labels
    spec = gateway_service_monitor("gateway", selector_labels={"app": "gw"})["spec"]
    # THEN it selects them
    assert spec["selector"] == {"matchLabels": {"app": "gw"}}


@pytest.mark.parametrize("monitor", _all_monitors(), ids=lambda m: m["metadata"]["name"])
def test_validates_against_prometheus_operator_crd(monitor: dict[str, Any]) -> None:
    # GIVEN any monitor the kit renders
    # WHEN it is checked strictly against prometheus-operator v0.93.0's CRD
    # THEN it is valid
    assert validate(monitor) == []
