"""The site's node budget: every pod the edge stack renders, with the requests it renders, against the nodes.

One source of truth: each number is read from the same render the component applies (``server_pod``,
``redis_resources``, ``GATEWAY_RESOURCES``, ``prometheus_values``, ``collector_values``,
``DCGM_EXPORTER_RESOURCES``), and a pod's effective request follows Kubernetes' rule (``components.kube.requests``).
Chart pods whose values leave them without requests (node exporter, kube-state-metrics, the operator, the Redis
exporter, the device plugin) request nothing, and the scheduler counts them the same way; a chart or operator default
that does request something (the DCGM exporter's, the config-reloader sidecars') is written out in the values and
counted here. k3s's own pods are in each node's ``reserved*`` share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.addons.cluster_addons import DCGM_EXPORTER_RESOURCES
from components.cache.redis_cache import redis_resources
from components.catalog.models import MODELS
from components.edge.specs import K3S_NVIDIA_RUNTIME_CLASS, K3S_STORAGE_CLASS, EdgeNodeSpec
from components.gateway.gateway import GATEWAY_RESOURCES, GATEWAY_ROLLOUT
from components.kube.requests import Requests, container_requests, pod_requests
from components.observability.observability import (
    SMALL_SITE_PROMETHEUS_RESOURCES,
    collector_values,
    prometheus_values,
)
from components.serving._placement import place
from components.specs import CacheSpec, GatewaySpec, ModelDeploySpec, ObservabilitySpec

MODEL_CACHE_GIB = 20
"""The per-pod local-path volume a llama.cpp server keeps its GGUF file on (the largest catalog file is 7.6 GB)."""


@dataclass(frozen=True)
class Demand:
    """One workload's pods: what each asks and how many there are at most."""

    name: str
    per_pod: Requests
    pods: int
    node: str | None = None
    """The node the pods must run on (a model's pool); ``None``: anywhere on the site."""

    @property
    def total(self) -> Requests:
        return self.per_pod * self.pods


def serving_args(spec: ModelDeploySpec, node: EdgeNodeSpec, rollout_surge: bool) -> Any:
    """The InferenceServer args an edge stack passes, minus the Pulumi-only ones (provider, store URLs)."""
    from components.serving.inference_server import InferenceServerArgs, ModelCacheVolume

    return InferenceServerArgs.model_construct(
        spec=spec,
        pool=node,
        namespace="inferstack-serving",
        provider=None,  # type: ignore[arg-type]  # model_construct: the budget only renders, never provisions
        model_source="s3://store/model",
        engine_store="s3://store",
        loader_image="model-loader",
        service_account="model-loader",
        priority_class="inferstack-serving",
        rollout_surge=rollout_surge,
        fabric="none",
        model_cache=ModelCacheVolume(host_path=None, storage_class=K3S_STORAGE_CLASS, size_gib=MODEL_CACHE_GIB),
        gpu_runtime_class=K3S_NVIDIA_RUNTIME_CLASS,
    )


def site_demand(
    nodes: tuple[EdgeNodeSpec, ...],
    models: tuple[ModelDeploySpec, ...],
    cache: CacheSpec,
    gateway: GatewaySpec,
    observability: ObservabilitySpec,
    *,
    rollout_surge: bool,
) -> list[Demand]:
    """Every pod the edge stack renders that requests anything. Models that cannot be placed are skipped (the
    model checks report them).

    ``rollout_surge`` is the tier's (``stacks.tiers``, ``grows_nodes``): a model's pods are its replicas plus the
    pods its rollout adds, read from the same ``rollout_strategy`` its Deployment renders. A site's nodes do not
    grow, so a rollout adds none and the budget holds the replicas alone."""
    from components.serving._placement import PlacementProblem
    from components.serving.inference_server import rollout_strategy, server_pod, surge_pods

    by_name = {n.name: n for n in nodes}
    demand: list[Demand] = []
    for spec in models:
        node = by_name.get(spec.pool)
        if node is None:
            continue
        try:
            placement = place(spec, node)
        except PlacementProblem:
            continue
        args = serving_args(spec, node, rollout_surge)
        pods = spec.replicas + surge_pods(rollout_strategy(rollout_surge))
        demand.append(Demand(spec.name, pod_requests(server_pod(args, placement)), pods, node.name))
    chat = [m for m in models if not MODELS[m.model].is_embedding]
    if gateway.enabled and chat:
        # The HPA may grow the gateway to maxReplicas, and a rollout then adds its surge pod: the site must hold the
        # peak, not the start.
        pods = max(gateway.replicas, gateway.max_replicas) + surge_pods(GATEWAY_ROLLOUT)
        demand.append(Demand("gateway", container_requests({"resources": GATEWAY_RESOURCES}), pods))
    demand.append(Demand("redis", container_requests({"resources": redis_resources(cache.memory_gib)}), 1))
    values = prometheus_values(observability, resources=SMALL_SITE_PROMETHEUS_RESOURCES)
    # The operator adds a config-reloader sidecar to the Prometheus and Alertmanager pods, with the resources the
    # values pass it.
    reloader = container_requests({"resources": values["prometheusOperator"]["prometheusConfigReloader"]["resources"]})
    prometheus = container_requests({"resources": values["prometheus"]["prometheusSpec"]["resources"]})
    demand.append(Demand("prometheus", prometheus + reloader, 1))
    demand.append(Demand("alertmanager", reloader, 1))
    demand.append(Demand("grafana", container_requests({"resources": values["grafana"]["resources"]}), 1))
    collector = collector_values(observability)
    demand.append(Demand("opentelemetry-collector", container_requests({"resources": collector["resources"]}), 1))
    # A DaemonSet: one DCGM exporter pod on each GPU node (ClusterAddons installs none on a CPU-only site).
    exporter = container_requests({"resources": DCGM_EXPORTER_RESOURCES})
    demand += [Demand("dcgm-exporter", exporter, 1, node.name) for node in nodes if node.gpu]
    return [d for d in demand if d.total != Requests()]


def node_capacity(node: EdgeNodeSpec) -> Requests:
    """What one node offers pods: its cores and memory minus what k3s and the OS keep."""
    return Requests(
        round((node.cpu - node.reserved_cpu) * 1000),
        round((node.memory_gib - node.reserved_memory_gib) * 2**30),
        node.gpu_count if node.gpu else 0,
    )


def shortfall(demand: list[Demand], capacity: Requests) -> list[str]:
    """The resources ``demand`` exceeds ``capacity`` by, in words; empty when it fits."""
    total = sum((d.total for d in demand), Requests())
    short = []
    if total.cpu_m > capacity.cpu_m:
        short.append(f"{(total.cpu_m - capacity.cpu_m) / 1000:g} CPU")
    if total.memory > capacity.memory:
        short.append(f"{(total.memory - capacity.memory) / 2**30:.1f} GiB")
    if total.gpus > capacity.gpus:
        short.append(f"{total.gpus - capacity.gpus} GPU")
    return short


def biggest(demand: list[Demand], n: int = 3) -> str:
    """The ``n`` largest consumers, by their share of CPU and memory requested."""
    total = sum((d.total for d in demand), Requests())

    def weight(d: Demand) -> float:
        t = d.total
        return t.cpu_m / max(total.cpu_m, 1) + t.memory / max(total.memory, 1) + t.gpus

    top = sorted(demand, key=weight, reverse=True)[:n]
    return ", ".join(f"{d.name} {d.pods}x ({d.per_pod.show()})" if d.pods > 1 else f"{d.name} ({d.per_pod.show()})"
                     for d in top)  # fmt: skip
