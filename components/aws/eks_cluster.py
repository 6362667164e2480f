"""EksCluster: the control plane, its add-ons, and the Kubernetes provider everything else uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import Field

from components.aws.iam import PodIdentityRole, PodIdentityRoleArgs, assume_role_policy
from components.specs import Args, ClusterSpec, StrInput

# Installed before any node joins: networking, kube-proxy and Pod Identity must be ready for the first pod.
NODELESS_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# CoreDNS and the EBS CSI controller run as pods, so they wait for the system node group (else DEGRADED).
NODE_ADDONS = ("coredns", "aws-ebs-csi-driver")
ADDON_VERSIONS: dict[str, dict[str, str]] = {
    # Pinned per Kubernetes version, so an add-on upgrade is a reviewed change, never a side effect of `up`.
    # EKS 1.33: the versions an EKS 1.33 cluster runs in jenkins-infra/terraform-aws-sponsorship (locals.tf,
    # tracked from `aws eks describe-addon-versions --kubernetes-version 1.33` by updatecli), beside the AMI
    # release 1.33.5-20251120 this kit's bundled stacks pin.
    "1.33": {
        "vpc-cni": "v1.20.5-eksbuild.1",
        "kube-proxy": "v1.33.5-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.1",
        "coredns": "v1.12.4-eksbuild.1",
        "aws-ebs-csi-driver": "v1.53.0-eksbuild.1",
    },
}
ADDON_CONFIGURATION: dict[str, dict[str, Any]] = {
    # The VPC CNI enforces NetworkPolicies only with its network policy agent on (EKS user guide, "Limit pod
    # traffic with Kubernetes network policies": configuration value enableNetworkPolicy "true"). Without it
    # every NetworkPolicy the kit renders is silently ignored.
    "vpc-cni": {"enableNetworkPolicy": "true"},
}


def _containers(*requests: dict[str, str]) -> list[dict[str, Any]]:
    return [{"resources": {"requests": r}} for r in requests]


_EBS_CSI_CONTAINER = {"cpu": "10m", "memory": "40Mi"}
"""Every container of the EBS CSI driver's pods: the chart's ``controller.resources`` / ``node.resources``, which each
sidecar takes unless given its own (kubernetes-sigs/aws-ebs-csi-driver v1.53.0, charts/aws-ebs-csi-driver/values.yaml
and templates/controller.yaml, _node.tpl)."""


@dataclass(frozen=True)
class AddonPods:
    """Pods a pinned EKS add-on runs, as its manifest requests them: EKS renders them, the kit does not."""

    name: str
    pod: dict[str, Any]
    """The containers and init containers, with their resources."""
    replicas: int | None
    """``None``: a DaemonSet, one pod on every node."""


ADDON_PODS: dict[str, tuple[AddonPods, ...]] = {
    # The add-ons of ADDON_VERSIONS, per Kubernetes version: recheck them when a pin moves.
    "1.33": (
        # vpc-cni v1.20.5 (aws/amazon-vpc-cni-k8s, config/master/aws-k8s-cni.yaml): the aws-node container and its
        # init container request 25m CPU; the network policy agent (enableNetworkPolicy) requests nothing.
        AddonPods(
            "aws-node",
            {"initContainers": _containers({"cpu": "25m"}), "containers": _containers({"cpu": "25m"}, {})},
            None,
        ),
        # kube-proxy: the EKS add-on's DaemonSet requests 100m CPU, no memory (as upstream's kube-proxy manifests).
        AddonPods("kube-proxy", {"containers": _containers({"cpu": "100m"})}, None),
        # eks-pod-identity-agent: `resources: {}` (aws/eks-pod-identity-agent, charts/eks-pod-identity-agent): nothing.
        # ebs-csi-node: the plugin, the node driver registrar and the liveness probe.
        AddonPods("ebs-csi-node", {"containers": _containers(*[_EBS_CSI_CONTAINER] * 3)}, None),
        # ebs-csi-controller: two replicas of the plugin, provisioner, attacher, snapshotter, resizer and liveness
        # probe (the snapshotter counted: the add-on may render it whenever the snapshot API is served).
        AddonPods("ebs-csi-controller", {"containers": _containers(*[_EBS_CSI_CONTAINER] * 6)}, 2),
        # coredns: the add-on's defaults (replicaCount 2; requests 100m CPU, 70Mi; as kubernetes/kubernetes
        # cluster/addons/dns/coredns/coredns.yaml.base).
        AddonPods("coredns", {"containers": _containers({"cpu": "100m", "memory": "70Mi"})}, 2),
    ),
}
"""What the pinned EKS add-ons ask of the nodes: the system node group's budget counts their Deployments and, on each
node, their DaemonSets."""
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
"""The controller's service account in kube-system (aws-ebs-csi-driver chart and EKS add-on)."""
EBS_CSI_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
DEFAULT_STORAGE_CLASS = "gp3"
API_PORT = 443
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
LOG_RETENTION_DAYS = 90


def admin_key(role_arn: str) -> str:
    """The logical-name part of an admin role's access entry: ``<account>-<role name>`` (a role's name is unique in its
    account, whatever its path)."""
    account, resource = role_arn.split(":")[4], role_arn.split(":", 5)[5]
    return f"{account}-{resource.rsplit('/', 1)[1]}"


def cidr_key(cidr: object) -> str:
    """The logical-name part of a deployer network's rule: ``10.20.0.0-16`` for ``10.20.0.0/16``."""
    return str(cidr).replace("/", "-")


def _was_named(old_name: str) -> pulumi.ResourceOptions:
    """The index-based name this resource had before it was named after its value: the stack's existing resource is
    carried over, not deleted and created again (an alias is read only while the new name is not in the state)."""
    return pulumi.ResourceOptions(aliases=[pulumi.Alias(name=old_name)])


class EksClusterArgs(Args):
    spec: ClusterSpec
    """Required: the stack's ``cluster`` section (version, AMI release, access); no default cluster fits every
    account."""
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

        # Each entry is named after what it admits, never its place in the list: an access entry's principal and a
        # rule's source are what makes it, so a resource keyed by index took the next entry's value when an operator
        # removed one from the middle or reordered the list. EKS keeps one access entry per principal and
        # `principal_arn` forces a replacement (terraform-provider-aws, internal/service/eks/access_entry.go), which
        # Pulumi creates before it deletes the old one: the new entry's principal was still the next index's, and
        # CreateAccessEntry failed with ResourceInUseException. Aliases carry a stack's index-named resources over.
        for i, admin_arn in enumerate(spec.admin_role_arns):
            principal = admin_key(admin_arn)
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{principal}",
                cluster_name=cluster.name,
                principal_arn=admin_arn,
                type="STANDARD",
                tags=args.tags,
                opts=pulumi.ResourceOptions.merge(child, _was_named(f"{name}-admin-{i}")),
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{principal}",
                cluster_name=cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn=CLUSTER_ADMIN_POLICY,
                access_scope={"type": "cluster"},
                opts=pulumi.ResourceOptions.merge(child, _was_named(f"{name}-admin-{i}")),
            )

        # The private endpoint admits only the cluster security group: open 443 to the deployer's network
        # (a runner, VPN or bastion), or `pulumi up` cannot reach the API it has just created.
        cluster_sg = cluster.vpc_config.cluster_security_group_id
        for i, cidr in enumerate(spec.deployer_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-deployer-{cidr_key(cidr)}",
                security_group_id=cluster_sg,
                cidr_ipv4=str(cidr),
                ip_protocol="tcp",
                from_port=API_PORT,
                to_port=API_PORT,
                description="Kubernetes API from the deployer network",
                tags=args.tags,
                opts=pulumi.ResourceOptions.merge(child, _was_named(f"{name}-deployer-{i}")),
            )
        for i, group_id in enumerate(spec.deployer_security_group_ids):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-deployer-{group_id}",
                security_group_id=cluster_sg,
                referenced_security_group_id=group_id,
                ip_protocol="tcp",
                from_port=API_PORT,
                to_port=API_PORT,
                description="Kubernetes API from the deployer security group",
                tags=args.tags,
                opts=pulumi.ResourceOptions.merge(child, _was_named(f"{name}-deployer-sg-{i}")),
            )

        self._name = name
        self._cluster = cluster
        self._tags = args.tags
        self._versions = addon_versions(spec.kubernetes_version)
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

    def _addon(
        self,
        addon: str,
        depends_on: list[pulumi.Resource],
        pod_identity: list[aws.eks.AddonPodIdentityAssociationArgs] | None = None,
    ) -> aws.eks.Addon:
        configuration = ADDON_CONFIGURATION.get(addon)
        return aws.eks.Addon(
            f"{self._name}-{addon}",
            cluster_name=self._cluster.name,
            addon_name=addon,
            addon_version=self._versions[addon],
            configuration_values=json.dumps(configuration) if configuration else None,
            pod_identity_associations=pod_identity,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends_on),
        )

    def add_node_addons(self, nodes: list[pulumi.Resource]) -> None:
        """Install the add-ons that run as pods, once ``nodes`` exist to run them, and the default
        StorageClass their volumes come from."""
        self._addon("coredns", nodes)
        # Nothing provisions EBS volumes without the CSI driver, and EKS has no default StorageClass since 1.30
        # (gp2 is no longer marked default): Prometheus's and Redis's claims would stay Pending.
        role = PodIdentityRole(
            f"{self._name}-ebs-csi",
            PodIdentityRoleArgs(
                cluster_name=self._cluster.name,
                namespace="kube-system",
                service_account=EBS_CSI_SERVICE_ACCOUNT,
                managed_policy_arns=(EBS_CSI_POLICY,),
                create_association=False,
                tags=self._tags,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        driver = self._addon(
            "aws-ebs-csi-driver",
            nodes,
            pod_identity=[
                aws.eks.AddonPodIdentityAssociationArgs(role_arn=role.role_arn, service_account=EBS_CSI_SERVICE_ACCOUNT)
            ],
        )
        k8s.storage.v1.StorageClass(
            f"{self._name}-{DEFAULT_STORAGE_CLASS}",
            metadata={
                "name": DEFAULT_STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            provisioner="ebs.csi.aws.com",
            # Encrypted gp3 (aws-ebs-csi-driver docs/parameters.md: type, encrypted); WaitForFirstConsumer so a
            # volume is created in the zone its pod is scheduled to, not a random one.
            parameters={"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
            volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True,
            reclaim_policy="Delete",
            opts=pulumi.ResourceOptions(parent=self, provider=self.k8s_provider, depends_on=[driver]),
        )


def addon_versions(kubernetes_version: str) -> dict[str, str]:
    """The pinned add-on versions for ``kubernetes_version``; a version without a pin is an error."""
    try:
        return ADDON_VERSIONS[kubernetes_version]
    except KeyError:
        raise ValueError(
            f"no pinned EKS add-on versions for Kubernetes {kubernetes_version}; pinned: {', '.join(ADDON_VERSIONS)}"
        ) from None
