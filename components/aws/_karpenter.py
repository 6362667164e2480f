"""Pure builders for Karpenter's NodePool and EC2NodeClass: GPU nodes with the managed pools' guarantees.

Karpenter launches a GPU node when a pod cannot be scheduled and removes it only once empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from components.aws.efa import efa_interface_layout
from components.catalog.instances import InstanceSpec
from components.kube.labels import POOL_LABEL, gpu_node_labels
from components.kube.objects import MANAGED_BY, check_name

# --- nodes: Karpenter -------------------------------------------------------------------------------------

KarpenterCapacityType = Literal["on-demand", "spot", "reserved"]
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
"""Keeps everything but GPU workloads (which tolerate it) off GPU nodes; same taint as managed pools."""
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
    on_demand_fallback: bool = False
    """With a reservation: also accept on-demand capacity when the reservation is full or not yet active.
    Karpenter prefers ``reserved`` and falls back (karpenter.sh docs, "Utilizing ODCRs and Capacity Blocks")."""
    capacity_block: bool = False
    """The reservation is an EC2 Capacity Block: EC2 terminates its instances 30 minutes before the block
    ends, and Karpenter >= 1.6 drains them 10 minutes before that (same docs, "Capacity Blocks")."""
    ami_alias: str = "al2023@latest"
    """EC2NodeClass AMI alias. Pin it (``al2023@v20251120``) so an AMI change is a reviewed config change;
    Karpenter itself recommends against ``@latest`` in production (karpenter.sh docs, "Managing AMIs")."""
    efa: bool | None = None
    """Whether nodes carry EFA interfaces; defaults to the catalog (``spec.efa``)."""
    efa_security_group_id: str | None = None
    """The EFA pool's self-referencing security group (``components.aws.efa``), selected beside the cluster's
    discovered groups. Without it EFA nodes carry only the EKS cluster security group, whose egress rule to
    ``0.0.0.0/0`` does not cover EFA traffic."""
    capacity_label: str | None = None
    """Value of the ``inferstack.io/capacity`` node label; defaults to ``capacity_type``."""
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

    @property
    def efa_enabled(self) -> bool:
        return self.spec.efa if self.efa is None else self.efa

    def __post_init__(self) -> None:
        check_name("KarpenterGpuPool.name", self.name)
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
    # Selector terms are ORed (EC2NodeClass securityGroupSelectorTerms): the cluster's groups plus the EFA group.
    efa_group = [{"id": pool.efa_security_group_id}] if pool.efa_security_group_id is not None else []
    spec: dict[str, Any] = {
        # The al2023 alias resolves to the NVIDIA variant of the EKS AL2023 AMI for GPU instance types
        # (karpenter.sh docs, EC2NodeClass "amiSelectorTerms"). The stacks pin the version from
        # cluster.amiReleaseVersion; a new version rolls nodes through drift, paced by the disruption budget.
        "amiSelectorTerms": [{"alias": pool.ami_alias}],
        "role": pool.node_role_name,
        "subnetSelectorTerms": discovery,
        "securityGroupSelectorTerms": discovery + efa_group,
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
    layout = efa_interface_layout(pool.spec) if pool.efa_enabled else []
    if layout:
        # The same rule as the managed launch template (components.aws.efa): card 0 / device 0 ENA, then one
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
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types(pool)},
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
                # The same labels a managed GPU node group sets (components.kube.labels): the device plugin
                # and DCGM exporter select on them, so without them nvidia.com/gpu is never advertised.
                "metadata": {"labels": node_labels(pool)},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": pool.name},
                    "requirements": requirements,
                    "taints": [dict(GPU_TAINT)],
                    "expireAfter": pool.expire_after,
                    # Bounds a drain that a PodDisruptionBudget holds up: a Capacity Block node must be empty
                    # before EC2 terminates it (Karpenter drains 10 min ahead), other nodes within 2 h of expiry.
                    "terminationGracePeriod": "9m" if pool.capacity_block else "2h",
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


def capacity_types(pool: KarpenterGpuPool) -> list[str]:
    """``karpenter.sh/capacity-type`` values, most preferred first: reserved, then on-demand when allowed."""
    if pool.capacity_type == "reserved" and pool.on_demand_fallback:
        return ["reserved", "on-demand"]
    return [pool.capacity_type]


def node_labels(pool: KarpenterGpuPool) -> dict[str, str]:
    """The GPU node labels of ``components.kube.labels``, the same a managed node group sets."""
    return gpu_node_labels(
        pool.name, pool.spec, efa=pool.efa_enabled, capacity=pool.capacity_label or pool.capacity_type
    )
