"""What each tier's cluster guarantees without the stack installing it.

The stack rules ask "is this served?" of the plan first (a chart, an add-on, a StorageClass the
stack creates) and of this table second. Keep it to facts about the platform itself, each with its
source; a fact about one cluster belongs in that stack's config, not here.

To extend a tier (say, an on-prem cluster that already runs MetalLB and a Ceph StorageClass), add
the entries to its row: the rules read nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from components.kube.labels import CLUSTER_LOAD_BALANCER_ANNOTATION, CLUSTER_STORAGE_CLASSES_ANNOTATION, TIER_LABEL
from policies.model import NodePool, Res


@dataclass(frozen=True)
class StorageClassFact:
    provisioner: str
    default: bool


@dataclass(frozen=True)
class TierGuarantees:
    storage_classes: Mapping[str, StorageClassFact] = field(default_factory=dict)
    """StorageClasses the cluster ships."""
    provisioners: frozenset[str] = frozenset()
    """Volume provisioners that run without the stack installing them."""
    load_balancers: tuple[str, ...] = ()
    """Ids of ``stack_rules.LB_CONTROLLERS`` that the cluster runs by itself."""
    load_balancer_classes: tuple[str, ...] = ()
    """``spec.loadBalancerClass`` values the cluster's own load balancer (``cluster-lb``) serves, besides Services
    without one."""
    ingress_classes: Mapping[str, str] = field(default_factory=dict)
    """Ingress class name → controller the cluster runs by itself."""
    network_policy_enforcer: str | None = None
    """What enforces NetworkPolicy without the stack configuring it; ``None``: nothing does."""
    workload_identity: str | None = None
    """``aws-iam``: pods reach the object store through IAM roles (Pod Identity or IRSA)."""
    node_pools: tuple[NodePool, ...] = ()
    """Nodes the cluster already has (for tiers whose fleet the stack does not create)."""


CLUSTER_PREREQUISITE = "(a provisioner the cluster already runs: a README prerequisite)"
CLUSTER_DEFAULT_CLASS = "(the cluster's default StorageClass)"


TIERS: Mapping[str, TierGuarantees] = MappingProxyType(
    {
        # EKS: the `gp2` class exists (in-tree `kubernetes.io/aws-ebs`, which since 1.23 only works
        # through the EBS CSI driver: https://docs.aws.amazon.com/eks/latest/userguide/ebs-csi-migration-faq.html)
        # and is no longer the default from EKS 1.30. Services of type LoadBalancer without the
        # `aws-load-balancer-type: external` annotation are served by the in-tree cloud provider
        # (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/nlb/).
        # The VPC CNI enforces NetworkPolicy only with `enableNetworkPolicy: "true"`
        # (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html).
        "cloud": TierGuarantees(
            storage_classes={"gp2": StorageClassFact("kubernetes.io/aws-ebs", default=False)},
            load_balancers=("aws-in-tree",),
            workload_identity="aws-iam",
        ),
        # k3s ships the local-path provisioner as the default class, ServiceLB (klipper-lb), Traefik,
        # and an embedded network policy controller (kube-router): https://docs.k3s.io/networking,
        # https://docs.k3s.io/storage.
        "edge": TierGuarantees(
            storage_classes={"local-path": StorageClassFact("rancher.io/local-path", default=True)},
            provisioners=frozenset({"rancher.io/local-path"}),
            load_balancers=("k3s-servicelb",),
            ingress_classes={"traefik": "traefik.io/ingress-controller"},
            network_policy_enforcer="k3s embedded network policy controller (kube-router)",
        ),
        # An existing bare-metal cluster: what the README's on-prem quick start lists as prerequisites (a
        # default StorageClass, a CNI that enforces NetworkPolicy). What one cluster has beyond that comes
        # from its stack's config (``declared_by_config``).
        "onprem": TierGuarantees(
            storage_classes={CLUSTER_DEFAULT_CLASS: StorageClassFact(CLUSTER_PREREQUISITE, default=True)},
            provisioners=frozenset({CLUSTER_PREREQUISITE}),
            network_policy_enforcer="the cluster's CNI (an on-prem prerequisite: Calico, Cilium; README)",
        ),
    }
)

IN_TREE_MIGRATION: Mapping[str, str] = MappingProxyType(
    {"kubernetes.io/aws-ebs": "ebs.csi.aws.com", "kubernetes.io/gce-pd": "pd.csi.storage.gke.io"}
)
"""In-tree provisioners that, with CSI migration, need the CSI driver installed to provision."""


def tier_of(resources: Iterable[Res], declared: str | None = None) -> str:
    """The plan's tier, or (under ``pulumi preview``, which has no plan) the one the resources say.

    A namespace's labels are inputs, so CrossGuard sees them in a preview, where the root stack's outputs (which
    carry the tier too) may still be empty."""
    if declared:
        return declared
    for r in resources:
        if r.type == "pulumi:pulumi:Stack" and r.inputs.get("tier") in TIERS:
            return str(r.inputs["tier"])
        if r.type == "kubernetes:core/v1:Namespace":
            labelled = (r.metadata.get("labels") or {}).get(TIER_LABEL)
            if labelled in TIERS:
                return str(labelled)
    return "cloud"


def guarantees(tier: str) -> TierGuarantees:
    return TIERS.get(tier, TierGuarantees())


def declared_by_resources(tier: str, resources: Iterable[Res]) -> TierGuarantees:
    """The tier's guarantees plus the StorageClasses and the load balancer the kit's namespaces say the cluster has.

    What ``pulumi preview`` gives the pack: resources, not the stack's config (``declared_by_config``)."""
    base = guarantees(tier)
    annotations = [r.metadata.get("annotations") or {} for r in resources if r.type == "kubernetes:core/v1:Namespace"]
    named = {
        name.strip()
        for a in annotations
        for name in str(a.get(CLUSTER_STORAGE_CLASSES_ANNOTATION, "")).split(",")
        if name.strip()
    }
    lb_classes = {
        str(a[CLUSTER_LOAD_BALANCER_ANNOTATION]) for a in annotations if CLUSTER_LOAD_BALANCER_ANNOTATION in a
    }
    if not named and not lb_classes:
        return base
    classes = {**base.storage_classes, **{n: StorageClassFact(CLUSTER_PREREQUISITE, default=False) for n in named}}
    if not lb_classes:
        return replace(base, storage_classes=classes)
    return replace(
        base,
        storage_classes=classes,
        load_balancers=(*base.load_balancers, "cluster-lb"),
        load_balancer_classes=tuple(sorted(c for c in lb_classes if c)),
    )


def declared_by_config(tier: str, environment: object) -> TierGuarantees:
    """The tier's guarantees plus what this stack's config declares its existing cluster runs.

    ``inferstack plan`` passes the validated environment: an on-prem stack's ``persistentStorageClass``
    (a class the cluster has), its GPU servers (found by ``gpuPools[].nodeSelector``) and system nodes
    (``cluster.systemNodeSelector``), and an ``existing`` load balancer with the ``loadBalancerClass`` it serves.
    """
    base = guarantees(tier)
    if tier != "onprem":
        return base
    classes = dict(base.storage_classes)
    named = getattr(environment, "persistent_storage_class", None)
    if named:
        classes[named] = StorageClassFact(CLUSTER_PREREQUISITE, default=False)
    pools = [
        NodePool(
            name=p.name,
            source=f"gpuPools[{i}] {p.name} (existing servers)",
            # The GPU Operator this tier installs labels every GPU node nvidia.com/gpu.present=true.
            labels={**{k: (v,) for k, v in p.node_selector.items()}, "nvidia.com/gpu.present": ("true",)},
            gpus_per_node=p.gpus_per_node,
            max_nodes=p.nodes,
            max_gpus=p.nodes * p.gpus_per_node,
            builtin_devices=(),
        )
        for i, p in enumerate(getattr(environment, "gpu_pools", ()))
    ]
    system = dict(getattr(getattr(environment, "cluster", None), "system_node_selector", {}) or {})
    system_labels = {k: (v,) for k, v in system.items()}
    pools.append(NodePool(name="system", source="cluster.systemNodeSelector", labels=system_labels))
    lb_spec = getattr(environment, "load_balancer", None)
    lb = getattr(lb_spec, "kind", None)
    lb_class = getattr(lb_spec, "load_balancer_class", None) if lb == "existing" else None
    return TierGuarantees(
        storage_classes=classes,
        provisioners=base.provisioners,
        load_balancers=(*base.load_balancers, *(("cluster-lb",) if lb == "existing" else ())),
        load_balancer_classes=(*base.load_balancer_classes, *((lb_class,) if lb_class else ())),
        ingress_classes=base.ingress_classes,
        network_policy_enforcer=base.network_policy_enforcer,
        workload_identity=base.workload_identity,
        node_pools=(*base.node_pools, *pools),
    )
