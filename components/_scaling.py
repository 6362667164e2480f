"""Pure builders for the scaling and scraping custom resources: KEDA, prometheus-operator, Karpenter.

Each function returns a plain manifest dict that validates strictly against the upstream CRD of the
pinned chart version (``tests/crds``, checked by ``tests/observability``); components hand them to
``kubernetes.apiextensions.CustomResource``. Two loops scale the GPU tier:

- pods: KEDA reads each model's queue depth from Prometheus and sizes its Deployment or LeaderWorkerSet;
- nodes: Karpenter launches a GPU node when a pod cannot be scheduled, and removes it only once empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from components._catalog import InstanceSpec
from components._charts import prometheus_selector_labels, prometheus_url
from components._dashboards import (
    ENGINE_METRICS,
    ENGINE_POD_LABEL,
    ENGINES,
    MODEL_LABEL,
    MODEL_POD_LABEL,
    Engine,
    GatewayMetrics,
    selector,
)
from components._efa import efa_interface_layout

ScaleTargetKind = Literal["Deployment", "LeaderWorkerSet"]
SCALE_TARGET_API_VERSIONS: Final[dict[ScaleTargetKind, str]] = {
    "Deployment": "apps/v1",
    # The LWS CRD declares the scale subresource on spec.replicas = number of groups, so KEDA's HPA adds
    # and removes whole leader+worker groups (kubernetes-sigs/lws, leaderworkerset CRD "subresources.scale").
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
}
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "inferstack"}

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check_name(field: str, value: str) -> None:
    if not _DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(f"{field}: {value!r} is not a DNS-1123 label; use lowercase letters, digits and '-'")


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
    sel = selector(ENGINE_METRICS[engine].queue, f'namespace="{namespace}"', f'{MODEL_LABEL}="{model}"')
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
) -> dict[str, Any]:
    """A KEDA ScaledObject that sizes one model on its queue depth.

    ``threshold`` is the waiting requests per replica KEDA aims for (the model's latency profile);
    replicas = ceil(waiting / threshold), within [min, max]. The queue metric is
    ``vllm:num_requests_waiting`` for vLLM and ``nv_trt_llm_request_metrics{request_type="waiting"}`` for
    TensorRT-LLM, both summed over the model's pods (the vLLM production-stack scales on the same metric).

    Warm capacity is the default: ``min_replicas`` must stay >= 1 unless ``scale_to_zero`` opts in. A
    model at zero has no pod left to export a queue, so scale-to-zero adds a second trigger on the
    gateway's request rate for that model (``inferstack_gateway_requests_total{model=...}``) that wakes it.

    ``target_kind="LeaderWorkerSet"`` scales whole leader+worker groups (``target_name`` defaults to the
    model name).
    """
    _check_name("model", model)
    _check_name("namespace", namespace)
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
        asked = selector(g.REQUESTS_TOTAL, f'{g.MODEL_LABEL}="{model}"')
        triggers.append(
            {
                "type": "prometheus",
                "name": "gateway-requests",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": server,
                    "query": f"sum(rate({asked}[1m]))",
                    "threshold": _threshold(threshold),
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


# --- scraping: prometheus-operator monitors ---------------------------------------------------------------

SCRAPE_INTERVAL_SERVING: Final = "5s"
"""Engines and gateway: KEDA polls every 5 s, so a slower scrape would only delay each scaling step."""
SCRAPE_INTERVAL_INFRA: Final = "15s"

ENGINE_METRICS_PORT: Final = "http"
"""Container port name of both engines' OpenAI servers, which serve /metrics (components/inference_server.py)."""


def _monitor_metadata(name: str, namespace: str) -> dict[str, Any]:
    _check_name("name", name)
    _check_name("namespace", namespace)
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
) -> dict[str, Any]:
    """A ServiceMonitor for the gateway's ``/metrics`` (the ``inferstack_gateway_*`` series)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _monitor_metadata("inferstack-gateway", namespace),
        "spec": {
            "selector": {"matchLabels": selector_labels or {"app.kubernetes.io/name": "inferstack-gateway"}},
            "endpoints": [{"port": port, "path": "/metrics", "interval": interval}],
        },
    }


def redis_exporter_service_monitor(
    namespace: str, *, release: str = "prometheus-redis-exporter", interval: str = SCRAPE_INTERVAL_INFRA
) -> dict[str, Any]:
    """A ServiceMonitor for the prometheus-redis-exporter chart's Service (``redis_up`` and friends).

    Selector and port name are the chart's own: ``app.kubernetes.io/name``/``instance`` selector labels and
    service port ``redis-exporter`` (charts/prometheus-redis-exporter, templates/_helpers.tpl, values.yaml
    ``service.portName``).
    """
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _monitor_metadata("inferstack-cache", namespace),
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


# --- nodes: Karpenter -------------------------------------------------------------------------------------

KarpenterCapacityType = Literal["on-demand", "spot", "reserved"]
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
"""Keeps everything but GPU workloads (which tolerate it) off GPU nodes; same taint as managed pools."""
POOL_LABEL: Final = "inferstack.io/pool"
DISCOVERY_TAG: Final = "karpenter.sh/discovery"
"""Subnets and security groups tagged ``karpenter.sh/discovery: <cluster>`` (Karpenter getting started)."""


@dataclass(frozen=True)
class KarpenterGpuPool:
    """Plain inputs of one Karpenter-provisioned GPU pool; ``karpenter_node_class``/``_pool`` render it."""

    name: str
    """NodePool and EC2NodeClass name; also the ``inferstack.io/pool`` node label models select."""
    spec: InstanceSpec
    """The catalog row: every derived number (GPUs, EFA layout, NVMe, memory) is read from it."""
    node_role_name: str
    """IAM role the nodes run as (the node role with its EKS access entry)."""
    cluster_name: str
    """Value of the ``karpenter.sh/discovery`` tag on the cluster's subnets and security groups."""
    max_nodes: int
    """Upper bound of the pool: becomes the NodePool ``limits``."""
    capacity_type: KarpenterCapacityType = "on-demand"
    reservation_id: str | None = None
    """``cr-...`` of an ODCR or a Capacity Block; requires ``capacity_type="reserved"``."""
    placement_group_name: str | None = None
    """Cluster placement group for EFA pools. Karpenter selects it, never creates it. Leave it out with a
    reservation that was not created in that group (insufficient capacity, terraform-aws-eks #3730)."""
    zone: str | None = None
    """Pin the pool to one availability zone: a cluster placement group lives in one."""
    root_volume_gib: int = 200
    """Encrypted gp3 root; images and model caches go to the NVMe RAID0 array."""
    consolidate_after: str = "10m"
    """How long an empty GPU node stays as warm capacity before Karpenter removes it."""
    expire_after: str = "720h"
    """Nodes are replaced after 30 days (AMI and kernel updates), within the disruption budget."""
    disruption_budget_nodes: str = "1"
    """At most this many of the pool's nodes disrupted at once (a count or a percentage)."""

    def __post_init__(self) -> None:
        _check_name("KarpenterGpuPool.name", self.name)
        if self.max_nodes < 1:
            raise ValueError(f"KarpenterGpuPool.max_nodes: {self.max_nodes} must be >= 1")
        if self.reservation_id is not None and self.capacity_type != "reserved":
            raise ValueError(
                f"KarpenterGpuPool.capacity_type: {self.capacity_type!r} with reservation_id "
                f"{self.reservation_id!r}; set capacity_type='reserved' to launch into the reservation"
            )
        if self.capacity_type == "reserved" and self.reservation_id is None:
            raise ValueError(
                "KarpenterGpuPool.reservation_id: required when capacity_type='reserved'; give the cr-... id "
                "of the ODCR or Capacity Block"
            )


def karpenter_node_class(pool: KarpenterGpuPool) -> dict[str, Any]:
    """The EC2NodeClass: AMI, IAM role, network interfaces, placement, local NVMe and reservation."""
    discovery = [{"tags": {DISCOVERY_TAG: pool.cluster_name}}]
    spec: dict[str, Any] = {
        # The al2023 alias resolves to the NVIDIA variant of the EKS AL2023 AMI for GPU instance types
        # (karpenter.sh docs, EC2NodeClass "amiSelectorTerms"). "@latest" follows new AMIs through drift,
        # which the disruption budget paces.
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": pool.node_role_name,
        "subnetSelectorTerms": discovery,
        "securityGroupSelectorTerms": discovery,
        # IMDSv2 only; hop limit 1 so pods never reach the node's credentials (they use Pod Identity).
        "metadataOptions": {
            "httpEndpoint": "enabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "required",
        },
        "blockDeviceMappings": [
            {
                "deviceName": "/dev/xvda",
                "rootVolume": True,
                "ebs": {
                    "volumeSize": f"{pool.root_volume_gib}Gi",
                    "volumeType": "gp3",
                    "encrypted": True,
                    "deleteOnTermination": True,
                },
            }
        ],
        "tags": {POOL_LABEL: pool.name},
    }
    if pool.spec.nvme_disks:
        # Karpenter stripes every instance-store disk into one RAID0 array for containerd and the kubelet,
        # the same layout nodeadm's localStorage RAID0 gives managed pools (EC2NodeClass instanceStorePolicy).
        spec["instanceStorePolicy"] = "RAID0"
    layout = efa_interface_layout(pool.spec)
    if layout:
        # The same rule as the managed launch template (components._efa): card 0 / device 0 ENA, then one
        # efa-only interface per EFA card. networkInterfaces needs Karpenter >= 1.11.
        spec["networkInterfaces"] = [
            {"networkCardIndex": i.network_card_index, "deviceIndex": i.device_index, "interfaceType": i.interface_type}
            for i in layout
        ]
    if pool.placement_group_name is not None:
        spec["placementGroupSelector"] = {"name": pool.placement_group_name}
    if pool.reservation_id is not None:
        # Needs the ReservedCapacity feature gate on the controller (Karpenter >= 1.3 ODCR, >= 1.6 Capacity
        # Blocks); the NodePool then asks for karpenter.sh/capacity-type "reserved".
        spec["capacityReservationSelectorTerms"] = [{"id": pool.reservation_id}]
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": pool.name, "labels": dict(MANAGED_BY)},
        "spec": spec,
    }


def karpenter_node_pool(pool: KarpenterGpuPool) -> dict[str, Any]:
    """The NodePool: one instance type, the GPU taint, limits from ``max_nodes``, never consolidate busy GPUs."""
    requirements: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [pool.spec.instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [pool.capacity_type]},
    ]
    if pool.zone is not None:
        requirements.append({"key": "topology.kubernetes.io/zone", "operator": "In", "values": [pool.zone]})
    # Limits stop Karpenter from launching past the pool's maximum (NodePool spec.limits); derived from the
    # catalog so a changed instance type cannot leave a stale number behind. GPUs and host memory bound the
    # pool exactly (one instance type); the catalog carries no vCPU count, so there is no cpu limit.
    limits: dict[str, Any] = {
        "nvidia.com/gpu": pool.spec.gpu_count * pool.max_nodes,
        "memory": f"{pool.spec.host_memory_gib * pool.max_nodes}Gi",
    }
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": pool.name, "labels": dict(MANAGED_BY)},
        "spec": {
            "template": {
                "metadata": {"labels": {POOL_LABEL: pool.name}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                    "requirements": requirements,
                    "taints": [dict(GPU_TAINT)],
                    "expireAfter": pool.expire_after,
                },
            },
            "disruption": {
                # WhenEmpty: a node is only consolidated once no serving pod runs on it. The default
                # (WhenEmptyOrUnderutilized) would evict a loaded model replica to bin-pack, a cold start on
                # the latency path.
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                "budgets": [{"nodes": pool.disruption_budget_nodes}],
            },
            "limits": limits,
        },
    }
