"""IAM building blocks: trust policies, the node role, and Pod Identity roles.

No wildcard admin anywhere: the node role carries only the three AWS managed policies
an EKS worker needs, and workload roles get exactly the policy document their caller
passes (the policy pack rejects ``Action: "*"``).
"""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
from pydantic import Field

from components.specs import Args, ComponentNamespace, StrInput

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    # Pull-only is narrower than ReadOnly: nodes never need to list or describe repositories.
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)


def assume_role_policy(service: str, *, actions: tuple[str, ...] = ("sts:AssumeRole",)) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": list(actions)}],
        }
    )


class NodeRoleArgs(Args):
    tags: dict[str, str] = Field(default_factory=dict)


class NodeRole(pulumi.ComponentResource):
    """The EC2 role every node (system and GPU) runs as."""

    role_arn: pulumi.Output[str]
    role_name: pulumi.Output[str]

    def __init__(self, name: str, args: NodeRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_iam:NodeRole", name, None, opts)
        role = aws.iam.Role(
            name,
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        for arn in NODE_POLICIES:
            aws.iam.RolePolicyAttachment(
                f"{name}-{arn.rsplit('/', 1)[1]}",
                role=role.name,
                policy_arn=arn,
                opts=pulumi.ResourceOptions(parent=self),
            )
        self.role_arn = role.arn
        self.role_name = role.name
        self.register_outputs({"role_arn": self.role_arn, "role_name": self.role_name})


class PodIdentityRoleArgs(Args):
    cluster_name: StrInput
    """Required: the association is per cluster."""
    namespace: ComponentNamespace
    """Required: the association binds one service account in one namespace."""
    service_account: str
    """Required: the Kubernetes service account the workload runs as."""
    policy_json: StrInput | None = None
    """The exact permissions the workload needs, nothing broader (an inline policy)."""
    managed_policy_arns: tuple[str, ...] = ()
    """AWS managed policies, where AWS maintains the exact set (``AmazonEBSCSIDriverPolicy``)."""
    create_association: bool = True
    """Off for EKS add-ons, which take the role through their own ``podIdentityAssociations``."""
    tags: dict[str, str] = Field(default_factory=dict)


class PodIdentityRole(pulumi.ComponentResource):
    """An IAM role bound to one Kubernetes service account through EKS Pod Identity."""

    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: PodIdentityRoleArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_iam:PodIdentityRole", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            name,
            # EKS Pod Identity: the agent assumes the role and tags the session (sts:TagSession).
            assume_role_policy=assume_role_policy(
                "pods.eks.amazonaws.com", actions=("sts:AssumeRole", "sts:TagSession")
            ),
            tags=args.tags,
            opts=child,
        )
        if args.policy_json is not None:
            aws.iam.RolePolicy(name, role=role.id, policy=args.policy_json, opts=child)
        for arn in args.managed_policy_arns:
            aws.iam.RolePolicyAttachment(f"{name}-{arn.rsplit('/', 1)[1]}", role=role.name, policy_arn=arn, opts=child)
        if args.create_association:
            aws.eks.PodIdentityAssociation(
                name,
                cluster_name=args.cluster_name,
                namespace=args.namespace,
                service_account=args.service_account,
                role_arn=role.arn,
                tags=args.tags,
                opts=child,
            )
        self.role_arn = role.arn
        self.register_outputs({"role_arn": self.role_arn})
