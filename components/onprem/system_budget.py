"""The system nodes' budget: every pod the on-prem stack places on the servers ``cluster.systemNodeSelector`` picks,
against what ``cluster.systemNodes`` says they offer.

The fleet is fixed and no autoscaler adds a server, so pods that do not fit stay Pending. The pods are those of the
cloud's system node group that this tier runs too (``gateway_demand``, ``redis_demand``, ``observability_demand``,
``controllers_demand``) and its own operators' (``operator_demand`` of the GPU and the Network Operator), each read from
the values its component installs. MetalLB's controller and speakers, the local static provisioner and the Redis
exporter request nothing (their charts leave ``resources`` empty), and the scheduler counts them the same way; the GPU
Operator's operands and the DCGM exporter run on the GPU servers. A node offers its cores and memory less its
``reserved*`` share (the kubelet's and the cluster's own pods') less the kit's DaemonSet pods on every node. The budget
is counted as one pool, as the cloud's: a pod that fits no single node is the cache check's (``cache.memoryGib``).
"""

from __future__ import annotations

from components.addons.cluster_addons import controllers_demand
from components.cache.redis_cache import redis_demand
from components.gateway.gateway import gateway_demand
from components.kube.budget import Demand, total
from components.kube.requests import Requests
from components.observability.observability import observability_demand
from components.onprem import gpu_operator, network_operator
from components.onprem.specs import FabricSpec, GpuOperatorSpec, NetworkOperatorSpec, SystemNodesSpec
from components.specs import CacheSpec, GatewaySpec, ObservabilitySpec


def operator_demand(
    gpu: GpuOperatorSpec, network: NetworkOperatorSpec, fabric: FabricSpec
) -> tuple[list[Demand], list[Demand]]:
    """The tier's operators off the GPU servers: (their Deployments' pods, the DaemonSet pods each node runs). The
    Network Operator is the kit's where the fabric is RDMA and ``networkOperator.install`` is on."""
    pods, daemons = gpu_operator.operator_demand(gpu, fabric)
    if fabric.rdma and network.install:
        more, more_daemons = network_operator.operator_demand(fabric)
        pods, daemons = pods + more, daemons + more_daemons
    return pods, daemons


def system_demand(
    gateway: GatewaySpec | None,
    cache: CacheSpec,
    observability: ObservabilitySpec,
    gpu: GpuOperatorSpec,
    network: NetworkOperatorSpec,
    fabric: FabricSpec,
) -> list[Demand]:
    """Every pod on the system nodes that requests anything, at its most, DaemonSets aside (``node_capacity``).

    ``gateway``: ``None`` where the stack deploys none. The cache is the in-cluster Redis, the tier's only kind."""
    demand = [gateway_demand(gateway)] if gateway is not None else []
    demand.append(redis_demand(cache))
    demand += observability_demand(observability)
    demand += controllers_demand()
    demand += operator_demand(gpu, network, fabric)[0]
    return [d for d in demand if d.total != Requests()]


def node_capacity(
    nodes: SystemNodesSpec, gpu: GpuOperatorSpec, network: NetworkOperatorSpec, fabric: FabricSpec
) -> Requests:
    """What one system node offers the pods of ``system_demand``: its cores and memory less its reserved share and
    the kit's DaemonSet pods on it."""
    daemons = total(operator_demand(gpu, network, fabric)[1])
    return Requests(
        round((nodes.cpu - nodes.reserved_cpu) * 1000) - daemons.cpu_m,
        round((nodes.memory_gib - nodes.reserved_memory_gib) * 2**30) - daemons.memory,
    )
