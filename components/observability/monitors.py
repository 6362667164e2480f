"""Pure builders for the prometheus-operator monitors that scrape the engines, the gateway and Redis."""

from __future__ import annotations

import re
from typing import Any, Final

from components.catalog.charts import prometheus_selector_labels
from components.kube.labels import GATEWAY_POD_LABELS
from components.kube.objects import MANAGED_BY, check_name
from components.observability.dashboards import (
    ENGINE_POD_LABEL,
    ENGINES,
    MODEL_LABEL,
    MODEL_POD_LABEL,
    Engine,
)

# --- scraping: prometheus-operator monitors ---------------------------------------------------------------

SCRAPE_INTERVAL_SERVING: Final = "5s"
"""Engines and gateway: KEDA polls every 5 s, so a slower scrape would only delay each scaling step."""
SCRAPE_INTERVAL_INFRA: Final = "15s"

ENGINE_METRICS_PORT: Final = "http"
"""Container port name of both engines' OpenAI servers, which serve /metrics (serving/inference_server.py)."""


def _monitor_metadata(name: str, namespace: str) -> dict[str, Any]:
    check_name("name", name)
    check_name("namespace", namespace)
    return {"name": name, "namespace": namespace, "labels": {**prometheus_selector_labels(), **MANAGED_BY}}


def _model_relabeling() -> list[dict[str, Any]]:
    # Kubernetes SD exposes pod labels as __meta_kubernetes_pod_label_<name>, with every character outside
    # [a-zA-Z0-9_] turned into "_" (prometheus.io/docs/prometheus/latest/configuration/configuration,
    # kubernetes_sd_config "pod" role).
    source = "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", MODEL_POD_LABEL)
    return [{"action": "replace", "sourceLabels": [source], "targetLabel": MODEL_LABEL}]


def engine_pod_monitor(engine: Engine, namespace: str, *, interval: str = SCRAPE_INTERVAL_SERVING) -> dict[str, Any]:
    """A PodMonitor scraping every kit pod of ``engine`` in ``namespace``, labelled with its model.

    Both engines serve ``/metrics`` on their OpenAI port, named ``http`` on the pod: vLLM's API server, and
    Triton's OpenAI-compatible frontend (which exposes the in-process server's metrics there). A PodMonitor
    rather than a ServiceMonitor because a LeaderWorkerSet's leader pods have no per-model metrics Service.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r}; allowed: {', '.join(ENGINES)}")
    endpoint: dict[str, Any] = {
        "path": "/metrics",
        "interval": interval,
        "relabelings": _model_relabeling(),
        "port": ENGINE_METRICS_PORT,
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _monitor_metadata(f"inferstack-{engine}", namespace),
        "spec": {
            "selector": {
                "matchLabels": {ENGINE_POD_LABEL: engine},
                "matchExpressions": [{"key": MODEL_POD_LABEL, "operator": "Exists"}],
            },
            "podMetricsEndpoints": [endpoint],
        },
    }


def gateway_service_monitor(
    namespace: str,
    *,
    selector_labels: dict[str, str] | None = None,
    port: str = "metrics",
    interval: str = SCRAPE_INTERVAL_SERVING,
    tls: bool = False,
) -> dict[str, Any]:
    """A ServiceMonitor for the gateway's ``/metrics`` (the ``inferstack_gateway_*`` series).

    ``tls``: the gateway serves HTTPS only (``gateway.tlsSecret``). The scrape does not verify its certificate: the
    Secret need not carry a ``ca.crt``, the scrape carries no credential, and it stays inside the cluster, where the
    gateway's NetworkPolicy admits it."""
    endpoint: dict[str, Any] = {"port": port, "path": "/metrics", "interval": interval}
    if tls:
        endpoint.update(scheme="https", tlsConfig={"insecureSkipVerify": True})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _monitor_metadata("inferstack-gateway", namespace),
        "spec": {
            "selector": {"matchLabels": selector_labels or dict(GATEWAY_POD_LABELS)},
            "endpoints": [endpoint],
        },
    }


REDIS_EXPORTER: Final = "prometheus-redis-exporter"
"""The Redis exporter's release (its ``CHARTS`` pin), and so its Service (the chart's fullname holds the release name
when it contains the chart's): the ``service`` label of its series. A further cache's exporter is
``<this>-<cache name>``."""


def redis_exporter_service_monitor(
    namespace: str,
    *,
    release: str = REDIS_EXPORTER,
    name: str = "inferstack-cache",
    interval: str = SCRAPE_INTERVAL_INFRA,
) -> dict[str, Any]:
    """A ServiceMonitor for the prometheus-redis-exporter chart's Service (``redis_up`` and friends).

    Selector and port name are the chart's own: ``app.kubernetes.io/name``/``instance`` selector labels and
    service port ``redis-exporter`` (charts/prometheus-redis-exporter, templates/_helpers.tpl, values.yaml
    ``service.portName``).
    """
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _monitor_metadata(name, namespace),
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "prometheus-redis-exporter",
                    "app.kubernetes.io/instance": release,
                }
            },
            "endpoints": [{"port": "redis-exporter", "path": "/metrics", "interval": interval}],
        },
    }
