"""SystemNodeGroup: CPU nodes for controllers, the gateway, the cache and observability."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.aws._node import metadata_options, root_volume
from components.kube.labels import SYSTEM_NODES
from components.specs import Args, StrInput, SystemPoolSpec


class SystemNodeGroupArgs(Args):
    spec: SystemPoolSpec
    """Required: the stack's system pool (instance type, sizes)."""
    cluster_name: StrInput
    """Required: the EKS cluster the node group joins (``EksCluster.cluster_name``)."""
    node_role_arn: StrInput
    """Required: the nodes' IAM role (``NodeRole.role_arn``)."""
    subnet_ids: list[StrInput]
    """Private subnets across zones, so the control-plane add-ons survive a zone loss."""
    kubernetes_version: str
    """Required: must match the control plane (``EksCluster.kubernetes_version``)."""
    ami_release_version: str | None = None
    """Pin the AMI release (``1.33.5-20251120``); ``None`` lets EKS pick its latest at create."""
    tags: dict[str, str] = Field(default_factory=dict)


class SystemNodeGroup(pulumi.ComponentResource):
    node_group_name: pulumi.Output[str]
    node_group: aws.eks.NodeGroup

    def __init__(self, name: str, args: SystemNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_system_node_group:SystemNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        template = aws.ec2.LaunchTemplate(
            name,
            metadata_options=metadata_options(),
            block_device_mappings=[root_volume(spec.root_volume_gib)],
            tag_specifications=[
                {"resource_type": kind, "tags": {**args.tags, "Name": name}} for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=args.tags,
            opts=child,
        )
        self.node_group = aws.eks.NodeGroup(
            name,
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            subnet_ids=args.subnet_ids,
            version=args.kubernetes_version,
            ami_type="AL2023_x86_64_STANDARD",
            release_version=args.ami_release_version,
            instance_types=[spec.instance_type],
            capacity_type="ON_DEMAND",
            scaling_config={"min_size": spec.min_size, "max_size": spec.max_size, "desired_size": spec.initial_size},
            update_config={"max_unavailable": 1},
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            labels=dict(SYSTEM_NODES),
            tags=args.tags,
            # No autoscaler runs on a managed node group (Karpenter provisions its own nodes): the stack's
            # desiredSize is the group's size, and `pulumi up` sets it.
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.node_group_name = self.node_group.node_group_name
        self.register_outputs({"node_group_name": self.node_group_name})
