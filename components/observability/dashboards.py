"""Grafana dashboards, generated in code, and the metric vocabulary they share with alerts and scaling.

Every dashboard is a pure function returning Grafana's dashboard JSON model as a dict: no clocks, no
randomness, ids assigned in order, so the output is byte-stable and golden-tested
(``tests/observability/golden/``). ``dashboard_configmap`` wraps one into the ConfigMap that the Grafana
sidecar of kube-prometheus-stack loads (label ``grafana_dashboard: "1"``).

The metric names below are the one place the kit spells them; ``_alerts`` and ``_scaling`` import them.
Serving-pod series are joined to a kit model by the target label ``inferstack_model``, which the
monitors in ``_scaling`` copy from the pod label ``inferstack.io/model``: it works the same for vLLM and
Triton, whose own model labels differ (vLLM ``model_name`` is the served name; Triton ``model`` is the
repository entry such as ``ensemble``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal

from components.catalog.charts import CHARTS

Engine = Literal["vllm", "triton", "llamacpp"]
ENGINES: Final[tuple[Engine, ...]] = ("vllm", "triton", "llamacpp")

# --- labels that tie series to the kit's objects ---------------------------------------------------------

MODEL_POD_LABEL: Final = "inferstack.io/model"
"""Pod label every serving pod carries, value = the kit's model name."""
ENGINE_POD_LABEL: Final = "inferstack.io/engine"
"""Pod label every serving pod carries, value = ``vllm`` | ``triton``; the monitors select on it."""
MODEL_LABEL: Final = "inferstack_model"
"""Prometheus target label copied from ``MODEL_POD_LABEL`` by the engine PodMonitors."""
SITE_LABEL: Final = "inferstack_site"
"""External label on every sample an edge site forwards (its ``remoteWrite``): the hub's Prometheus tells sites apart
by it. Prometheus adds external labels only to what leaves it, so a cluster's own series never carry it."""
OWN_SERIES: Final = f'{SITE_LABEL}=""'
"""Matcher for this cluster's own series: on a hub that receives sites' samples, a query that scales or alerts on a
model must not count a site's same-named model (or route alias) as its own."""

BY_MODEL: Final = f"{SITE_LABEL}, namespace, {MODEL_LABEL}"
"""Grouping that identifies one model: the same name may serve in two namespaces (two stacks), or at an edge site
whose samples a hub receives (on a cluster's own series the site label is absent and changes nothing)."""

# --- gateway (images/gateway must export exactly these) ---------------------------------------------------


class GatewayMetrics:
    """Metric names the gateway exports. The gateway author aligns on these; they are its contract."""

    REQUESTS_TOTAL: Final = "inferstack_gateway_requests_total"
    """Counter, labels ``route``, ``status``, ``cache`` (one of ``CACHE_RESULTS``), ``model`` (the alias the
    client asked for) and ``upstream_kind`` (``local``, ``remote`` for burst to the hub, ``none`` when no upstream
    answered), one increment per request (images/gateway/src/inferstack_gateway/metrics.py)."""
    MODEL_REQUESTS_TOTAL: Final = "inferstack_gateway_model_requests_total"
    """Counter, label ``model`` (the alias the client asked for), one increment per request whatever its answer; the
    gateway creates every configured alias's series at 0 when it starts, so a model's first request is an increase
    ``rate()`` sees: what wakes a scaled-to-zero model."""
    CACHE_LABEL: Final = "cache"
    CACHE_RESULTS: Final = ("hit", "semantic", "miss", "bypass")
    """``hit``: exact cache; ``semantic``: vector cache; ``miss``: looked up, went upstream; ``bypass``:
    not cacheable (multi-turn, streaming opt-out), went upstream without a lookup."""
    MODEL_LABEL: Final = "model"
    TTFT_SECONDS: Final = "inferstack_gateway_ttft_seconds"
    """Histogram, labels ``model`` and ``upstream_kind``: time to the answer's first token as the client sees it
    (streams: the first event with output, not a role-only opening event)."""
    UPSTREAM_TTFT_SECONDS: Final = "inferstack_gateway_upstream_ttft_seconds"
    """Histogram, label ``upstream`` (the kit names each model's upstream after the model): streams only, from the
    request to the upstream to its first event that carries output. The TTFT of engines that export none."""
    UPSTREAM_LABEL: Final = "upstream"
    EMBEDDINGS_UP: Final = "inferstack_gateway_embeddings_up"
    """Gauge: 1 while the semantic cache's embeddings endpoint answers, 0 while it is down and the semantic stage is
    skipped; no series before the first call ends, nor on a gateway without an embeddings endpoint."""


# --- inference engines ---------------------------------------------------------------------------------

TRITON_ENTRY_MODELS: Final = "ensemble|tensorrt_llm_bls"
"""Triton repository entries a client calls (facts.md: ensemble, or the optional BLS). Client-facing
series (requests, first response) are read on these only, so a request is not counted once per
composing model."""


@dataclass(frozen=True)
class EngineMetrics:
    """How one engine reports the numbers the dashboards, alerts and autoscaler need."""

    ttft_bucket: str | None
    """Histogram bucket series of time to first token; ``None`` where the engine exports none."""
    ttft_scale: float
    """Multiply a quantile of ``ttft_bucket`` by this to get seconds."""
    itl_bucket: str | None
    """Histogram bucket series of inter-token latency; ``None`` where the engine exports none."""
    queue: str
    """Gauge selector: requests waiting for a batch slot (the autoscaling signal)."""
    running: str
    """Gauge selector: requests being decoded."""
    requests_total: str | None
    """Counter selector: finished requests; ``None`` where the engine counts none."""
    kv_used: str | None
    """Gauge selector: KV cache in use; a 0-1 fraction when ``kv_capacity`` is ``None``, else blocks."""
    kv_capacity: str | None
    """Gauge selector: KV-cache blocks in total, the denominator of ``kv_used``."""
    client_matchers: str
    """Matchers, comma-joined, for client-facing series (``ttft_bucket``, ``requests_total``)."""


ENGINE_METRICS: Mapping[Engine, EngineMetrics] = MappingProxyType(
    {
        # vLLM OpenAI server, /metrics (docs.vllm.ai "Production Metrics"). kv_cache_usage_perc is a 0-1
        # fraction despite its name.
        "vllm": EngineMetrics(
            ttft_bucket="vllm:time_to_first_token_seconds_bucket",
            ttft_scale=1.0,
            itl_bucket="vllm:inter_token_latency_seconds_bucket",
            queue="vllm:num_requests_waiting",
            running="vllm:num_requests_running",
            requests_total="vllm:request_success_total",
            kv_used="vllm:kv_cache_usage_perc",
            kv_capacity=None,
            client_matchers="",
        ),
        # Triton + TensorRT-LLM backend (Triton "Metrics" docs; TensorRT-LLM backend "Triton Metrics"), served on
        # the OpenAI frontend's /metrics. No TTFT: Triton's first-response histogram
        # (nv_inference_first_response_histogram_ms) needs --metrics-config histogram_latencies=true, and the
        # OpenAI frontend the kit runs (server repo r25.09, python/openai/openai_frontend/main.py) builds
        # tritonserver.Server in-process with no metrics option and has no flag for one. The TTFT of a Triton
        # model comes from the gateway (GatewayMetrics.UPSTREAM_TTFT_SECONDS). Triton exports no inter-token
        # histogram either.
        "triton": EngineMetrics(
            ttft_bucket=None,
            ttft_scale=1.0,
            itl_bucket=None,
            queue='nv_trt_llm_request_metrics{request_type="waiting"}',
            running='nv_trt_llm_request_metrics{request_type="active"}',
            requests_total="nv_inference_request_success",
            kv_used='nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}',
            kv_capacity='nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}',
            client_matchers=f'model=~"{TRITON_ENTRY_MODELS}"',
        ),
        # llama.cpp llama-server with --metrics (tools/server/README.md, "GET /metrics"): gauges and counters only,
        # no latency histograms and no request counter. requests_deferred is the queue (requests waiting for a
        # free slot), requests_processing the slots decoding. TTFT/ITL of a llama.cpp model come from the
        # gateway's own histograms (inferstack_gateway_upstream_ttft_seconds).
        "llamacpp": EngineMetrics(
            ttft_bucket=None,
            ttft_scale=1.0,
            itl_bucket=None,
            queue="llamacpp:requests_deferred",
            running="llamacpp:requests_processing",
            requests_total=None,
            kv_used=None,
            kv_capacity=None,
            client_matchers="",
        ),
    }
)

# --- GPUs (dcgm-exporter 4.8.x default field set) and Kubernetes objects (kube-state-metrics) -------------

DCGM_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
"""Percent 0-100 (4.9.0 turns utilization into a 0-1 ratio: see the pin in ``_charts``)."""
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
"""Framebuffer in use, MiB."""
DCGM_FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
DCGM_GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
"""Degrees Celsius."""
DCGM_XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
"""Value of the last XID error seen; 0 when none."""
DCGM_POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
"""Watts."""

KSM_DEPLOYMENT_AVAILABLE: Final = "kube_deployment_status_replicas_available"
KSM_DEPLOYMENT_SPEC: Final = "kube_deployment_spec_replicas"
KSM_STATEFULSET_READY: Final = "kube_statefulset_status_replicas_ready"
KSM_STATEFULSET_SPEC: Final = "kube_statefulset_replicas"
KSM_HPA_DESIRED: Final = "kube_horizontalpodautoscaler_status_desired_replicas"

REDIS_UP: Final = "redis_up"
REDIS_MEMORY_USED: Final = "redis_memory_used_bytes"
REDIS_COMMANDS_TOTAL: Final = "redis_commands_processed_total"
REDIS_CLIENTS: Final = "redis_connected_clients"


def selector(metric: str, *matchers: str) -> str:
    """``metric`` with ``matchers`` merged into its braces (empty matchers dropped).

    ``selector('a{x="1"}', 'y="2"')`` -> ``a{x="1",y="2"}``.
    """
    name, _, existing = metric.partition("{")
    parts = [m for m in (existing.rstrip("}"), *matchers) if m]
    return f"{name}{{{','.join(parts)}}}" if parts else name


def ttft_quantile(engine: Engine, quantile: float, *matchers: str, window: str = "5m") -> str | None:
    """TTFT quantile in seconds per model, for ``engine``; ``None`` where the engine exports no histogram."""
    m = ENGINE_METRICS[engine]
    if m.ttft_bucket is None:
        return None
    expr = (
        f"histogram_quantile({quantile:g}, sum by (le, {BY_MODEL}) "
        f"(rate({selector(m.ttft_bucket, m.client_matchers, *matchers)}[{window}])))"
    )
    return expr if m.ttft_scale == 1.0 else f"{expr} * {m.ttft_scale:g}"


def itl_quantile(engine: Engine, quantile: float, *matchers: str, window: str = "5m") -> str | None:
    """Inter-token latency quantile in seconds per model; ``None`` where the engine exports no histogram."""
    m = ENGINE_METRICS[engine]
    if m.itl_bucket is None:
        return None
    return (
        f"histogram_quantile({quantile:g}, sum by (le, {BY_MODEL}) "
        f"(rate({selector(m.itl_bucket, *matchers)}[{window}])))"
    )


def queue_depth(engine: Engine, *matchers: str) -> str:
    """Requests waiting for a batch slot, summed per model."""
    return f"sum by ({BY_MODEL}) ({selector(ENGINE_METRICS[engine].queue, *matchers)})"


def kv_cache_usage(engine: Engine, *matchers: str) -> str | None:
    """Fraction (0-1) of the KV cache in use per model: the hottest replica for vLLM, blocks for Triton."""
    m = ENGINE_METRICS[engine]
    if m.kv_used is None:
        return None
    used = selector(m.kv_used, *matchers)
    if m.kv_capacity is None:
        return f"max by ({BY_MODEL}) ({used})"
    return f"sum by ({BY_MODEL}) ({used}) / sum by ({BY_MODEL}) ({selector(m.kv_capacity, *matchers)})"


# --- Grafana JSON model -------------------------------------------------------------------------------

SCHEMA_VERSION: Final = 39
"""Grafana dashboard JSON schema version the panels are written for (Grafana 11)."""
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
_MODEL_FILTER: Final = f'{MODEL_LABEL}=~"$model"'
_NS_FILTER: Final = 'namespace=~"$namespace"'
_SITE_FILTER: Final = f'{SITE_LABEL}=~"$site"'
"""Every panel reads the sites the ``site`` variable picks; "All" (``.*``) includes the cluster's own series, which
carry no site label. On a hub, each site's series stay apart from the hub's (grouped and named by ``_SITE``)."""
_SITE: Final = "{{" + SITE_LABEL + "}}"
"""Legend suffix naming a series' site: empty for the cluster's own."""


@dataclass(frozen=True)
class _Target:
    expr: str
    legend: str


@dataclass(frozen=True)
class _Panel:
    title: str
    description: str
    unit: str
    targets: tuple[_Target, ...]
    kind: Literal["timeseries", "stat"] = "timeseries"
    width: int = 12
    height: int = 8
    max_value: float | None = None


def _panel_json(panel: _Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.max_value is not None:
        defaults |= {"min": 0, "max": panel.max_value}
    options: dict[str, Any]
    if panel.kind == "timeseries":
        options = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    else:
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend}
            for i, t in enumerate(panel.targets)
        ],
    }


def _layout(panels: tuple[_Panel, ...]) -> list[dict[str, Any]]:
    """Flow panels left to right on Grafana's 24-column grid, ids in order."""
    out: list[dict[str, Any]] = []
    x = y = row_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        out.append(_panel_json(panel, panel_id, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return out


def _query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-var"},
        "definition": query,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
    }


def _dashboard(
    uid: str, title: str, description: str, panels: tuple[_Panel, ...], variables: tuple[dict[str, Any], ...]
) -> dict[str, Any]:
    datasource_var = {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "current": {"selected": True, "text": "Prometheus", "value": "prometheus"},
    }
    # A hub's Prometheus stores its edge sites' samples too, each labelled with its site; a site's own, none.
    site_var = _query_variable("site", "Site", f"label_values({SITE_LABEL})")
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["inferstack"],
        "editable": False,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "timezone": "browser",
        # Queue depth and replica counts move within seconds; KEDA polls every 5 s.
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [datasource_var, site_var, *variables]},
        "panels": _layout(panels),
    }


def _per_engine(title: str, build: Callable[[Engine], str | None]) -> tuple[_Target, ...]:
    """One target per engine that can answer ``build``; legends read ``<model> <title> (<engine>) <site>``."""
    targets = []
    for engine in ENGINES:
        expr = build(engine)
        if expr is not None:
            legend = " ".join(p for p in (f"{{{{{MODEL_LABEL}}}}}", title, f"({engine})", _SITE) if p)
            targets.append(_Target(expr, legend))
    return tuple(targets)


def _objects(kind: str, metric: str, what: str) -> _Target:
    """A kube-state-metrics count per object of ``kind`` (its label), each site's apart."""
    return _Target(
        f"sum by ({SITE_LABEL}, {kind}) ({selector(metric, _SITE_FILTER, _NS_FILTER)})",
        "{{" + kind + "}} " + what + " " + _SITE,
    )


def serving_dashboard() -> dict[str, Any]:
    """Per-model latency, load and capacity: TTFT/ITL p50/p99, request rate, queue, KV cache, replicas."""
    f = (_SITE_FILTER, _NS_FILTER, _MODEL_FILTER)

    def latency(q: float, fn: Callable[..., str | None]) -> tuple[_Target, ...]:
        return _per_engine(f"p{round(q * 100)}", lambda e: fn(e, q, *f))

    g = GatewayMetrics
    # The kit names each model's upstream after the model, so the model variable selects it.
    upstream_bucket = selector(g.UPSTREAM_TTFT_SECONDS + "_bucket", _SITE_FILTER, g.UPSTREAM_LABEL + '=~"$model"')
    gateway_ttft = tuple(
        _Target(
            f"histogram_quantile({q:g}, sum by (le, {SITE_LABEL}, {g.UPSTREAM_LABEL}) (rate({upstream_bucket}[5m])))",
            f"{{{{{g.UPSTREAM_LABEL}}}}} p{round(q * 100)} (gateway) {_SITE}",
        )
        for q in (0.5, 0.99)
    )
    panels = (
        _Panel(
            "Time to first token",
            "p50 and p99 per model over 5 m. vLLM: vllm:time_to_first_token_seconds. (gateway): streams the "
            "gateway relayed, request to the model's first token (inferstack_gateway_upstream_ttft_seconds); the "
            "only TTFT of Triton and llama.cpp models, which export none as the kit runs them.",
            "s",
            latency(0.5, ttft_quantile) + latency(0.99, ttft_quantile) + gateway_ttft,
        ),
        _Panel(
            "Inter-token latency",
            "p50 and p99 per model over 5 m (vllm:inter_token_latency_seconds). Triton + TensorRT-LLM exports "
            "no inter-token histogram.",
            "s",
            latency(0.5, itl_quantile) + latency(0.99, itl_quantile),
        ),
        _Panel(
            "Request rate",
            "Finished requests per second per model.",
            "reqps",
            _per_engine(
                "",
                lambda e: (
                    f"sum by ({BY_MODEL}) (rate({selector(total, ENGINE_METRICS[e].client_matchers, *f)}[1m]))"
                    if (total := ENGINE_METRICS[e].requests_total)
                    else None
                ),
            ),
        ),
        _Panel(
            "Queue depth",
            "Requests waiting for a batch slot: the signal KEDA scales the model on.",
            "short",
            _per_engine("waiting", lambda e: queue_depth(e, *f))
            + _per_engine("running", lambda e: f"sum by ({BY_MODEL}) ({selector(ENGINE_METRICS[e].running, *f)})"),
        ),
        _Panel(
            "KV-cache usage",
            "Fraction of KV-cache blocks in use (hottest replica for vLLM). Near 1, new requests queue or "
            "running ones are preempted.",
            "percentunit",
            _per_engine("", lambda e: kv_cache_usage(e, *f)),
            max_value=1,
        ),
        _Panel(
            "Replicas",
            "Available vs desired. Deployments from kube-state-metrics; a LeaderWorkerSet <model> shows as its "
            "leader StatefulSet <model> (one leader per group: ready groups) and one worker StatefulSet "
            "<model>-<group> per group; desired = KEDA's HPA (keda-hpa-<model>).",
            "short",
            (
                _objects("deployment", KSM_DEPLOYMENT_AVAILABLE, "available"),
                _objects("statefulset", KSM_STATEFULSET_READY, "ready"),
                _objects("horizontalpodautoscaler", KSM_HPA_DESIRED, "desired"),
            ),
        ),
    )
    model_query = (
        f'label_values({{__name__=~"{ENGINE_METRICS["vllm"].running}|nv_trt_llm_request_metrics|'
        f'{ENGINE_METRICS["llamacpp"].running}"}}, {MODEL_LABEL})'
    )
    return _dashboard(
        "inferstack-serving",
        "inferstack / Model serving",
        "Latency SLOs, load and capacity per model, for vLLM, Triton + TensorRT-LLM and llama.cpp.",
        panels,
        (
            _query_variable("namespace", "Namespace", f'label_values({{{MODEL_LABEL}!="",{_SITE_FILTER}}}, namespace)'),
            _query_variable("model", "Model", model_query),
        ),
    )


def cache_dashboard() -> dict[str, Any]:
    """Gateway and cache: hit rate by cache tier, gateway TTFT, and the Redis/Valkey behind it."""
    g = GatewayMetrics
    model = (_SITE_FILTER, f'{g.MODEL_LABEL}=~"$model"')
    by_model = f"{SITE_LABEL}, {g.MODEL_LABEL}"
    model_legend = "{{" + g.MODEL_LABEL + "}} " + _SITE
    from_cache = g.CACHE_LABEL + '=~"hit|semantic"'
    cacheable = g.CACHE_LABEL + '!="bypass"'
    requests = f"rate({selector(g.REQUESTS_TOTAL, *model)}[5m])"
    answered_from_cache = f"rate({selector(g.REQUESTS_TOTAL, *model, from_cache)}[5m])"
    looked_up = f"rate({selector(g.REQUESTS_TOTAL, *model, cacheable)}[5m])"
    panels = (
        _Panel(
            "Cache hit rate",
            "Share of cacheable requests answered by the exact or the semantic cache (bypassed requests "
            "are not cacheable and excluded).",
            "percentunit",
            (
                _Target(
                    f"sum by ({by_model}) ({answered_from_cache}) / sum by ({by_model}) ({looked_up})",
                    model_legend,
                ),
            ),
            max_value=1,
        ),
        _Panel(
            "Requests by cache result",
            "hit: exact cache; semantic: vector cache; miss: went upstream after a lookup; bypass: not cacheable.",
            "reqps",
            (_Target(f"sum by ({SITE_LABEL}, {g.CACHE_LABEL}) ({requests})", "{{cache}} " + _SITE),),
        ),
        _Panel(
            "Gateway time to first token",
            "As the client sees it, p50 and p99 per model alias, cache hits included.",
            "s",
            tuple(
                _Target(
                    f"histogram_quantile({q:g}, sum by (le, {by_model}) "
                    f"(rate({selector(g.TTFT_SECONDS + '_bucket', *model)}[5m])))",
                    f"{{{{model}}}} p{round(q * 100)} {_SITE}",
                )
                for q in (0.5, 0.99)
            ),
        ),
        _Panel(
            "Requests by model",
            "Requests per second per model alias; for a scaled-to-zero model, this is what wakes it.",
            "reqps",
            (_Target(f"sum by ({by_model}) ({requests})", model_legend),),
        ),
        _Panel(
            "Cache up",
            "redis_up from the Redis exporter: 0 means every lookup is skipped and every request goes upstream.",
            "short",
            (_Target(selector(REDIS_UP, _SITE_FILTER), "{{instance}} " + _SITE),),
            kind="stat",
            width=6,
        ),
        _Panel(
            "Cache memory",
            "Memory used by the cache server.",
            "bytes",
            (_Target(selector(REDIS_MEMORY_USED, _SITE_FILTER), "{{instance}} " + _SITE),),
            width=6,
        ),
        _Panel(
            "Cache commands",
            "Commands per second and connected clients.",
            "short",
            (
                _Target(
                    f"rate({selector(REDIS_COMMANDS_TOTAL, _SITE_FILTER)}[1m])", "{{instance}} commands/s " + _SITE
                ),
                _Target(selector(REDIS_CLIENTS, _SITE_FILTER), "{{instance}} clients " + _SITE),
            ),
        ),
    )
    return _dashboard(
        "inferstack-cache",
        "inferstack / Gateway & cache",
        "How many requests never reach a GPU, and the health of the cache that makes it so.",
        panels,
        (
            _query_variable(
                "model", "Model", f"label_values({selector(g.REQUESTS_TOTAL, _SITE_FILTER)}, {g.MODEL_LABEL})"
            ),
        ),
    )


def gpu_dashboard() -> dict[str, Any]:
    """GPU utilization, memory, temperature, power and XID errors from the DCGM exporter."""
    # dcgm-exporter 4.8.3 renamed the label Hostname to hostname (its release notes, "Metrics and
    # Kubernetes"); the pinned 4.8.4 exports hostname. The legend names both so an exporter on either side
    # of the rename (e.g. the one the GPU Operator bundles on-prem) still reads right.
    node_sel = f'{_SITE_FILTER},hostname=~"$node"'
    legend = "{{Hostname}}{{hostname}} GPU {{gpu}} " + _SITE
    panels = (
        _Panel(
            "GPU utilization",
            "Percent of time a kernel was running (DCGM_FI_DEV_GPU_UTIL).",
            "percent",
            (_Target(selector(DCGM_GPU_UTIL, node_sel), legend),),
            max_value=100,
        ),
        _Panel(
            "GPU memory used",
            "Framebuffer in use (DCGM_FI_DEV_FB_USED, MiB). vLLM preallocates --gpu-memory-utilization.",
            "mbytes",
            (_Target(selector(DCGM_FB_USED, node_sel), legend),),
        ),
        _Panel(
            "GPU temperature",
            "DCGM_FI_DEV_GPU_TEMP. Sustained high temperature throttles clocks and inflates ITL.",
            "celsius",
            (_Target(selector(DCGM_GPU_TEMP, node_sel), legend),),
        ),
        _Panel(
            "GPU power",
            "DCGM_FI_DEV_POWER_USAGE.",
            "watt",
            (_Target(selector(DCGM_POWER_USAGE, node_sel), legend),),
        ),
        _Panel(
            "XID errors",
            "Last XID code per GPU (DCGM_FI_DEV_XID_ERRORS): a new one warns (InferstackGpuXidError), a fatal "
            "one pages (InferstackGpuXidFatal).",
            "short",
            (_Target(f"max_over_time({selector(DCGM_XID_ERRORS, node_sel)}[5m]) > 0", legend),),
            width=24,
        ),
    )
    return _dashboard(
        "inferstack-gpus",
        "inferstack / GPUs",
        "Per-GPU health and load from the NVIDIA DCGM exporter.",
        panels,
        (_query_variable("node", "Node", f"label_values({selector(DCGM_GPU_UTIL, _SITE_FILTER)}, hostname)"),),
    )


DASHBOARDS: Final = (serving_dashboard, cache_dashboard, gpu_dashboard)
"""Every dashboard the kit ships, in render order."""


def _metric_name(series: str) -> str:
    return series.partition("{")[0]


DASHBOARD_METRICS: Final[tuple[str, ...]] = tuple(
    sorted(
        {
            GatewayMetrics.REQUESTS_TOTAL,
            f"{GatewayMetrics.TTFT_SECONDS}_bucket",
            f"{GatewayMetrics.UPSTREAM_TTFT_SECONDS}_bucket",
            *(
                _metric_name(series)
                for m in ENGINE_METRICS.values()
                for series in (m.ttft_bucket, m.itl_bucket, m.queue, m.running, m.requests_total, m.kv_used)
                if series is not None
            ),
            DCGM_GPU_UTIL,
            DCGM_FB_USED,
            DCGM_GPU_TEMP,
            DCGM_POWER_USAGE,
            DCGM_XID_ERRORS,
            KSM_DEPLOYMENT_AVAILABLE,
            KSM_STATEFULSET_READY,
            KSM_HPA_DESIRED,
            REDIS_UP,
            REDIS_MEMORY_USED,
            REDIS_COMMANDS_TOTAL,
            REDIS_CLIENTS,
        }
    )
)
"""Every metric the dashboards read, and nothing else: what an edge site forwards to its hub by default
(``observability.remoteWrite.forward: dashboards``), so the hub draws each site with the same dashboards.
``tests/observability/test_dashboards.py`` parses every panel's and variable's query and holds this list to them."""

GRAFANA_DASHBOARD_LABEL: Final = {"grafana_dashboard": "1"}
"""kube-prometheus-stack's Grafana sidecar loads ConfigMaps with this label (values
``grafana.sidecar.dashboards.label`` / ``labelValue``)."""


def dashboard_configmap(dashboard: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """A ConfigMap manifest carrying ``dashboard`` for the Grafana sidecar.

    The sidecar watches only Grafana's own namespace unless told otherwise, so that is the default.
    The JSON is canonical (sorted keys) so a re-render never shows a spurious diff.
    """
    uid = str(dashboard["uid"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"grafana-dashboard-{uid}",
            "namespace": namespace or CHARTS["kube-prometheus-stack"].namespace,
            "labels": {**GRAFANA_DASHBOARD_LABEL, "app.kubernetes.io/managed-by": "inferstack"},
            # Honoured when grafana.sidecar.dashboards.folderAnnotation is set to this key.
            "annotations": {"grafana_folder": "inferstack"},
        },
        "data": {f"{uid}.json": json.dumps(dashboard, sort_keys=True, indent=2) + "\n"},
    }
