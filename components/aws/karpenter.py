"""Karpenter: the node autoscaler for pools with ``provisioner: karpenter`` (cloud tier).

The controller gets its AWS permissions through EKS Pod Identity, an SQS queue fed by
EventBridge for interruption handling (Spot interruptions, rebalance, scheduled events,
instance state changes), and a node role with an EC2_LINUX access entry. Each Karpenter
GPU pool keeps every guarantee a managed pool has: the EFA layout, the placement group,
NVMe RAID0, reservations, the AL2023 NVIDIA AMI and the GPU taint (``components._scaling``).
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import Field

from components.aws._karpenter import KarpenterGpuPool, karpenter_node_class, karpenter_node_pool
from components.aws.efa import efa_security_group
from components.aws.iam import NODE_POLICIES, PodIdentityRole, PodIdentityRoleArgs, assume_role_policy
from components.catalog.charts import CHARTS
from components.kube.budget import Demand, demand
from components.kube.helm import release
from components.kube.labels import SYSTEM_NODES
from components.kube.objects import custom_resource
from components.specs import Args, GpuPoolSpec, StrInput

SERVICE_ACCOUNT = "karpenter"
CONTROLLER_REPLICAS = 2
"""The chart's own count (karpenter 1.14.1 ``values.yaml`` ``replicas``), written out so the render says it: one
leader and a standby, on different system nodes (the chart's pod anti-affinity)."""
CONTROLLER_RESOURCES: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}


def controller_demand() -> Demand:
    """The controller's pods on the system nodes, as the release below installs them."""
    return demand("karpenter", CONTROLLER_RESOURCES, CONTROLLER_REPLICAS)


# Karpenter's interruption handling listens to these EventBridge events (karpenter.sh docs, "Interruption"; the
# rules of upstream's v1.14.1 getting-started CloudFormation). The capacity-reservation warning (Karpenter >= 1.10)
# is how Karpenter learns that the owner of an interruptible ODCR reclaims it, and drains those nodes in time.
INTERRUPTION_EVENTS = {
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "instance-state": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
    "capacity-reservation-interruption": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"],
    },
}


def controller_policy(cluster_name: str, region: str, queue_arn: str, node_role_arn: str) -> str:
    """The controller's permissions, ported statement by statement from upstream's v1 CloudFormation
    (aws/karpenter-provider-aws v1.14.1, website/content/en/docs/getting-started/getting-started-with-karpenter/
    cloudformation.yaml: NodeLifecycle, IAMIntegration, EKSIntegration, Interruption and ResourceDiscovery
    policies). Launch, tag and instance-profile actions carry upstream's tag conditions, so the role can only
    create and touch what Karpenter itself tags for this cluster. The account is ``*`` in ARNs: the queue and
    node role ARNs already pin the account where it matters."""
    ec2 = f"arn:aws:ec2:{region}"
    profile = "arn:aws:iam::*:instance-profile/*"
    tagged = [f"{ec2}:*:{kind}/*" for kind in (
        "fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request"
    )]  # fmt: skip
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    nodepool = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    statements: list[dict[str, object]] = [
        {
            "Sid": "AllowScopedEC2InstanceAccessActions",
            "Effect": "Allow",
            "Resource": [
                f"{ec2}::image/*",
                f"{ec2}::snapshot/*",
                f"{ec2}:*:security-group/*",
                f"{ec2}:*:subnet/*",
                f"{ec2}:*:capacity-reservation/*",
                f"{ec2}:*:placement-group/*",
            ],
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
        },
        {
            "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
            "Effect": "Allow",
            "Resource": f"{ec2}:*:launch-template/*",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            "Condition": {"StringEquals": owned, "StringLike": nodepool},
        },
        {
            "Sid": "AllowScopedEC2InstanceActionsWithTags",
            "Effect": "Allow",
            "Resource": tagged,
            "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            "Condition": {
                "StringEquals": request_owned,
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceCreationTagging",
            "Effect": "Allow",
            "Resource": tagged,
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": {
                    **request_owned,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceTagging",
            "Effect": "Allow",
            "Resource": f"{ec2}:*:instance/*",
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": owned,
                "StringLike": nodepool,
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        },
        {
            "Sid": "AllowScopedDeletion",
            "Effect": "Allow",
            "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
            "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            "Condition": {"StringEquals": owned, "StringLike": nodepool},
        },
        {
            "Sid": "AllowPassingInstanceRole",
            "Effect": "Allow",
            "Resource": node_role_arn,
            "Action": "iam:PassRole",
            "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com"]}},
        },
        {
            "Sid": "AllowScopedInstanceProfileCreationActions",
            "Effect": "Allow",
            "Resource": profile,
            "Action": ["iam:CreateInstanceProfile"],
            "Condition": {
                "StringEquals": {**request_owned, "aws:RequestTag/topology.kubernetes.io/region": region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileTagActions",
            "Effect": "Allow",
            "Resource": profile,
            "Action": ["iam:TagInstanceProfile"],
            "Condition": {
                "StringEquals": {
                    **owned,
                    "aws:ResourceTag/topology.kubernetes.io/region": region,
                    **request_owned,
                    "aws:RequestTag/topology.kubernetes.io/region": region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileActions",
            "Effect": "Allow",
            "Resource": profile,
            "Action": [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            "Condition": {
                "StringEquals": {**owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        },
        {
            "Sid": "AllowAPIServerEndpointDiscovery",
            "Effect": "Allow",
            "Resource": f"arn:aws:eks:{region}:*:cluster/{cluster_name}",
            "Action": "eks:DescribeCluster",
        },
        {
            "Sid": "AllowInterruptionQueueActions",
            "Effect": "Allow",
            "Resource": queue_arn,
            "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        },
        {
            "Sid": "AllowRegionalReadActions",
            "Effect": "Allow",
            "Resource": "*",
            "Action": [
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
        },
        {
            "Sid": "AllowSSMReadActions",
            "Effect": "Allow",
            "Resource": f"arn:aws:ssm:{region}::parameter/aws/service/*",
            "Action": "ssm:GetParameter",
        },
        {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Resource": "*", "Action": "pricing:GetProducts"},
        {
            "Sid": "AllowUnscopedInstanceProfileListAction",
            "Effect": "Allow",
            "Resource": "*",
            "Action": "iam:ListInstanceProfiles",
        },
        {
            "Sid": "AllowInstanceProfileReadActions",
            "Effect": "Allow",
            "Resource": profile,
            "Action": "iam:GetInstanceProfile",
        },
    ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


class KarpenterArgs(Args):
    cluster_name: StrInput
    """Required: Karpenter's settings, discovery tags and interruption queue are per cluster."""
    cluster_endpoint: StrInput
    """Required: the controller's ``settings.clusterEndpoint``; new nodes join through it."""
    cluster_security_group_id: StrInput
    """Tagged for discovery: Karpenter's EC2NodeClass selects node security groups by tag."""
    vpc_id: StrInput
    """Required: each EFA pool gets its own self-referencing security group in the cluster's VPC."""
    region: str
    """Required: the controller's IAM policy names this region's resources (its ARNs are regional)."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    pools: list[GpuPoolSpec]
    """The pools with ``provisioner: karpenter``; each becomes an EC2NodeClass and a NodePool."""
    default_zone: str
    """Required: where a pool that names no zone launches."""
    ami_alias: str
    """Required: the pinned EC2NodeClass AMI alias (``al2023@v20251120``), from ``cluster.amiReleaseVersion``."""
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
                            },
                            # Upstream's queue policy (v1.14.1 CloudFormation, Sid DenyHTTP): no SQS call without TLS.
                            {
                                "Sid": "DenyHTTP",
                                "Effect": "Deny",
                                "Principal": "*",
                                "Action": "sqs:*",
                                "Resource": arn,
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            },
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
                    # Karpenter >= 1.3 launches into ODCRs, >= 1.6 into Capacity Blocks (and drains them before
                    # they end) behind this gate (karpenter.sh docs, "Utilizing ODCRs and Capacity Blocks").
                    "featureGates": {"reservedCapacity": True},
                },
                "replicas": CONTROLLER_REPLICAS,
                "nodeSelector": dict(SYSTEM_NODES),
                "controller": {"resources": CONTROLLER_RESOURCES},
            },
            parent=self,
            component=name,
            provider=args.provider,
            depends_on=[controller, access],
        )
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[helm])
        for pool in args.pools:
            group_name = None
            if pool.placement_group_enabled:
                group = aws.ec2.PlacementGroup(f"{name}-{pool.name}", strategy="cluster", tags=args.tags, opts=child)
                group_name = group.name
            efa_group_id = None
            if pool.efa_enabled:
                # The same group a managed EFA pool gets (components.aws.efa): EFA drops traffic without it.
                efa_group_id = efa_security_group(
                    f"{name}-{pool.name}-efa", pool=pool.name, vpc_id=args.vpc_id, tags=args.tags, opts=child
                ).id
            spec = KarpenterGpuPool(
                name=pool.name,
                spec=pool.spec,
                node_role_name="NODE_ROLE",
                cluster_name="CLUSTER",
                max_nodes=pool.max_size,
                capacity_type="reserved" if pool.capacity.reserved else pool.capacity.type,  # type: ignore[arg-type]
                reservation_id=pool.capacity.reservation_id,
                on_demand_fallback=pool.capacity.on_demand_fallback,
                capacity_block=pool.capacity.type == "capacity-block",
                ami_alias=args.ami_alias,
                efa=pool.efa_enabled,
                efa_security_group_id="EFA_SECURITY_GROUP" if efa_group_id is not None else None,
                capacity_label=pool.capacity.type,
                placement_group_name="PLACEMENT_GROUP" if group_name is not None else None,
                zone=pool.zone or args.default_zone,
                root_volume_gib=pool.root_volume_gib,
            )
            node_class = karpenter_node_class(spec)
            node_pool = karpenter_node_pool(spec)
            # The builders take plain strings; the real names are known only at deploy time.
            resolved = pulumi.Output.all(node_role.name, args.cluster_name, group_name or "", efa_group_id or "").apply(
                lambda a, nc=node_class: _substitute(
                    nc, {"NODE_ROLE": a[0], "CLUSTER": a[1], "PLACEMENT_GROUP": a[2], "EFA_SECURITY_GROUP": a[3]}
                )
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
