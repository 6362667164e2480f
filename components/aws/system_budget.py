"""The system node group's budget: every pod the cloud stack places on the system nodes, against those nodes.

The group has a fixed size (``systemPool``: no autoscaler runs on it, and Karpenter provisions GPU nodes only), so
pods that do not fit stay Pending. Each number is read from the values the component installs (``gateway_demand``,
``redis_demand``, ``observability_demand``, ``controllers_demand``, Karpenter's and the load balancer controller's
``controller_demand``) or, for what EKS renders itself, from the pinned add-ons' manifests (``ADDON_PODS``). A node
offers its allocatable share (``SystemInstanceSpec``: the EKS AMI's kubelet reserve and eviction threshold) less the
DaemonSets that run on every node. The node budget is counted as one pool, as the edge site's: a pod that fits no
single node is the cache check's (``cache.memoryGib``).
"""

from __future__ import annotations

from components.addons.cluster_addons import controllers_demand
from components.aws import karpenter, load_balancer_controller
from components.aws.eks_cluster import ADDON_PODS
from components.cache.redis_cache import redis_demand
from components.catalog.instances import SystemInstanceSpec
from components.gateway.gateway import gateway_demand
from components.kube.budget import Demand, total
from components.kube.requests import Requests, pod_requests
from components.observability.observability import observability_demand
from components.specs import CacheSpec, GatewaySpec, ObservabilitySpec


def addon_demand(kubernetes_version: str) -> tuple[list[Demand], list[Demand]]:
    """The pinned EKS add-ons' pods: (their Deployments' pods, the DaemonSet pods each node runs)."""
    pods = ADDON_PODS[kubernetes_version]
    deployments = [Demand(a.name, pod_requests(a.pod), a.replicas) for a in pods if a.replicas is not None]
    daemons = [Demand(a.name, pod_requests(a.pod), 1) for a in pods if a.replicas is None]
    return [d for d in deployments if d.total != Requests()], [d for d in daemons if d.total != Requests()]


def system_demand(
    gateway: GatewaySpec | None,
    cache: CacheSpec,
    observability: ObservabilitySpec,
    *,
    kubernetes_version: str,
    karpenter_pools: bool,
    load_balancer: bool,
) -> list[Demand]:
    """Every pod on the system nodes that requests anything, at its most, DaemonSets aside (``node_capacity``).

    ``gateway``: ``None`` where the stack deploys none; ``karpenter_pools`` / ``load_balancer``: whether the stack
    installs Karpenter and the AWS Load Balancer Controller."""
    demand = [gateway_demand(gateway)] if gateway is not None else []
    if cache.kind == "in-cluster":
        demand.append(redis_demand(cache))
    demand += observability_demand(observability)
    if karpenter_pools:
        demand.append(karpenter.controller_demand())
    if load_balancer:
        demand.append(load_balancer_controller.controller_demand())
    demand += controllers_demand()
    demand += addon_demand(kubernetes_version)[0]
    return [d for d in demand if d.total != Requests()]


def node_capacity(instance: SystemInstanceSpec, kubernetes_version: str) -> Requests:
    """What one system node offers the pods of ``system_demand``: its allocatable share less its DaemonSets."""
    allocatable = Requests(instance.allocatable_cpu_m, instance.allocatable_memory_mib * 2**20)
    daemons = total(addon_demand(kubernetes_version)[1])
    return Requests(allocatable.cpu_m - daemons.cpu_m, allocatable.memory - daemons.memory)
