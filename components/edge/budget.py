"""The site's node budget: every pod the edge stack renders, with the requests it renders, against the nodes.

One source of truth: each number is read from the same render the component applies (``server_pod``,
``redis_demand``, ``gateway_demand``, ``observability_demand``, ``DCGM_EXPORTER_RESOURCES``), and a pod's effective
request follows Kubernetes' rule (``components.kube.requests``); the arithmetic is ``components.kube.budget``'s, which
the cloud's system node group budget shares.
Chart pods whose values leave them without requests (node exporter, kube-state-metrics, the operator, the Redis
exporter, the device plugin) request nothing, and the scheduler counts them the same way; a chart or operator default
that does request something (the DCGM exporter's, the config-reloader sidecars') is written out in the values and
counted here. k3s's own pods are in each node's ``reserved*`` share.
"""

from __future__ import annotations

from typing import Any

from components.addons.cluster_addons import DCGM_EXPORTER_RESOURCES
from components.cache.redis_cache import redis_demand
from components.catalog.models import MODELS
from components.edge.specs import K3S_NVIDIA_RUNTIME_CLASS, K3S_STORAGE_CLASS, EdgeNodeSpec
from components.gateway.gateway import gateway_demand
from components.kube.budget import Demand, demand, surge_pods
from components.kube.requests import Requests, pod_requests
from components.observability.observability import SMALL_SITE_PROMETHEUS_RESOURCES, observability_demand
from components.serving._placement import Placement, place
from components.specs import CacheSpec, GatewaySpec, ModelDeploySpec, ObservabilitySpec

MODEL_CACHE_GIB = 20
"""The per-pod local-path volume a llama.cpp server keeps its GGUF file on (the largest catalog file is 7.6 GB)."""


Placed = list[tuple[ModelDeploySpec, EdgeNodeSpec, Placement]]
"""Each model with its node and its placement (``placed``)."""


def placed(nodes: tuple[EdgeNodeSpec, ...], models: tuple[ModelDeploySpec, ...]) -> Placed:
    """Each model with its node and placement. Models that cannot be placed are left out (the model checks report
    them)."""
    from components.serving._placement import PlacementProblem

    by_name = {n.name: n for n in nodes}
    found: Placed = []
    for spec in models:
        node = by_name.get(spec.pool)
        if node is None:
            continue
        try:
            found.append((spec, node, place(spec, node)))
        except PlacementProblem:
            continue
    return found


def cpu_decoders(nodes: tuple[EdgeNodeSpec, ...], models: Placed) -> dict[str, int]:
    """Per node: the llama.cpp chat pods decoding on its CPU (every replica) among the ``placed`` models, which share
    its decode threads (``InferenceServerArgs.cpu_decoders``)."""
    count = {n.name: 0 for n in nodes}
    for spec, node, placement in models:
        if not placement.gpu_offload and not placement.model.is_embedding:
            count[node.name] += spec.replicas
    return count


def serving_args(spec: ModelDeploySpec, node: EdgeNodeSpec, rollout_surge: bool, cpu_decoders: int = 1) -> Any:
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
        cpu_decoders=cpu_decoders,
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
    from components.serving.inference_server import rollout_strategy, server_pod

    models_placed = placed(nodes, models)
    decoders = cpu_decoders(nodes, models_placed)
    workloads: list[Demand] = []
    for spec, node, placement in models_placed:
        args = serving_args(spec, node, rollout_surge, max(1, decoders[node.name]))
        pods = spec.replicas + surge_pods(rollout_strategy(rollout_surge))
        workloads.append(Demand(spec.name, pod_requests(server_pod(args, placement)), pods, node.name))
    chat = [m for m in models if not MODELS[m.model].is_embedding]
    if gateway.enabled and chat:
        workloads.append(gateway_demand(gateway))
    workloads.append(redis_demand(cache))
    workloads += observability_demand(observability, SMALL_SITE_PROMETHEUS_RESOURCES)
    # A DaemonSet: one DCGM exporter pod on each GPU node (ClusterAddons installs none on a CPU-only site).
    exporter = demand("dcgm-exporter", DCGM_EXPORTER_RESOURCES)
    workloads += [Demand(exporter.name, exporter.per_pod, 1, node.name) for node in nodes if node.gpu]
    return [d for d in workloads if d.total != Requests()]


def node_capacity(node: EdgeNodeSpec) -> Requests:
    """What one node offers pods: its cores and memory minus what k3s and the OS keep."""
    return Requests(
        round((node.cpu - node.reserved_cpu) * 1000),
        round((node.memory_gib - node.reserved_memory_gib) * 2**30),
        node.gpu_count if node.gpu else 0,
    )
