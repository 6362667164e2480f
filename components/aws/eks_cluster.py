"""EksCluster: the control plane, its add-ons, and the Kubernetes provider everything else uses."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import Field

from components.aws.iam import assume_role_policy
from components.specs import Args, ClusterSpec, StrInput

# Installed before any node joins: networking, kube-proxy and Pod Identity must be ready for the first pod.
NODELESS_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# CoreDNS runs as pods, so it waits for the system node group (else the add-on reports DEGRADED).
NODE_ADDONS = ("coredns",)
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
LOG_RETENTION_DAYS = 90


class EksClusterArgs(Args):
    spec: ClusterSpec
    region: str
    """Required: the kubeconfig's token command names it."""
    subnet_ids: list[StrInput]
    """Required: private subnets in at least two zones (an EKS control-plane requirement)."""
    tags: dict[str, str] = Field(default_factory=dict)


def kubeconfig(
    name: pulumi.Input[str], endpoint: pulumi.Input[str], ca_data: pulumi.Input[str], region: str
) -> pulumi.Output[str]:
    """A kubeconfig that authenticates with ``aws eks get-token``: no long-lived credentials inside."""

    def build(args: list[str]) -> str:
        cluster_name, server, ca = args
        return json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": ca}}],
                "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
                "current-context": cluster_name,
                "users": [
                    {
                        "name": cluster_name,
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": "aws",
                                "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region],
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
            }
        )

    return pulumi.Output.all(name, endpoint, ca_data).apply(build)


class EksCluster(pulumi.ComponentResource):
    """An EKS control plane: private endpoint, KMS-encrypted secrets, access entries, core add-ons.

    ``k8s_provider`` is the explicit Kubernetes provider every Kubernetes component takes.
    """

    cluster_name: pulumi.Output[str]
    cluster_endpoint: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    kubernetes_version: str
    kubeconfig: pulumi.Output[str]
    k8s_provider: k8s.Provider
    secrets_key_arn: pulumi.Output[str]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_eks_cluster:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec

        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets envelope encryption for {name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=args.tags,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-cluster", assume_role_policy=assume_role_policy("eks.amazonaws.com"), tags=args.tags, opts=child
        )
        policy = aws.iam.RolePolicyAttachment(
            f"{name}-cluster", role=role.name, policy_arn="arn:aws:iam::aws:policy/AmazonEKSClusterPolicy", opts=child
        )
        # Created before the cluster so EKS does not create it with unlimited retention.
        logs = aws.cloudwatch.LogGroup(
            f"{name}-cluster",
            name=f"/aws/eks/{name}/cluster",
            retention_in_days=LOG_RETENTION_DAYS,
            tags=args.tags,
            opts=child,
        )
        public_cidrs = [str(c) for c in spec.endpoint_public_access_cidrs]
        cluster = aws.eks.Cluster(
            name,
            name=name,
            version=spec.kubernetes_version,
            role_arn=role.arn,
            access_config={
                "authentication_mode": "API",
                "bootstrap_cluster_creator_admin_permissions": True,
            },
            vpc_config={
                "subnet_ids": args.subnet_ids,
                "endpoint_private_access": True,
                "endpoint_public_access": bool(public_cidrs),
                **({"public_access_cidrs": public_cidrs} if public_cidrs else {}),
            },
            encryption_config={"provider": {"key_arn": key.arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(spec.log_types),
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy, logs]),
        )

        for i, admin_arn in enumerate(spec.admin_role_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=admin_arn,
                type="STANDARD",
                tags=args.tags,
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}",
                cluster_name=cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn=CLUSTER_ADMIN_POLICY,
                access_scope={"type": "cluster"},
                opts=child,
            )

        self._name = name
        self._cluster = cluster
        self._tags = args.tags
        for addon in NODELESS_ADDONS:
            self._addon(addon, [])

        self.cluster_name = cluster.name
        self.cluster_endpoint = cluster.endpoint
        self.cluster_security_group_id = cluster.vpc_config.cluster_security_group_id
        self.kubernetes_version = spec.kubernetes_version
        self.secrets_key_arn = key.arn
        self.kubeconfig = pulumi.Output.secret(
            kubeconfig(cluster.name, cluster.endpoint, cluster.certificate_authority.data, args.region)
        )
        self.k8s_provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            opts=child,
        )
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "cluster_endpoint": self.cluster_endpoint,
                "cluster_security_group_id": self.cluster_security_group_id,
                "kubeconfig": self.kubeconfig,
            }
        )

    def _addon(self, addon: str, depends_on: list[pulumi.Resource]) -> aws.eks.Addon:
        return aws.eks.Addon(
            f"{self._name}-{addon}",
            cluster_name=self._cluster.name,
            addon_name=addon,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )

    def add_node_addons(self, nodes: list[pulumi.Resource]) -> None:
        """Install the add-ons that run as pods, once ``nodes`` exist to run them."""
        for addon in NODE_ADDONS:
            self._addon(addon, nodes)
