"""Karpenter: the node autoscaler for pools with ``provisioner: karpenter`` (cloud tier).

The controller gets its AWS permissions through EKS Pod Identity, an SQS queue fed by
EventBridge for interruption handling (Spot interruptions, rebalance, scheduled events,
instance state changes), and a node role with an EC2_LINUX access entry. Each Karpenter
GPU pool keeps every guarantee a managed pool has: the EFA layout, the placement group,
NVMe RAID0, reservations, the AL2023 NVIDIA AMI and the GPU taint (``components._scaling``).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import Field

from components.aws._karpenter import KarpenterGpuPool, karpenter_node_class, karpenter_node_pool
from components.aws.iam import NODE_POLICIES, PodIdentityRole, PodIdentityRoleArgs, assume_role_policy
from components.catalog.charts import CHARTS
from components.kube.helm import release
from components.kube.objects import custom_resource
from components.specs import Args, GpuPoolSpec, StrInput

SERVICE_ACCOUNT = "karpenter"
# Karpenter's interruption handling listens to these EventBridge events (karpenter.sh docs, "Interruption").
INTERRUPTION_EVENTS = {
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "instance-state": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
}


def controller_policy(cluster_name: str, region: str, queue_arn: str, node_role_arn: str) -> str:
    """The controller's permissions: launch and terminate tagged nodes, read pricing and AMIs, pass the node role."""
    owned = {"StringEquals": {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}}
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "Launch",
                    "Effect": "Allow",
                    "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate", "ec2:CreateTags"],
                    "Resource": "*",
                },
                {
                    "Sid": "Terminate",
                    "Effect": "Allow",
                    "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                    "Resource": "*",
                    "Condition": owned,
                },
                {
                    "Sid": "Read",
                    "Effect": "Allow",
                    "Action": [
                        "ec2:DescribeAvailabilityZones",
                        "ec2:DescribeCapacityReservations",
                        "ec2:DescribeImages",
                        "ec2:DescribeInstances",
                        "ec2:DescribeInstanceTypeOfferings",
                        "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplates",
                        "ec2:DescribePlacementGroups",
                        "ec2:DescribeSecurityGroups",
                        "ec2:DescribeSpotPriceHistory",
                        "ec2:DescribeSubnets",
                        "pricing:GetProducts",
                        "ssm:GetParameter",
                        "eks:DescribeCluster",
                    ],
                    "Resource": "*",
                },
                {
                    "Sid": "Interruption",
                    "Effect": "Allow",
                    "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
                    "Resource": queue_arn,
                },
                {"Sid": "PassNodeRole", "Effect": "Allow", "Action": "iam:PassRole", "Resource": node_role_arn},
                {
                    "Sid": "InstanceProfiles",
                    "Effect": "Allow",
                    "Action": [
                        "iam:AddRoleToInstanceProfile",
                        "iam:CreateInstanceProfile",
                        "iam:DeleteInstanceProfile",
                        "iam:GetInstanceProfile",
                        "iam:RemoveRoleFromInstanceProfile",
                        "iam:TagInstanceProfile",
                    ],
                    "Resource": "*",
                    "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
                },
            ],
        }
    )


class KarpenterArgs(Args):
    cluster_name: StrInput
    cluster_endpoint: StrInput
    cluster_security_group_id: StrInput
    """Tagged for discovery: Karpenter's EC2NodeClass selects node security groups by tag."""
    region: str
    provider: k8s.Provider
    pools: list[GpuPoolSpec]
    """The pools with ``provisioner: karpenter``; each becomes an EC2NodeClass and a NodePool."""
    default_zone: str
    tags: dict[str, str] = Field(default_factory=dict)


class Karpenter(pulumi.ComponentResource):
    node_role_name: pulumi.Output[str]
    queue_name: pulumi.Output[str]

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_karpenter:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        queue = aws.sqs.Queue(
            f"{name}-interruption",
            message_retention_seconds=300,
            sqs_managed_sse_enabled=True,
            tags=args.tags,
            opts=child,
        )
        aws.sqs.QueuePolicy(
            f"{name}-interruption",
            queue_url=queue.url,
            policy=queue.arn.apply(
                lambda arn: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                                "Action": "sqs:SendMessage",
                                "Resource": arn,
                            }
                        ],
                    }
                )
            ),
            opts=child,
        )
        for rule_name, pattern in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{rule_name}", event_pattern=json.dumps(pattern), tags=args.tags, opts=child
            )
            aws.cloudwatch.EventTarget(f"{name}-{rule_name}", rule=rule.name, arn=queue.arn, opts=child)

        node_role = aws.iam.Role(
            f"{name}-node", assume_role_policy=assume_role_policy("ec2.amazonaws.com"), tags=args.tags, opts=child
        )
        for arn in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[1]}", role=node_role.name, policy_arn=arn, opts=child
            )
        access = aws.eks.AccessEntry(
            f"{name}-node",
            cluster_name=args.cluster_name,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            tags=args.tags,
            opts=child,
        )
        aws.ec2.Tag(
            f"{name}-cluster-sg-discovery",
            resource_id=args.cluster_security_group_id,
            key="karpenter.sh/discovery",
            value=args.cluster_name,
            opts=child,
        )
        pin = CHARTS["karpenter"]
        controller = PodIdentityRole(
            f"{name}-controller",
            PodIdentityRoleArgs(
                cluster_name=args.cluster_name,
                namespace=pin.namespace,
                service_account=SERVICE_ACCOUNT,
                policy_json=pulumi.Output.all(args.cluster_name, queue.arn, node_role.arn).apply(
                    lambda a: controller_policy(a[0], args.region, a[1], a[2])
                ),
                tags=args.tags,
            ),
            opts=child,
        )
        helm = release(
            "karpenter",
            {
                "serviceAccount": {"name": SERVICE_ACCOUNT},
                "settings": {
                    "clusterName": args.cluster_name,
                    "clusterEndpoint": args.cluster_endpoint,
                    "interruptionQueue": queue.name,
                    # Karpenter >= 1.3 launches into ODCRs / Capacity Blocks behind this gate.
                    "featureGates": {"reservedCapacity": True},
                },
                "nodeSelector": {"inferstack.io/pool": "system"},
                "controller": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}},
            },
            parent=self,
            provider=args.provider,
            depends_on=[controller, access],
        )
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[helm])
        for pool in args.pools:
            group_name = None
            if pool.placement_group_enabled:
                group = aws.ec2.PlacementGroup(f"{name}-{pool.name}", strategy="cluster", tags=args.tags, opts=child)
                group_name = group.name
            spec = KarpenterGpuPool(
                name=pool.name,
                spec=pool.spec,
                node_role_name="NODE_ROLE",
                cluster_name="CLUSTER",
                max_nodes=pool.max_size,
                capacity_type="reserved" if pool.capacity.reserved else pool.capacity.type,  # type: ignore[arg-type]
                reservation_id=pool.capacity.reservation_id,
                placement_group_name="PLACEMENT_GROUP" if group_name is not None else None,
                zone=pool.zone or args.default_zone,
                root_volume_gib=pool.root_volume_gib,
            )
            node_class = karpenter_node_class(spec)
            node_pool = karpenter_node_pool(spec)
            # The builders take plain strings; the real names are known only at deploy time.
            resolved = pulumi.Output.all(node_role.name, args.cluster_name, group_name or "").apply(
                lambda a, nc=node_class: _substitute(nc, {"NODE_ROLE": a[0], "CLUSTER": a[1], "PLACEMENT_GROUP": a[2]})
            )
            node_class_cr = custom_resource(
                f"{name}-{pool.name}-nodeclass",
                node_class,
                after,
                spec=resolved.apply(lambda nc: nc["spec"]),  # type: ignore[index]
            )
            custom_resource(
                f"{name}-{pool.name}-nodepool",
                node_pool,
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[node_class_cr]),
            )
        self.node_role_name = node_role.name
        self.queue_name = queue.name
        self.register_outputs({"node_role_name": self.node_role_name, "queue_name": self.queue_name})


def _substitute(value: object, names: dict[str, str]) -> object:
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, list):
        return [_substitute(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, names) for k, v in value.items()}
    return value
