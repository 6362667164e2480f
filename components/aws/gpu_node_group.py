"""GpuNodeGroup: an EKS managed node group of one GPU instance type, with its own launch template.

What the launch template carries, and why:
- The EFA interface layout derived from the catalog (``components.aws.efa``): one ENA primary,
  then one ``efa-only`` interface per EFA network card, so NCCL gets every card without
  burning an IP address per card.
- A cluster placement group for EFA pools (single-AZ, lowest latency between nodes), left
  out when the pool draws from a reservation (terraform-aws-eks #3730).
- Capacity reservations: ODCR targeting, or a Capacity Block with market type ``capacity-block``.
- NVMe instance-store RAID0 through a nodeadm ``NodeConfig`` in MIME multi-part user data.
- IMDSv2 required, an encrypted gp3 root, the GPU taint and labels naming pool, GPU and count.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.aws._node import encode_user_data, metadata_options, render_user_data, root_volume
from components.aws.efa import efa_interface_layout, efa_security_group
from components.catalog.instances import InstanceSpec
from components.kube.labels import LABEL_PREFIX, gpu_node_labels
from components.specs import Args, GpuPoolSpec, StrInput

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
AMI_TYPE = "AL2023_x86_64_NVIDIA"


def gpu_labels(pool: GpuPoolSpec) -> dict[str, str]:
    """Labels that name the pool, the GPU model and the GPU count: what workloads select on."""
    return gpu_node_labels(pool.name, pool.spec, efa=pool.efa_enabled, capacity=pool.capacity.type)


def network_interfaces(pool: GpuPoolSpec, security_group_ids: list[StrInput]) -> list[dict[str, Any]]:
    """Launch-template interfaces for an EFA pool; empty without EFA (EC2's default ENA applies)."""
    if not pool.efa_enabled:
        return []
    return [
        {
            "network_card_index": iface.network_card_index,
            "device_index": iface.device_index,
            "interface_type": iface.interface_type,
            "security_groups": security_group_ids,
            "delete_on_termination": "true",
        }
        for iface in efa_interface_layout(pool.spec)
    ]


def node_group_capacity_type(pool: GpuPoolSpec) -> str:
    return {"spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}.get(pool.capacity.type, "ON_DEMAND")


def ami_release_parameter(kubernetes_version: str) -> str:
    """SSM parameter with the recommended AL2023 NVIDIA AMI release for a Kubernetes version."""
    base = f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/x86_64/nvidia"
    return f"{base}/recommended/release_version"


class GpuNodeGroupArgs(Args):
    pool: GpuPoolSpec
    """Required: the pool's instance type, zone and sizes; EFA and NVMe follow from the instance type."""
    cluster_name: StrInput
    """Required: the EKS cluster the node group joins (``EksCluster.cluster_name``)."""
    kubernetes_version: str
    """Required: picks the NVIDIA AMI from SSM and must match the control plane (``EksCluster.kubernetes_version``)."""
    cluster_security_group_id: StrInput
    """EKS adds it only when the launch template names no groups; with EFA interfaces it must be listed."""
    vpc_id: StrInput
    """Required: an EFA pool's self-referencing security group is created in it."""
    subnet_id: StrInput
    """The private subnet of the pool's single zone (the pool's own, or the network's first)."""
    node_role_arn: StrInput
    """Required: the nodes' IAM role (``NodeRole.role_arn``), shared by the stack's node groups."""
    ami_release_version: str | None = None
    """Pin an AMI release (e.g. ``1.33.0-20250704``); by default the recommended one from SSM."""
    tags: dict[str, str] = Field(default_factory=dict)


class GpuNodeGroup(pulumi.ComponentResource):
    node_group_name: pulumi.Output[str]
    launch_template_id: pulumi.Output[str]
    placement_group_name: pulumi.Output[str] | None
    user_data: str
    """The rendered (not encoded) user data, for golden files and ``inferstack plan --render``."""

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_gpu_node_group:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        pool = args.pool
        spec: InstanceSpec = pool.spec
        tags = {**args.tags, f"{LABEL_PREFIX}/pool": pool.name}

        security_groups: list[StrInput] = [args.cluster_security_group_id]
        if pool.efa_enabled:
            # EFA requires a group that admits all traffic from itself, in and out; NCCL's RDMA traffic is
            # otherwise dropped.
            efa_sg = efa_security_group(f"{name}-efa", pool=pool.name, vpc_id=args.vpc_id, tags=tags, opts=child)
            security_groups.append(efa_sg.id)

        self.placement_group_name = None
        placement: dict[str, Any] | None = None
        if pool.placement_group_enabled:
            group = aws.ec2.PlacementGroup(name, strategy="cluster", tags=tags, opts=child)
            self.placement_group_name = group.name
            placement = {"group_name": group.name}

        reservation: dict[str, Any] | None = None
        market: dict[str, Any] | None = None
        if pool.capacity.reserved:
            reservation = {"capacity_reservation_target": {"capacity_reservation_id": pool.capacity.reservation_id}}
        if pool.capacity.type == "capacity-block":
            market = {"market_type": "capacity-block"}

        self.user_data = render_user_data(raid0=spec.nvme_disks > 0)
        interfaces = network_interfaces(pool, security_groups)
        template = aws.ec2.LaunchTemplate(
            name,
            metadata_options=metadata_options(),
            block_device_mappings=[root_volume(pool.root_volume_gib)],
            user_data=encode_user_data(self.user_data),
            network_interfaces=interfaces or None,
            # EC2 refuses groups at both levels: with explicit interfaces they go on each interface.
            vpc_security_group_ids=None if interfaces else security_groups,
            placement=placement,
            capacity_reservation_specification=reservation,
            instance_market_options=market,
            tag_specifications=[
                {"resource_type": kind, "tags": {**tags, "Name": name}} for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=tags,
            opts=child,
        )

        release = (
            args.ami_release_version
            or aws.ssm.get_parameter_output(
                name=ami_release_parameter(args.kubernetes_version), opts=pulumi.InvokeOutputOptions(parent=self)
            ).value
        )
        node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=[args.subnet_id],
            version=args.kubernetes_version,
            ami_type=AMI_TYPE,
            release_version=release,
            instance_types=[pool.instance_type],
            capacity_type=node_group_capacity_type(pool),
            scaling_config={"min_size": pool.min_size, "max_size": pool.max_size, "desired_size": pool.initial_size},
            # One GPU node at a time: a rolling update must never take a serving pool down at once.
            update_config={"max_unavailable": 1},
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            labels=gpu_labels(pool),
            taints=[GPU_TAINT],
            tags=tags,
            # No autoscaler runs on a managed node group (Karpenter pools are NodePools, not this): the stack's
            # desiredSize is the group's size, and `pulumi up` sets it.
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_group_name = node_group.node_group_name
        self.launch_template_id = template.id
        self.register_outputs({"node_group_name": self.node_group_name, "launch_template_id": self.launch_template_id})
