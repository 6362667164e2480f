"""Pure builders for KEDA's ScaledObjects: each model's replicas follow its queue depth in Prometheus.

Each function returns a plain manifest dict that validates strictly against the upstream CRD of the pinned
chart version (``tests/crds``); components hand them to ``kubernetes.apiextensions.CustomResource``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from components.catalog.charts import prometheus_url
from components.kube.objects import MANAGED_BY, check_name
from components.observability.dashboards import (
    ENGINE_METRICS,
    ENGINES,
    MODEL_LABEL,
    MODEL_POD_LABEL,
    OWN_SERIES,
    Engine,
    GatewayMetrics,
    selector,
)

ScaleTargetKind = Literal["Deployment", "LeaderWorkerSet"]
SCALE_TARGET_API_VERSIONS: Final[dict[ScaleTargetKind, str]] = {
    "Deployment": "apps/v1",
    # The LWS CRD declares the scale subresource on spec.replicas = number of groups, so KEDA's HPA adds
    # and removes whole leader+worker groups (kubernetes-sigs/lws, leaderworkerset CRD "subresources.scale").
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}

# --- pods: KEDA -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalingBehavior:
    """How fast replicas follow the queue. Defaults: add pods at once, remove them slowly.

    A GPU replica takes tens of seconds (warm node, cached weights) to minutes (new node) to serve, so
    scale-up reacts to the first poll while scale-down waits out a burst: removing a replica that is
    needed again a minute later costs a cold start on the latency path.
    """

    polling_interval_s: int = 5
    """KEDA poll period (its default is 30 s): queue depth moves within seconds."""
    scale_up_stabilization_s: int = 0
    """No window on the way up: a burst gets replicas at the next poll."""
    scale_up_pods_per_period: int = 4
    scale_up_percent_per_period: int = 100
    scale_up_period_s: int = 15
    """Up to max(4 pods, +100 %) per 15 s, the HPA's own default rate."""
    scale_down_stabilization_s: int = 600
    """The HPA scales down to the highest recommendation of the last 10 min, so replicas don't flap."""
    scale_down_pods_per_period: int = 1
    scale_down_period_s: int = 120
    """Then one pod every 2 min at most."""
    cooldown_s: int = 300
    """Scale-to-zero only: quiet time after the last activity before the last replica goes."""
    fallback_failure_threshold: int = 3
    """Failed polls (Prometheus unreachable) before KEDA holds the fallback replica count."""

    def hpa_behavior(self) -> dict[str, Any]:
        """``advanced.horizontalPodAutoscalerConfig.behavior`` (autoscaling/v2 HPA behavior)."""
        return {
            "scaleUp": {
                "stabilizationWindowSeconds": self.scale_up_stabilization_s,
                "selectPolicy": "Max",
                "policies": [
                    {"type": "Pods", "value": self.scale_up_pods_per_period, "periodSeconds": self.scale_up_period_s},
                    {
                        "type": "Percent",
                        "value": self.scale_up_percent_per_period,
                        "periodSeconds": self.scale_up_period_s,
                    },
                ],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": self.scale_down_stabilization_s,
                "selectPolicy": "Min",
                "policies": [
                    {
                        "type": "Pods",
                        "value": self.scale_down_pods_per_period,
                        "periodSeconds": self.scale_down_period_s,
                    }
                ],
            },
        }


def _threshold(value: float) -> str:
    # KEDA trigger metadata is a map of strings (ScaledObject CRD: triggers[].metadata additionalProperties
    # type string); "4" rather than "4.0" keeps the manifest as people write it.
    return f"{value:g}"


def queue_query(engine: Engine, model: str, namespace: str) -> str:
    """Waiting requests of one model, summed over its pods: KEDA divides by the threshold per replica."""
    sel = selector(ENGINE_METRICS[engine].queue, f'namespace="{namespace}"', f'{MODEL_LABEL}="{model}"', OWN_SERIES)
    return f"sum({sel})"


def scaled_object(
    *,
    model: str,
    namespace: str,
    engine: Engine,
    threshold: float,
    max_replicas: int,
    min_replicas: int = 1,
    scale_to_zero: bool = False,
    target_kind: ScaleTargetKind = "Deployment",
    target_name: str | None = None,
    behavior: ScalingBehavior | None = None,
    server_address: str | None = None,
    wake_aliases: Sequence[str] = (),
    gateway_namespaces: Sequence[str] = (),
) -> dict[str, Any]:
    """A KEDA ScaledObject that sizes one model on its queue depth.

    ``threshold`` is the waiting requests per replica KEDA aims for (the model's latency profile);
    replicas = ceil(waiting / threshold), within [min, max]. The queue metric is
    ``vllm:num_requests_waiting`` for vLLM and ``nv_trt_llm_request_metrics{request_type="waiting"}`` for
    TensorRT-LLM, both summed over the model's pods (the vLLM production-stack scales on the same metric).

    Warm capacity is the default: ``min_replicas`` must stay >= 1 unless ``scale_to_zero`` opts in. A
    model at zero has no pod left to export a queue, so scale-to-zero adds a second trigger on the
    gateway's request rate for that model (``inferstack_gateway_model_requests_total{model=...}``) that wakes it. That
    trigger asks for one replica at most: past the first, the queue alone sizes the model.

    ``wake_aliases``: the gateway's route aliases that may send requests to this model. The gateway counts a request
    under the alias the client asked for (``model`` label), so a request for a route alias (``chat``) that routes to
    this model would never show under its own name: the wake trigger reads the model's name and these aliases.

    ``gateway_namespaces``: where the gateways in front of this model run; the wake trigger counts their requests
    only, so a same-named model behind another team's gateway does not wake this one. Empty: every gateway's.

    ``target_kind="LeaderWorkerSet"`` scales whole leader+worker groups (``target_name`` defaults to the
    model name).
    """
    check_name("model", model)
    check_name("namespace", namespace)
    if engine not in ENGINES:
        raise ValueError(f"engine: {engine!r}; allowed: {', '.join(ENGINES)}")
    if target_kind not in SCALE_TARGET_API_VERSIONS:
        raise ValueError(f"target_kind: {target_kind!r}; allowed: {', '.join(SCALE_TARGET_API_VERSIONS)}")
    if not threshold > 0:
        raise ValueError(f"threshold: {threshold!r} waiting requests per replica must be > 0")
    if scale_to_zero:
        min_replicas = 0
    elif min_replicas < 1:
        raise ValueError(
            f"min_replicas: {min_replicas} drops the model's warm capacity; keep it >= 1, "
            "or opt into cold starts with scale_to_zero=True"
        )
    if max_replicas < max(min_replicas, 1):
        raise ValueError(f"max_replicas: {max_replicas} must be >= max(min_replicas, 1) = {max(min_replicas, 1)}")
    behavior = behavior or ScalingBehavior()
    server = server_address or prometheus_url()

    triggers: list[dict[str, Any]] = [
        {
            "type": "prometheus",
            "name": "queue-depth",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": server,
                "query": queue_query(engine, model, namespace),
                "threshold": _threshold(threshold),
            },
        }
    ]
    spec: dict[str, Any] = {
        "scaleTargetRef": {
            "apiVersion": SCALE_TARGET_API_VERSIONS[target_kind],
            "kind": target_kind,
            "name": target_name or model,
        },
        "pollingInterval": behavior.polling_interval_s,
        "minReplicaCount": min_replicas,
        "maxReplicaCount": max_replicas,
        # Prometheus down must not scale a serving model in: hold the current count (or the floor).
        "fallback": {
            "failureThreshold": behavior.fallback_failure_threshold,
            "replicas": max(min_replicas, 1),
            "behavior": "currentReplicasIfHigher",
        },
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": behavior.hpa_behavior()}},
        "triggers": triggers,
    }
    if scale_to_zero:
        g = GatewayMetrics
        # A model at zero has no pod to report a queue: the gateway's request rate for it wakes it. The
        # first requests get a clear 503 from the gateway until a replica is ready (a cold start).
        for alias in wake_aliases:
            check_name("wake_aliases[]", alias)
        for gateway in gateway_namespaces:
            check_name("gateway_namespaces[]", gateway)
        # The gateway's series carry its own namespace (its ServiceMonitor's target).
        gateways = sorted(set(gateway_namespaces))
        gateway_matcher = ""
        if gateways:
            gateway_matcher = (
                f'namespace="{gateways[0]}"' if len(gateways) == 1 else f'namespace=~"{"|".join(gateways)}"'
            )
        names = sorted({model, *wake_aliases})
        # Either route of an alias wakes the model: a request the alias sends to its other model wakes this one too
        # (a cold start that was not needed), where matching the model's own name alone never woke it at all.
        # The per-alias counter the gateway starts at 0, not the requests counter: that one's series are born at 1
        # (their labels carry the answer's status), so rate() would miss the request that should wake the model.
        asked = selector(
            g.MODEL_REQUESTS_TOTAL,
            f'{g.MODEL_LABEL}="{model}"' if len(names) == 1 else f'{g.MODEL_LABEL}=~"{"|".join(names)}"',
            OWN_SERIES,
            gateway_matcher,
        )
        triggers.append(
            {
                "type": "prometheus",
                "name": "gateway-requests",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": server,
                    # Requests per second are not waiting requests: against the queue threshold they would ask for
                    # rps / threshold replicas (the HPA takes the highest trigger), e.g. 8 replicas for a model
                    # serving 30 req/s on one with an empty queue. Capped at 1 with a target of 1, this trigger
                    # wakes the model and never sizes it.
                    "query": f"clamp_max(sum(rate({asked}[1m])), 1)",
                    "threshold": "1",
                    # Any request activates the model (0 -> 1); KEDA activates on value > activation.
                    "activationThreshold": "0",
                },
            }
        )
        spec["cooldownPeriod"] = behavior.cooldown_s
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {
            "name": model,
            "namespace": namespace,
            "labels": {MODEL_POD_LABEL: model, **MANAGED_BY},
        },
        "spec": spec,
    }
