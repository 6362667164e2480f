"""PrometheusRule manifests: per-model SLO alerts, GPU health and cache availability.

``prometheus_rule(models)`` is a pure function of the models' SLOs; its output is golden-tested and
validated against the prometheus-operator CRD (``tests/observability``). Metric names come from
``_dashboards`` (the one vocabulary), so a dashboard and the alert on the same number cannot disagree.

Recording rules first turn each engine's histogram into one series per model with one name
(``inferstack_model:ttft_seconds:p99_rate5m``), whatever the engine and its unit. An engine that exports no
TTFT histogram as the kit runs it (Triton behind its OpenAI frontend, llama.cpp) gets that series per model
from the gateway's ``inferstack_gateway_upstream_ttft_seconds`` instead (label ``source: gateway``); a model
no gateway relays has no TTFT alert rather than one that can never fire. The per-model alerts then compare
that series with the model's own target; naming follows the Prometheus convention ``level:metric:operations``
(prometheus.io/docs/practices/rules).

Every rule reads this cluster's own series only (``OWN_SERIES``). A hub's Prometheus also stores what its edge
sites forward, each sample labelled with its site: the sites' raw series, their recorded series and their ``ALERTS``.
A hub rule that read them would compare a site's same-named model with the hub's target, merge the two into one
percentile, hide the hub's missing exporter behind a site's (``absent``), and record a series a site already sends.
Each site evaluates the same rules on its own Prometheus; the hub shows them through the forwarded ``ALERTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from components.catalog.charts import CHARTS, prometheus_selector_labels
from components.catalog.models import MODELS
from components.kube.objects import check_name, one_or_several
from components.observability.dashboards import (
    BY_MODEL,
    DCGM_XID_ERRORS,
    ENGINE_METRICS,
    ENGINES,
    KSM_DEPLOYMENT_AVAILABLE,
    KSM_DEPLOYMENT_SPEC,
    KSM_STATEFULSET_READY,
    KSM_STATEFULSET_SPEC,
    MODEL_LABEL,
    OWN_SERIES,
    REDIS_UP,
    SITE_LABEL,
    Engine,
    GatewayMetrics,
    itl_quantile,
    selector,
    ttft_quantile,
)
from components.observability.monitors import REDIS_EXPORTER
from components.serving._placement import WorkloadKind, place
from components.specs import ModelDeploySpec, ServingPool

SLO_BURN_FACTOR: Final = 1.1
"""An SLO alert fires when p99 exceeds the target by 10 %, so noise right at the target stays quiet."""
SLO_BURN_FOR: Final = "5m"
"""How long p99 must stay above target x ``SLO_BURN_FACTOR`` (the recording window is 5 m as well)."""

TTFT_P99: Final = f"{MODEL_LABEL}:ttft_seconds:p99_rate5m"
ITL_P99: Final = f"{MODEL_LABEL}:itl_seconds:p99_rate5m"
QUEUE_PER_REPLICA: Final = f"{MODEL_LABEL}:queue_waiting:avg"
QUEUE_ALERT_FACTOR: Final = 4
"""The sustained-queue alert fires at this many times the model's KEDA target per replica: the HPA holds the load
near the target (within its 10 % tolerance), so only a queue well above it says the autoscaler cannot keep up."""

# XIDs after which the GPU needs a reset or the node a drain (NVIDIA "XID Errors" catalog,
# docs.nvidia.com/deploy/xid-errors): 48 double-bit ECC, 64 ECC row-remapping failure, 74 NVLink error,
# 79 GPU has fallen off the bus, 95 uncontained ECC error, 119/120 GSP RPC timeout / GSP error. Other XIDs
# (e.g. 13, 31, 43: application faults) are worth a look but not a page.
FATAL_XIDS: Final = (48, 64, 74, 79, 95, 119, 120)


@dataclass(frozen=True)
class ModelSlo:
    """One served model and the latency it promises; the input of every per-model rule."""

    name: str
    """The kit's model name: the ``inferstack.io/model`` pod label and the workload's name."""
    engine: Engine
    ttft_p99_ms: float
    """Time-to-first-token target at p99, in milliseconds."""
    itl_p99_ms: float
    """Inter-token latency target at p99, in milliseconds (alerted for vLLM: Triton exports no ITL)."""
    namespace: str
    workload_kind: WorkloadKind = "Deployment"
    """``LeaderWorkerSet`` for multi-node models: readiness is then read from its leader StatefulSet."""
    gateway_namespace: str | tuple[str, ...] | None = None
    """Namespace of the gateway that relays this model's streams (upstream = the model's name), or of each gateway in
    front of it (as ``InferenceServerArgs.gateway_namespace``). Where the engine exports no TTFT histogram, the TTFT
    SLO reads the gateways' histograms, merged; ``None``: no gateway in front (or an embedding model), so such an
    engine gets no TTFT alert."""
    queue_alert_per_replica: float = 4.0
    """Waiting requests per replica, sustained 10 m, that mean the autoscaler cannot keep up (at its
    maximum, or no GPU node to be had). Well above the model's KEDA target so scaling gets its chance first:
    ``model_slos`` sets ``QUEUE_ALERT_FACTOR`` x that target."""

    def __post_init__(self) -> None:
        for field in ("name", "namespace"):
            self._check_name(field, getattr(self, field))
        if isinstance(self.gateway_namespace, tuple | list):
            if not self.gateway_namespace:
                raise ValueError("ModelSlo.gateway_namespace: an empty list; pass None for a model no gateway relays")
            for value in self.gateway_namespace:
                self._check_name("gateway_namespace[]", value)
            object.__setattr__(self, "gateway_namespace", tuple(self.gateway_namespace))
        else:
            self._check_name("gateway_namespace", self.gateway_namespace)
        if self.engine not in ENGINES:
            raise ValueError(f"ModelSlo.engine: {self.engine!r}; allowed: {', '.join(ENGINES)}")
        if self.workload_kind not in ("Deployment", "LeaderWorkerSet"):
            raise ValueError(f"ModelSlo.workload_kind: {self.workload_kind!r}; allowed: Deployment, LeaderWorkerSet")
        for field in ("ttft_p99_ms", "itl_p99_ms", "queue_alert_per_replica"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"ModelSlo.{field}: expected a number, got {type(value).__name__} {value!r}")
            if not value > 0:
                raise ValueError(f"ModelSlo.{field}: {getattr(self, field)!r} must be > 0")

    @staticmethod
    def _check_name(field: str, value: object) -> None:
        if value is not None and not isinstance(value, str):
            # A pulumi.Output (a Namespace resource's metadata.name) is known only at deploy time; the rules need
            # the name now (as InferenceServerArgs.namespace does).
            raise ValueError(
                f"ModelSlo.{field}: expected a name (str), got {type(value).__name__}; pass the name itself, and "
                "order the Namespace first with depends_on"
            )
        if value is not None:
            check_name(f"ModelSlo.{field}", value)

    @property
    def gateway_namespaces(self) -> tuple[str, ...]:
        """Where the gateways in front of the model run, each once, in order; none without a gateway."""
        return one_or_several(self.gateway_namespace)

    @property
    def matchers(self) -> tuple[str, str, str]:
        """This cluster's series of this model: a hub never holds a site's same-named model to its own target."""
        return f'namespace="{self.namespace}"', f'{MODEL_LABEL}="{self.name}"', OWN_SERIES

    @property
    def ttft_from_gateway(self) -> bool:
        """The engine exports no TTFT histogram: the gateway's per-upstream one stands in (if a gateway relays)."""
        return ENGINE_METRICS[self.engine].ttft_bucket is None

    @property
    def ttft_measured(self) -> bool:
        return not self.ttft_from_gateway or self.gateway_namespace is not None


def model_slos(
    models: Iterable[ModelDeploySpec],
    namespace: str,
    pool_of: Callable[[str], ServingPool],
    gateway_namespace: str | tuple[str, ...] | None = None,
) -> list[ModelSlo]:
    """The SLOs of a stack's ``models[]`` entries, served in ``namespace`` on the pools ``pool_of`` names.

    The workload kind comes from the same placement the InferenceServer deploys (``place``), so the availability
    alert reads the object that exists. ``gateway_namespace``: where the stack's gateway runs, or each gateway in
    front of the models (as ``ModelSlo.gateway_namespace``), ``None`` without one; gateways relay chat models only.
    """
    slos = []
    for m in models:
        pool = pool_of(m.pool)
        slos.append(
            ModelSlo(
                name=m.name,
                engine=m.engine,
                ttft_p99_ms=m.slo.ttft_p99_ms,
                itl_p99_ms=m.slo.itl_p99_ms,
                namespace=namespace,
                workload_kind=place(m, pool).workload_kind(pool.spec.gpu_count),
                gateway_namespace=None if MODELS[m.model].is_embedding else gateway_namespace,
                queue_alert_per_replica=QUEUE_ALERT_FACTOR * m.queue_target,
            )
        )
    return slos


def _number(value: float) -> str:
    """A threshold as PromQL reads it, without float noise (100 ms x 1.1 = 0.11, not 0.11000000000000001)."""
    return f"{round(value, 9):.9g}"


def gateway_ttft_rule(slo: ModelSlo) -> dict[str, Any]:
    """TTFT p99 of one model from its gateways: the streams their upstream named after the model answered.

    The result carries the model's own ``namespace`` and ``inferstack_model``, so the alert reads it like an engine's.
    """
    gateways = slo.gateway_namespaces
    assert gateways
    # Several gateways in front of one model: their buckets are summed, so the p99 is over every stream relayed.
    where = f'namespace="{gateways[0]}"' if len(gateways) == 1 else f'namespace=~"{"|".join(gateways)}"'
    bucket = selector(
        GatewayMetrics.UPSTREAM_TTFT_SECONDS + "_bucket",
        where,
        f'{GatewayMetrics.UPSTREAM_LABEL}="{slo.name}"',
        OWN_SERIES,
    )
    return {
        "record": TTFT_P99,
        "expr": f"histogram_quantile(0.99, sum by (le) (rate({bucket}[5m])))",
        "labels": {"engine": slo.engine, "source": "gateway", "namespace": slo.namespace, MODEL_LABEL: slo.name},
    }


def recording_rules(models: Sequence[ModelSlo] = ()) -> list[dict[str, Any]]:
    """Engine-neutral per-model series: TTFT/ITL p99 in seconds and waiting requests per replica.

    ``models`` whose engine exports no TTFT histogram get their TTFT p99 from the gateway, one rule each."""
    rules: list[dict[str, Any]] = []
    for engine in ENGINES:
        ttft = ttft_quantile(engine, 0.99, OWN_SERIES)
        if ttft is not None:
            rules.append({"record": TTFT_P99, "expr": ttft, "labels": {"engine": engine}})
        itl = itl_quantile(engine, 0.99, OWN_SERIES)
        if itl is not None:
            rules.append({"record": ITL_P99, "expr": itl, "labels": {"engine": engine}})
    for engine in ENGINES:
        rules.append(
            {
                "record": QUEUE_PER_REPLICA,
                # One series per serving pod, so the average is the load each replica carries.
                "expr": f"avg by ({BY_MODEL}) ({selector(ENGINE_METRICS[engine].queue, OWN_SERIES)})",
                "labels": {"engine": engine},
            }
        )
    rules += [gateway_ttft_rule(slo) for slo in models if slo.ttft_from_gateway and slo.gateway_namespaces]
    return rules


def _alert(
    name: str,
    expr: str,
    severity: str,
    summary: str,
    description: str,
    for_: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ is not None:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {})}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def model_alerts(slo: ModelSlo) -> list[dict[str, Any]]:
    """SLO burn, sustained queue and zero ready replicas for one model."""
    sel = ",".join(slo.matchers)
    who = f"{slo.namespace}/{slo.name}"
    ttft_s = slo.ttft_p99_ms * SLO_BURN_FACTOR / 1000
    alerts = []
    if slo.ttft_measured:
        measured = (
            " (as the gateway measures it: request to the model's first token, streams only)"
            if slo.ttft_from_gateway
            else ""
        )
        alerts.append(
            _alert(
                "InferstackTTFTSLOBurn",
                f"{TTFT_P99}{{{sel}}} > {_number(ttft_s)}",
                "critical",
                f"{who}: TTFT p99 above its {slo.ttft_p99_ms:g} ms target",
                f"TTFT p99 over 5 m{measured} is {{{{ $value | humanizeDuration }}}}, more than "
                f"{SLO_BURN_FACTOR:g} x the {slo.ttft_p99_ms:g} ms target. Check the queue depth and replica count "
                "panels: a queue means scaling lags; no queue means prefill is slow (long prompts, cold prefix "
                "cache).",
                SLO_BURN_FOR,
            )
        )
    if ENGINE_METRICS[slo.engine].itl_bucket is not None:
        itl_s = slo.itl_p99_ms * SLO_BURN_FACTOR / 1000
        alerts.append(
            _alert(
                "InferstackITLSLOBurn",
                f"{ITL_P99}{{{sel}}} > {_number(itl_s)}",
                "warning",
                f"{who}: inter-token latency p99 above its {slo.itl_p99_ms:g} ms target",
                "ITL p99 over 5 m is {{ $value | humanizeDuration }}. Decode is memory-bound: batches too "
                "large for the GPU, or prefills stretching decode steps (see the model's latency profile).",
                SLO_BURN_FOR,
            )
        )
    alerts.append(
        _alert(
            "InferstackQueueSustained",
            f"{QUEUE_PER_REPLICA}{{{sel}}} > {_number(slo.queue_alert_per_replica)}",
            "warning",
            f"{who}: requests keep queueing",
            "{{ $value }} requests wait per replica for 10 m: the autoscaler is at its maximum or no GPU "
            "node can be provisioned (Karpenter NodePool limits, capacity, reservation).",
            "10m",
        )
    )
    # The LWS controller runs one leader StatefulSet named after the LeaderWorkerSet, one leader pod per group;
    # kube-state-metrics does not know LeaderWorkerSets themselves.
    kind: Literal["deployment", "statefulset"] = "deployment" if slo.workload_kind == "Deployment" else "statefulset"
    alerts.append(
        _alert(
            "InferstackModelUnavailable",
            # "desired > 0" keeps a model that scaled to zero on purpose quiet; 5 m leaves room for a cold start
            # including a GPU node boot.
            _none_ready(slo.namespace, kind, slo.name),
            "critical",
            f"{who}: no ready replica",
            f"The {slo.workload_kind} {who} wants replicas but none is ready: every request to this model "
            "fails or fails over.",
            "5m",
            {MODEL_LABEL: slo.name},
        )
    )
    return alerts


def _none_ready(namespace: str, kind: Literal["deployment", "statefulset"], name: str) -> str:
    """This cluster's Deployment or StatefulSet ``name`` wants replicas and has none ready (kube-state-metrics)."""
    available, desired = (
        (KSM_DEPLOYMENT_AVAILABLE, KSM_DEPLOYMENT_SPEC)
        if kind == "deployment"
        else (KSM_STATEFULSET_READY, KSM_STATEFULSET_SPEC)
    )
    matchers = (f'namespace="{namespace}"', OWN_SERIES, f'{kind}="{name}"')
    return f"({selector(available, *matchers)} == 0) and ({selector(desired, *matchers)} > 0)"


def new_xid() -> str:
    """An XID a GPU reported within the last 5 minutes, its code as the value.

    ``DCGM_FI_DEV_XID_ERRORS`` is sticky: it holds the last XID until DCGM restarts or the driver is reset
    (NVIDIA/dcgm-exporter#500, NVIDIA/DCGM#277), so "value > 0" stays true for ever after one application fault.
    dcgm-exporter also labels the series with the code itself (``err_code``, ``err_msg``: pkg/dcgmexporter
    gpu_collector.go since NVIDIA/dcgm-exporter#309), so each XID is a new series of constant value and
    ``changes()`` never sees one. A new XID is therefore a series (GPU ``UUID`` and ``err_code``) present now that
    was not 5 minutes ago. The same code twice in a row on one GPU is not seen: DCGM reports no count.
    """
    xid = selector(DCGM_XID_ERRORS, OWN_SERIES)
    return f"{xid} > 0 unless on (UUID, err_code) {xid} offset 5m"


def cache_alerts(name: str | None = None, exporter: str = REDIS_EXPORTER) -> list[dict[str, Any]]:
    """One cache's availability, from its own exporter's ``redis_up`` (the ``service`` label is the exporter's Service).
    ``name``: ``None`` for the stack's cache; a further cache's name (``ObservabilityArgs.extra_caches``) labels its
    alerts ``cache``."""
    redis_up = selector(REDIS_UP, OWN_SERIES, f'service="{exporter}"')
    which = "The response cache" if name is None else f"The response cache {name}"
    labels = {"cache": name} if name is not None else None
    return [
        _alert(
            "InferstackCacheDown",
            f"{redis_up} == 0",
            "critical",
            f"{which} is unreachable",
            "redis_up is 0: the gateway skips every cache lookup, so every request reaches a GPU and "
            "cache hits lose their millisecond answers.",
            "1m",
            labels,
        ),
        _alert(
            "InferstackCacheMetricsAbsent",
            f"absent({redis_up})",
            "warning",
            f"No metrics from the exporter of {which[0].lower()}{which[1:]}",
            f"redis_up of {exporter} is missing: the Redis exporter is down or not scraped, so InferstackCacheDown "
            "cannot fire.",
            "10m",
            labels,
        ),
    ]


def platform_alerts() -> list[dict[str, Any]]:
    """GPU XID errors: not tied to one model. This cluster's own, like every rule here."""
    # Fatal XIDs page for as long as DCGM still reports them: the GPU needs a reset (which clears the value) or the
    # node a drain; a replaced node takes its series with it.
    xid = f"max_over_time({selector(DCGM_XID_ERRORS, OWN_SERIES)}[5m])"
    fatal = " or ".join(f"({xid} == {code})" for code in FATAL_XIDS)
    return [
        _alert(
            "InferstackGpuXidFatal",
            fatal,
            "critical",
            "GPU {{ $labels.gpu }} on {{ $labels.hostname }}: XID {{ $value }}",
            "An XID that needs a GPU reset or a node drain. Cordon the node; Karpenter or the node group replaces it.",
        ),
        _alert(
            "InferstackGpuXidError",
            new_xid(),
            "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.hostname }}: XID {{ $value }}",
            "The GPU reported a new XID error (DCGM_FI_DEV_XID_ERRORS, {{ $labels.err_msg }}) in the last 5 minutes. "
            "Look it up in NVIDIA's XID catalog. The exporter keeps showing the last XID afterwards: this alert "
            "resolves after 5 minutes, the GPU dashboard's XID panel keeps the code.",
        ),
    ]


GATEWAY_ERROR_RATIO: Final = 0.05
"""Share of the gateway's answers that are 5xx, over 5 m, that pages: one request in twenty fails."""
GATEWAY_MIN_RATE: Final = 0.1
"""Requests per second below which the error ratio is not judged (two failures of three requests are noise)."""


def gateway_alerts(namespace: str, deployment: str = "gateway") -> list[dict[str, Any]]:
    """The front door: no ready gateway replica, or too many of its answers are server errors.

    Every request enters through the gateway, so neither shows in a model's alerts: with the gateway down, the models
    see no traffic and their SLOs hold. 5xx counts what the gateway answered (``inferstack_gateway_requests_total``'s
    ``status``): upstream failures it could not fail over, overload 503s, budgets that ran out. 429s are the per-key
    limits doing their job and 499s clients that left; neither counts.
    """
    own = (f'namespace="{namespace}"', OWN_SERIES)
    total = f"sum(rate({selector(GatewayMetrics.REQUESTS_TOTAL, *own)}[5m]))"
    server_errors = 'status=~"5.."'
    failed = f"sum(rate({selector(GatewayMetrics.REQUESTS_TOTAL, *own, server_errors)}[5m]))"
    who = f"{namespace}/{deployment}"
    # Which gateway: the error ratio is a sum with no labels left, so without these two gateways' alerts would be one
    # alert to Alertmanager (same name, same labels), the second hidden behind the first.
    own_labels = {"namespace": namespace, "deployment": deployment}
    return [
        _alert(
            "InferstackGatewayUnavailable",
            _none_ready(namespace, "deployment", deployment),
            "critical",
            f"{who}: no ready gateway replica",
            "Every client request fails: the gateway is the only way in. Its pods' events and logs say why (an image "
            "pull, a config the gateway refused at start, a probe failing).",
            "2m",
            own_labels,
        ),
        _alert(
            "InferstackGatewayErrors",
            f"({failed} / {total} > {_number(GATEWAY_ERROR_RATIO)}) and ({total} > {_number(GATEWAY_MIN_RATE)})",
            "critical",
            f"{who}: {{{{ $value | humanizePercentage }}}} of answers are server errors",
            f"More than {GATEWAY_ERROR_RATIO:.0%} of the gateway's answers over 5 m are 5xx: upstreams failing with no "
            "failover left, overload (503 with Retry-After) or latency budgets running out. The cache dashboard's "
            "requests by model, and the gateway's access log (status, upstream, detail), say which.",
            "5m",
            own_labels,
        ),
        _alert(
            "InferstackSemanticCacheOff",
            f"max({selector(GatewayMetrics.EMBEDDINGS_UP, *own)}) == 0",
            "warning",
            f"{who}: no replica reaches the embeddings endpoint, so the semantic cache is skipped",
            "Every gateway replica reports its embeddings endpoint down (/readyz says embeddings: down). The gateway "
            "keeps serving, exact hits included, but a request that a paraphrase's cached answer would have served "
            "now reaches a GPU. The gateway's log ('embeddings endpoint down, serving without the semantic cache', "
            "with the error) and the embeddings service's pods say why.",
            "10m",
            own_labels,
        ),
    ]


SITE_LAST_SEEN: Final = f"{SITE_LABEL}:last_sample_timestamp_seconds"
"""Hub recording: per site, the time of the newest heartbeat its Prometheus forwarded."""
SITE_SILENT_AFTER_S: Final = 600
"""A site whose heartbeat is this much older than the hub's clock is silent."""
SITE_REMEMBERED: Final = "1d"
"""How long a hub remembers a site that fell silent: its alert clears after this (a site taken down for good)."""


def site_rules() -> list[dict[str, Any]]:
    """A hub's only rules that read its sites' series: each site's heartbeat, and an alert when one stops.

    The heartbeat is kube-prometheus-stack's ``Watchdog`` (``defaultRules.rules.general``, on in the chart and never
    turned off by the kit), which fires for as long as the site's Prometheus evaluates rules; a site forwards its
    ``ALERTS`` (``remoteWrite.forward: dashboards``). Its absence means the uplink, the site's Prometheus or the site
    is down. The recorded series is one per site, so remembering a day of them costs little.
    """
    heartbeat = f'ALERTS{{alertname="Watchdog",{SITE_LABEL}!=""}}'
    return [
        {"record": SITE_LAST_SEEN, "expr": f"max by ({SITE_LABEL}) (timestamp({heartbeat}))"},
        _alert(
            "InferstackSiteSilent",
            f"time() - max_over_time({SITE_LAST_SEEN}[{SITE_REMEMBERED}]) > {SITE_SILENT_AFTER_S}",
            "warning",
            f"Site {{{{ $labels.{SITE_LABEL} }}}} has forwarded nothing for {{{{ $value | humanizeDuration }}}}",
            "The hub has received no sample from this edge site's Prometheus (its Watchdog heartbeat) for over "
            f"{SITE_SILENT_AFTER_S // 60} minutes: the uplink, the site's Prometheus or the site is down. The site "
            "keeps answering from its local model and cache, but requests that need the hub fail, and its alerts "
            f"reach no one here. A site silent for a day ({SITE_REMEMBERED}) is forgotten and the alert clears.",
        ),
    ]


def prometheus_rule(
    models: Iterable[ModelSlo],
    *,
    name: str = "inferstack",
    namespace: str | None = None,
    gateways: Sequence[tuple[str, str]] = (),
    caches: Sequence[tuple[str | None, str]] = ((None, REDIS_EXPORTER),),
    receives_sites: bool = False,
) -> dict[str, Any]:
    """The PrometheusRule manifest: recording rules, one alert set per model, platform alerts, and one set per gateway
    of ``gateways``, each (namespace, Deployment name: the ``Gateway`` component's name), and one cache set per
    ``caches`` entry (its name, ``None`` for the stack's own, and its exporter's release: ``cache_alerts``). A hub that
    ``receives_sites`` (``observability.remoteWriteReceiver``) also watches each site's heartbeat (``site_rules``).

    Models are sorted by namespace and name so the manifest does not change when the config lists them
    in another order. Two models with the same namespace and name are an error.
    """
    ordered: Sequence[ModelSlo] = sorted(models, key=lambda m: (m.namespace, m.name))
    seen: set[tuple[str, str]] = set()
    for slo in ordered:
        key = (slo.namespace, slo.name)
        if key in seen:
            raise ValueError(f"ModelSlo {slo.namespace}/{slo.name} is listed twice; model names must be unique")
        seen.add(key)
    groups = [
        {"name": "inferstack.recording", "rules": recording_rules(ordered)},
        {"name": "inferstack.models", "rules": [rule for slo in ordered for rule in model_alerts(slo)]},
        {
            "name": "inferstack.platform",
            "rules": [
                *platform_alerts(),
                *(rule for name, exporter in caches for rule in cache_alerts(name, exporter)),
            ],
        },
        {
            "name": "inferstack.gateway",
            "rules": [rule for namespace, name in sorted(gateways) for rule in gateway_alerts(namespace, name)],
        },
        *([{"name": "inferstack.sites", "rules": site_rules()}] if receives_sites else []),
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "namespace": namespace or CHARTS["kube-prometheus-stack"].namespace,
            "labels": {**prometheus_selector_labels(), "app.kubernetes.io/managed-by": "inferstack"},
        },
        # An empty group is valid for Prometheus, but drop it so a stack without models renders no noise.
        "spec": {"groups": [g for g in groups if g["rules"]]},
    }
