"""Whole-stack rules: each checks a link between resources, and names both ends and the fix.

A ``StackValidationPolicy`` sees every resource with its inputs (under ``pulumi preview``) and
``inferstack plan`` hands the same list offline, so each rule is a function of a :class:`Stack`.
What the stack installs is read from the plan (charts, add-ons, StorageClasses, node pools); what
the cluster brings by itself comes from ``policies/tiers.py``. No rule knows today's stack.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Any

from components.catalog.charts import PROMETHEUS_POD_LABELS
from components.kube.labels import GATEWAY_POD_LABELS, NAMESPACE_NAME_LABEL
from policies.kube_rules import walk
from policies.model import (
    HELM_RELEASE,
    NodePool,
    Pod,
    Res,
    allows,
    argv,
    as_int,
    chart_name,
    device_count,
    env_of,
    flag_value,
    helm_placements,
    helm_values,
    known,
    label_selector_matches,
    node_pools,
    pods,
    resolve,
    selects,
)
from policies.tiers import IN_TREE_MIGRATION, TierGuarantees, guarantees

Finding = tuple[str, Res | None]


class Stack:
    """The resources of one stack, indexed for the rules, plus its tier's guarantees."""

    def __init__(self, resources: list[Res], tier: str, declared: TierGuarantees | None = None) -> None:
        self.resources = resources
        self.tier = tier
        self.tier_guarantees: TierGuarantees = declared or guarantees(tier)
        self.by_type: dict[str, list[Res]] = defaultdict(list)
        self.by_kind: dict[str, list[Res]] = defaultdict(list)
        for r in resources:
            self.by_type[r.type].append(r)
            if r.type.startswith("kubernetes:") and r.type != HELM_RELEASE:
                self.by_kind[r.kind].append(r)

    @cached_property
    def releases(self) -> dict[str, Res]:
        """Helm releases by chart name."""
        return {chart_name(r): r for r in self.by_type[HELM_RELEASE]}

    @cached_property
    def pools(self) -> list[NodePool]:
        return node_pools(self.resources) + list(self.tier_guarantees.node_pools)

    @cached_property
    def pods(self) -> list[Pod]:
        return [p for r in self.resources for p in pods(r)]

    def addon(self, name: str) -> Res | None:
        return next((r for r in self.by_type["aws:eks/addon:Addon"] if r.inputs.get("addonName") == name), None)

    def landing(self, spec: Mapping[str, Any]) -> list[NodePool]:
        return [p for p in self.pools if selects(spec, p)]


def _placement(spec: Mapping[str, Any]) -> str:
    parts = []
    if spec.get("nodeSelector"):
        parts.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in spec["nodeSelector"].items()))
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms") or []
    for t in terms:
        exprs = [
            f"{e.get('key')} {e.get('operator')} {e.get('values') or ''}".strip()
            for e in t.get("matchExpressions") or []
        ]
        parts.append("affinity " + " and ".join(exprs))
    tol = [f"{t.get('key') or '*'}:{t.get('effect') or '*'}" for t in spec.get("tolerations") or []]
    if tol:
        parts.append("tolerations " + ", ".join(tol))
    return "; ".join(parts) or "no placement constraints"


# ---------------------------------------------------------------------------------------------
# Storage


CSI_DRIVERS: Mapping[str, str] = {
    # what installs a provisioner → the provisioner name it registers
    "addon:aws-ebs-csi-driver": "ebs.csi.aws.com",
    "addon:aws-efs-csi-driver": "efs.csi.aws.com",
    "chart:aws-ebs-csi-driver": "ebs.csi.aws.com",
    "chart:aws-efs-csi-driver": "efs.csi.aws.com",
    "chart:local-path-provisioner": "rancher.io/local-path",
    "chart:openebs": "openebs.io/local",
    "chart:topolvm": "topolvm.io",
    "chart:local-static-provisioner": "kubernetes.io/no-provisioner",
}


def _installed_provisioners(stack: Stack) -> dict[str, str]:
    """Provisioner → what installs it (an add-on, a chart, or the tier)."""
    found = {p: f"tier {stack.tier}" for p in stack.tier_guarantees.provisioners}
    found["kubernetes.io/no-provisioner"] = "static local PersistentVolumes"
    for r in stack.by_type["aws:eks/addon:Addon"]:
        key = f"addon:{r.inputs.get('addonName')}"
        if key in CSI_DRIVERS:
            found[CSI_DRIVERS[key]] = f"EKS add-on {r.name}"
    for chart, r in stack.releases.items():
        if f"chart:{chart}" in CSI_DRIVERS:
            found[CSI_DRIVERS[f"chart:{chart}"]] = r.label
    return found


def _storage_classes(stack: Stack) -> dict[str, tuple[str, bool, str]]:
    """StorageClass name → (provisioner, is default, where it comes from)."""
    classes = {
        n: (f.provisioner, f.default, f"tier {stack.tier}") for n, f in stack.tier_guarantees.storage_classes.items()
    }
    for r in stack.by_kind["StorageClass"]:
        default = (r.metadata.get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
        classes[r.object_name] = (str(r.inputs.get("provisioner")), default, r.label)
    static = stack.releases.get("local-static-provisioner")
    for cls in (helm_values(static).get("classes") or []) if static is not None else []:
        # The chart renders a StorageClass for each class with `storageClass` set (helm/provisioner/templates/
        # storageclass.yaml): kubernetes.io/no-provisioner, WaitForFirstConsumer.
        if static is not None and isinstance(cls, Mapping) and cls.get("storageClass") and cls.get("name"):
            opts = cls["storageClass"] if isinstance(cls["storageClass"], Mapping) else {}
            default = bool(opts.get("isDefaultClass"))
            classes[str(cls["name"])] = ("kubernetes.io/no-provisioner", default, static.label)
    for r in stack.by_type["aws:eks/addon:Addon"]:
        # The EBS CSI add-on can create a default gp3 class itself (configurationValues
        # defaultStorageClass.enabled), named ebs-csi-default-sc.
        config = _json(r.inputs.get("configurationValues"))
        if r.inputs.get("addonName") == "aws-ebs-csi-driver" and (config.get("defaultStorageClass") or {}).get(
            "enabled"
        ):
            classes["ebs-csi-default-sc"] = ("ebs.csi.aws.com", True, f"EKS add-on {r.name}")
    return classes


def _json(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    try:
        parsed = json.loads(value) if isinstance(value, str) else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _claims(stack: Stack) -> Iterator[tuple[str, str | None, Res]]:
    """(what, storageClassName or None, owner) for every claim, claim template and chart volume template."""
    for r in stack.by_kind["PersistentVolumeClaim"]:
        yield r.label, (r.inputs.get("spec") or {}).get("storageClassName"), r
    for r in stack.by_kind["StatefulSet"]:
        for t in (r.inputs.get("spec") or {}).get("volumeClaimTemplates") or []:
            name = (t.get("metadata") or {}).get("name")
            yield f"{r.label} volumeClaimTemplate {name}", (t.get("spec") or {}).get("storageClassName"), r
    for pod in stack.pods:
        for volume in pod.spec.get("volumes") or []:
            template = (volume.get("ephemeral") or {}).get("volumeClaimTemplate")
            if isinstance(template, Mapping):
                what = f"{pod.label} ephemeral volume {volume.get('name')}"
                yield what, (template.get("spec") or {}).get("storageClassName"), pod.owner
    for r in stack.by_type[HELM_RELEASE]:
        for path, _, node in walk(helm_values(r)):
            if path.endswith(".volumeClaimTemplate") and isinstance(node, Mapping):
                yield f"{r.label} values {path.lstrip('.')}", (node.get("spec") or {}).get("storageClassName"), r
            elif path.endswith(".persistence") and isinstance(node, Mapping) and node.get("enabled") is True:
                yield (
                    f"{r.label} values {path.lstrip('.')}",
                    node.get("storageClassName") or node.get("storageClass"),
                    r,
                )


def storage_provisioner(stack: Stack) -> Iterator[Finding]:
    classes = _storage_classes(stack)
    provisioners = _installed_provisioners(stack)
    defaults = [n for n, (_, d, _) in classes.items() if d]
    for what, class_name, owner in _claims(stack):
        if class_name is not None and not known(class_name):
            continue
        if not class_name:
            if not defaults:
                yield (
                    f"{what} names no StorageClass and the stack has no default one (tier {stack.tier} guarantees "
                    f"none{' as default' if classes else ''}): the claim stays Pending. Fix: create a default "
                    "StorageClass whose provisioner the stack installs (on EKS: the aws-ebs-csi-driver add-on and a "
                    "gp3 class with provisioner ebs.csi.aws.com), or set storageClassName",
                    owner,
                )
                continue
            class_name = defaults[0]
        if class_name not in classes:
            yield (
                f"{what} asks for StorageClass {class_name}, which neither the stack nor tier {stack.tier} provides: "
                f"create it or use one of {', '.join(sorted(classes)) or 'none'}",
                owner,
            )
            continue
        provisioner, _, source = classes[class_name]
        needed = IN_TREE_MIGRATION.get(provisioner, provisioner)
        if needed not in provisioners:
            yield (
                f"{what} resolves to StorageClass {class_name} (from {source}), whose provisioner is {provisioner}"
                f"{f' (it needs the CSI driver {needed})' if needed != provisioner else ''}, and nothing in the stack "
                f"installs {needed}: install it (on EKS: the aws-ebs-csi-driver add-on with a Pod Identity role)",
                owner,
            )


# ---------------------------------------------------------------------------------------------
# Load balancers and ingress


@dataclass(frozen=True)
class LbController:
    id: str
    title: str
    charts: tuple[str, ...]
    """Charts that install it (empty: only a tier guarantee does)."""
    claims: str
    """``aws-lbc`` / ``default``: which LoadBalancer Services it reconciles."""
    annotation_prefixes: tuple[str, ...]
    ignores: frozenset[str] = frozenset()
    """Annotations under its prefixes that it does not read."""


_LBC_ONLY = frozenset(
    {
        # Read by the AWS Load Balancer Controller, not by the in-tree controller
        # (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/service/annotations/;
        # kubernetes/cloud-provider-aws docs/service_controller.md lists the in-tree ones).
        "service.beta.kubernetes.io/aws-load-balancer-scheme",
        "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type",
        "service.beta.kubernetes.io/aws-load-balancer-name",
        "service.beta.kubernetes.io/aws-load-balancer-attributes",
        "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes",
        "service.beta.kubernetes.io/aws-load-balancer-ip-address-type",
    }
)

LB_CONTROLLERS: tuple[LbController, ...] = (
    LbController(
        "aws-load-balancer-controller",
        "the AWS Load Balancer Controller",
        ("aws-load-balancer-controller",),
        "aws-lbc",
        ("service.beta.kubernetes.io/aws-load-balancer-",),
    ),
    LbController(
        "aws-in-tree",
        "the in-tree AWS cloud provider",
        (),
        "default",
        ("service.beta.kubernetes.io/aws-load-balancer-",),
        ignores=_LBC_ONLY,
    ),
    LbController("k3s-servicelb", "k3s ServiceLB (klipper-lb)", (), "default", ("svccontroller.k3s.cattle.io/",)),
    LbController("metallb", "MetalLB", ("metallb",), "default", ("metallb.universe.tf/", "metallb.io/")),
    # An on-prem cluster's own load balancer (config: loadBalancer.kind existing), a README prerequisite.
    LbController("cluster-lb", "the cluster's own load balancer", (), "default", ()),
)

_LBC_TYPES = ("external", "nlb-ip")
GENERIC_LB_ANNOTATIONS = frozenset({"service.beta.kubernetes.io/load-balancer-source-ranges"})
"""Annotations every Service controller reads (the Kubernetes API documents them, not a vendor)."""


def _lb_controllers(stack: Stack) -> list[tuple[LbController, str]]:
    present = []
    for c in LB_CONTROLLERS:
        release = next((stack.releases[ch] for ch in c.charts if ch in stack.releases), None)
        if release is not None:
            present.append((c, release.label))
        elif c.id in stack.tier_guarantees.load_balancers:
            present.append((c, f"tier {stack.tier}"))
    return present


def _wants_lbc(svc: Res) -> bool:
    annotations = svc.metadata.get("annotations") or {}
    klass = (svc.inputs.get("spec") or {}).get("loadBalancerClass")
    return (
        klass == "service.k8s.aws/nlb"
        or annotations.get("service.beta.kubernetes.io/aws-load-balancer-type") in _LBC_TYPES
    )


def _lb_services(stack: Stack) -> list[Res]:
    return [s for s in stack.by_kind["Service"] if (s.inputs.get("spec") or {}).get("type") == "LoadBalancer"]


def _serving(stack: Stack, svc: Res) -> tuple[LbController, str] | None:
    wants_lbc = _wants_lbc(svc)
    klass = (svc.inputs.get("spec") or {}).get("loadBalancerClass")
    for c, where in _lb_controllers(stack):
        # A Service with a class is served only by the controller of that class: the AWS Load Balancer Controller's
        # own, or the one the config says the cluster's load balancer serves (on-prem loadBalancer.loadBalancerClass).
        own_class = c.id == "cluster-lb" and klass in stack.tier_guarantees.load_balancer_classes
        if (c.claims == "aws-lbc") == wants_lbc and (c.claims == "aws-lbc" or not klass or own_class):
            return c, where
    return None


_LB_FIXES = {
    "cloud": "install the aws-load-balancer-controller chart with its IAM role",
    # The on-prem config's loadBalancer section: the kit's MetalLB, or the cluster's own load balancer and its class.
    "onprem": "set loadBalancer.kind: metallb, or kind: existing with the loadBalancerClass the cluster's "
    "load balancer serves",
}
"""What gives a Service a load balancer, by tier."""


def lb_controller_present(stack: Stack) -> Iterator[Finding]:
    for svc in _lb_services(stack):
        if _serving(stack, svc) is None:
            wants = (
                "the AWS Load Balancer Controller (it asks for it with aws-load-balancer-type: external)"
                if _wants_lbc(svc)
                else "a load balancer controller"
            )
            fix = _LB_FIXES.get(stack.tier, "install a load balancer controller that serves it")
            yield (
                f"{svc.label} (type LoadBalancer) needs {wants}, which neither the stack installs nor tier "
                f"{stack.tier} guarantees: it would stay <pending>. Fix: {fix}, or change the Service's type",
                svc,
            )
    classes = {
        r.object_name: str((r.inputs.get("spec") or {}).get("controller")) for r in stack.by_kind["IngressClass"]
    }
    classes.update(stack.tier_guarantees.ingress_classes)
    chart_classes = {"aws-load-balancer-controller": "alb", "ingress-nginx": "nginx", "traefik": "traefik"}
    classes.update({cls: chart for chart, cls in chart_classes.items() if chart in stack.releases})
    for ing in stack.by_kind["Ingress"]:
        cls = (ing.inputs.get("spec") or {}).get("ingressClassName") or (ing.metadata.get("annotations") or {}).get(
            "kubernetes.io/ingress.class"
        )
        if cls not in classes:
            yield (
                f"{ing.label} uses ingress class {cls or '(none)'}, which no controller in the stack or tier "
                f"{stack.tier} serves (known: {', '.join(sorted(classes)) or 'none'}): install its controller",
                ing,
            )


def lb_annotations_read(stack: Stack) -> Iterator[Finding]:
    for svc in _lb_services(stack):
        served = _serving(stack, svc)
        if served is None:
            continue
        controller, where = served
        annotations = svc.metadata.get("annotations") or {}
        lb_keys = [
            k
            for k in annotations
            if (k.startswith("service.beta.kubernetes.io/") or "metallb" in k or "k3s" in k)
            and k not in GENERIC_LB_ANNOTATIONS
        ]
        unread = (
            [k for k in lb_keys if not k.startswith(controller.annotation_prefixes) or k in controller.ignores]
            if lb_keys
            else []
        )
        if unread:
            yield (
                f"{svc.label} is served by {controller.title} ({where}), which does not read "
                f"{', '.join(sorted(unread))}: "
                "the load balancer would ignore them (for example, come up internet-facing). Fix: use that "
                "controller's annotations, or install the controller they belong to",
                svc,
            )


# ---------------------------------------------------------------------------------------------
# Scheduling: node selectors, taints, device plugins


def _placements(stack: Stack) -> Iterator[tuple[str, Mapping[str, Any], Res]]:
    for pod in stack.pods:
        yield pod.label, pod.spec, pod.owner
    for release in stack.by_type[HELM_RELEASE]:
        for block in helm_placements(release):
            yield block.label, block.spec, release


def node_selectors_match(stack: Stack) -> Iterator[Finding]:
    if not stack.pools:
        return  # a tier whose nodes the stack neither creates nor declares: nothing to match against
    for label, spec, owner in _placements(stack):
        if not stack.landing(spec):
            yield (
                f"{label} ({_placement(spec)}) matches no node pool of the stack: "
                + "; ".join(p.describe() for p in stack.pools)
                + ". Fix: select labels a pool gives (components/kube/labels.py), tolerate its taints, or "
                "label the pool",
                owner,
            )


@dataclass(frozen=True)
class DevicePlugin:
    resource: str
    charts: tuple[str, ...]
    everywhere_gpu: bool = False
    """The chart labels GPU nodes itself (NFD/GFD) and runs its plugin on every one of them."""


DEVICE_PLUGINS: tuple[DevicePlugin, ...] = (
    DevicePlugin("nvidia.com/gpu", ("nvidia-device-plugin",)),
    DevicePlugin("nvidia.com/gpu", ("gpu-operator",), everywhere_gpu=True),
    DevicePlugin("vpc.amazonaws.com/efa", ("aws-efa-k8s-device-plugin",)),
    DevicePlugin("rdma/", ("network-operator",), everywhere_gpu=True),
)


def _plugin_pools(stack: Stack, resource: str) -> tuple[set[str], list[str]]:
    """Pools where a plugin advertising ``resource`` runs, and how messages name those plugins."""
    names: set[str] = {p.name for p in stack.pools if resource in p.builtin_devices}
    plugins: list[str] = []
    for dp in DEVICE_PLUGINS:
        if dp.resource != resource:
            continue
        for chart in dp.charts:
            release = stack.releases.get(chart)
            if release is None:
                continue
            values = helm_values(release)
            plugins.append(f"{release.label}, {_placement(values)}")
            names |= {
                p.name
                for p in stack.pools
                if (p.gpus_per_node > 0 and dp.everywhere_gpu) or (not dp.everywhere_gpu and selects(values, p))
            }
    return names, plugins


def _offers(pool: NodePool, resource: str) -> bool:
    """Whether the pool's hardware can have ``resource`` at all (unknown hardware: assume it can)."""
    if not pool.instance_types:
        return True
    if resource == "nvidia.com/gpu":
        return pool.gpus_per_node > 0
    if resource == "vpc.amazonaws.com/efa":
        return pool.efa
    return True


def device_plugin_coverage(stack: Stack) -> Iterator[Finding]:
    """Every pool a device-requesting pod may land on (and whose hardware has the device) runs the plugin.

    "May land on" matters with a node autoscaler: Karpenter launches a node for the pending pod from
    any pool it matches, and a node without the plugin never advertises the device.
    """
    if not stack.pools:
        return
    for pod in stack.pods:
        for resource in ("nvidia.com/gpu", "vpc.amazonaws.com/efa", "rdma/"):
            if not any(device_count(c, resource) for c in pod.containers()):
                continue
            landing = stack.landing(pod.spec)
            if not landing:
                continue  # stack-node-selectors-match-pools reports a pod that lands nowhere
            covered, plugins = _plugin_pools(stack, resource)
            candidates = [p for p in landing if _offers(p, resource)] or landing
            bare = [p for p in candidates if p.name not in covered]
            if bare:
                plugin_text = "; ".join(plugins) if plugins else "none: no chart in the stack advertises it"
                yield (
                    f"{pod.label} requests {resource} and may land on "
                    + "; ".join(p.describe() for p in bare)
                    + f", where no device plugin runs (the stack's plugin: {plugin_text}), so {resource} is never "
                    "advertised there and the pod stays Pending. Fix: label the pool's nodes from "
                    "components/kube/labels.py gpu_node_labels, or widen the plugin's selector",
                    pod.owner,
                )


# ---------------------------------------------------------------------------------------------
# Workload identity: who may read and write the object store


S3_URI = re.compile(r"s3://([A-Za-z0-9.\-_]+)(/[^\s\"']*)?")
WRITE_FLAGS: Mapping[str, str] = {"--upload": "s3:PutObject"}
"""Flags of the kit's loader (images/model-loader) that make it write to the object store."""
MANAGED_POLICIES: Mapping[str, dict[str, Any]] = {
    # AWS managed policies a role may carry, reduced to their S3 statements.
    "AmazonS3ReadOnlyAccess": {"Statement": [{"Effect": "Allow", "Action": ["s3:Get*", "s3:List*"], "Resource": "*"}]},
    "AmazonS3FullAccess": {"Statement": [{"Effect": "Allow", "Action": ["s3:*"], "Resource": "*"}]},
}


def _role_of(stack: Stack, namespace: str, sa: str) -> tuple[Res | None, str]:
    """The IAM role a service account assumes (Pod Identity, then IRSA), and how it is bound."""
    roles = stack.by_type["aws:iam/role:Role"]
    for a in stack.by_type["aws:eks/podIdentityAssociation:PodIdentityAssociation"]:
        if a.inputs.get("namespace") == namespace and a.inputs.get("serviceAccount") == sa:
            return resolve(a, "roleArn", roles), f"Pod Identity association {a.name}"
    for s in stack.by_kind["ServiceAccount"]:
        arn = (s.metadata.get("annotations") or {}).get("eks.amazonaws.com/role-arn")
        if s.namespace == namespace and s.object_name == sa and arn:
            target = Res(s.urn, s.type, s.name, {"roleArn": arn})
            return resolve(target, "roleArn", roles), f"IRSA annotation on {s.label}"
    return None, ""


def _role_documents(stack: Stack, role: Res) -> list[Any]:
    docs: list[Any] = []
    for p in stack.by_type["aws:iam/rolePolicy:RolePolicy"]:
        if resolve(p, "role", [role]) is not None:
            docs.append(p.inputs.get("policy"))
    managed = stack.by_type["aws:iam/policy:Policy"]
    for att in stack.by_type["aws:iam/rolePolicyAttachment:RolePolicyAttachment"]:
        if resolve(att, "role", [role]) is None:
            continue
        arn = str(att.inputs.get("policyArn") or "")
        policy = resolve(att, "policyArn", managed)
        if policy is not None:
            docs.append(policy.inputs.get("policy"))
        elif arn.rsplit("/", 1)[-1] in MANAGED_POLICIES:
            docs.append(MANAGED_POLICIES[arn.rsplit("/", 1)[-1]])
    return docs


def _granted(docs: list[Any]) -> str:
    from policies.model import as_list, statements

    actions = sorted(
        {
            str(a)
            for d in docs
            for s in statements(d)
            if s.get("Effect") == "Allow"
            for a in as_list(s.get("Action", []))
        }
    )
    return ", ".join(actions) or "nothing"


def object_store_access(stack: Stack) -> Iterator[Finding]:
    if stack.tier_guarantees.workload_identity != "aws-iam":
        return
    for pod in stack.pods:
        namespace = pod.owner.namespace
        for c in pod.containers():
            words = argv(c) + [v for v in env_of(c).values() if isinstance(v, str)]
            uris = [(m.group(1), (m.group(2) or "/").strip("/")) for w in words for m in S3_URI.finditer(w)]
            if not uris:
                continue
            needed = [("s3:GetObject", "read")] + [(a, f) for f, a in WRITE_FLAGS.items() if f in words]
            role, binding = _role_of(stack, namespace, pod.service_account)
            who = f"{pod.label} container {c.get('name')} (service account {namespace}/{pod.service_account})"
            if role is None:
                yield (
                    f"{who} reads s3://{uris[0][0]}/{uris[0][1]} but its service account maps to no IAM role: add a "
                    "Pod Identity association (or IRSA annotation) to a role that allows it",
                    pod.owner,
                )
                continue
            docs = _role_documents(stack, role)
            for action, why in needed:
                for bucket, key in uris:
                    arn = f"arn:aws:s3:::{bucket}/{key + '/' if key else ''}object"
                    if not allows(docs, action, arn):
                        verb = f"runs {why} to" if why.startswith("--") else "reads"
                        yield (
                            f"{who} {verb} s3://{bucket}/{key} and needs {action}, but its role {role.name} "
                            f"({binding}) allows only {_granted(docs)}. Fix: give it a role whose policy allows "
                            f"{action} on arn:aws:s3:::{bucket}/{key + '/' if key else ''}*",
                            pod.owner,
                        )
                        break


def service_accounts_exist(stack: Stack) -> Iterator[Finding]:
    declared = {(s.namespace, s.object_name) for s in stack.by_kind["ServiceAccount"]}
    for pod in stack.pods:
        sa = pod.service_account
        if sa != "default" and (pod.owner.namespace, sa) not in declared:
            yield (
                f"{pod.label} runs as service account {pod.owner.namespace}/{sa}, which the stack does not create: "
                "the pod would be refused. Create the ServiceAccount in the same namespace",
                pod.owner,
            )


# ---------------------------------------------------------------------------------------------
# Buckets: each one encrypted and private, whichever resource carries the setting


BUCKET_TYPES = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
BUCKET_ENCRYPTION_TYPES = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    # The same resource under its pulumi-aws v6 name, still accepted as an alias in v7.
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)


def buckets_protected(stack: Stack) -> Iterator[Finding]:
    """The per-resource S3 rules judge a setting where it is written; this one asks that it is written at all.

    Left out, S3 encrypts with SSE-S3, not KMS (https://docs.aws.amazon.com/AmazonS3/latest/userguide/default-encryption-faq.html),
    and a bucket's public access follows the account's settings.
    """
    configs = [r for t in BUCKET_ENCRYPTION_TYPES for r in stack.by_type[t]]
    blocks = stack.by_type["aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"]
    for bucket in (r for t in BUCKET_TYPES for r in stack.by_type[t]):
        inline = bucket.inputs.get("serverSideEncryptionConfiguration") or bucket.inputs.get(
            "serverSideEncryptionConfigurations"
        )
        if not inline and not any(resolve(c, "bucket", [bucket]) for c in configs):
            yield (
                f"{bucket.label} has no server-side encryption configuration, so S3 uses SSE-S3: add a "
                "BucketServerSideEncryptionConfiguration with sseAlgorithm aws:kms and a KMS key",
                bucket,
            )
        if not any(resolve(b, "bucket", [bucket]) for b in blocks):
            yield (
                f"{bucket.label} has no BucketPublicAccessBlock: add one with all four flags true",
                bucket,
            )


# ---------------------------------------------------------------------------------------------
# NetworkPolicy enforcement

POLICY_CNI_CHARTS = ("tigera-operator", "calico", "cilium", "antrea", "kube-router")


def _vpc_cni_enforces(addon: Res) -> bool:
    value = _json(addon.inputs.get("configurationValues")).get("enableNetworkPolicy")
    return str(value).lower() == "true"


def network_policy_enforced(stack: Stack) -> Iterator[Finding]:
    policies = stack.by_kind["NetworkPolicy"]
    if not policies or stack.tier_guarantees.network_policy_enforcer:
        return
    if any(c in stack.releases for c in POLICY_CNI_CHARTS):
        return
    vpc_cni = stack.addon("vpc-cni")
    if vpc_cni is not None and _vpc_cni_enforces(vpc_cni):
        return
    cni = (
        f'the EKS vpc-cni add-on {vpc_cni.name}, whose configurationValues lack enableNetworkPolicy: "true"'
        if vpc_cni is not None
        else f"no CNI that the stack installs or tier {stack.tier} guarantees"
    )
    for np in policies:
        yield (
            f"{np.label} would not be enforced: the cluster's network policy engine is {cni}. Fix: set "
            'configurationValues {"enableNetworkPolicy": "true"} (with a pinned addonVersion) on the vpc-cni '
            "add-on, or install a CNI that enforces NetworkPolicy",
            np,
        )


CACHE_IMAGES = ("redis", "valkey", "redis-stack-server")
"""Image names (the last path segment of the repository) of the cache servers."""
BROADEST_BLOCK = {4: 8, 6: 48}
"""The widest ipBlock prefix, per IP version, that a policy guarding the cache or a model server may admit.

Each is the largest network one organisation numbers privately: IPv4's 10.0.0.0/8 (RFC 1918's largest block, all of
it free to any one network), IPv6's /48 (RFC 4193 gives each organisation a unique local /48 under fd00::/8 with its
40-bit random Global ID, and RFC 6177 an end site a /48 of global space). A wider block spans other organisations'
networks or the public internet, so it cannot be the one client network it should be: 0.0.0.0/0, ::/0, a /4 or
fd00::/8 (every organisation's unique local addresses) are caught. A block as wide as these or narrower can still
hold the cluster's own pods and nodes; where the plan says which addresses those are (the VPC and its subnets, from
which the EKS VPC CNI numbers every node and pod), a block that covers one is caught too (``_cluster_networks``)."""


def _guarded(stack: Stack, pod: Pod) -> str | None:
    """What the baseline restricts about this pod: ``model server``, ``cache``, or ``None``."""
    from components.catalog import engine_support
    from components.observability.dashboards import MODEL_POD_LABEL

    if pod.owner.kind in ("Job", "CronJob"):
        return None
    engines = {_image_path(i) for i in engine_support.ENGINE_IMAGES}
    images = [str(c.get("image")) for c in pod.containers(init=False)]
    if MODEL_POD_LABEL in (pod.labels or {}) or any(_mirrors(_image_path(i), engines) for i in images):
        return "model server"
    if any(_repository(i).rsplit("/", 1)[-1] in CACHE_IMAGES for i in images):
        return "cache"
    return None


def _image_path(image: str) -> str:
    """An image's repository without its registry: ``vllm/vllm-openai`` for ``docker.io/vllm/vllm-openai:v0.11.0``.
    The first segment is a registry when it has a dot or a port, or is ``localhost`` (the Docker reference grammar)."""
    first, _, rest = _repository(image).partition("/")
    return rest if rest and ("." in first or ":" in first or first == "localhost") else _repository(image)


def _mirrors(path: str, engines: set[str]) -> bool:
    """Whether a repository is an engine's, in any registry or under a mirror's prefix (``mirror/vllm/vllm-openai``)."""
    return any(path == e or path.endswith("/" + e) for e in engines)


def _selects(policy: Res, labels: Mapping[str, Any]) -> bool:
    """Whether a NetworkPolicy's podSelector matches pods with these labels (its own namespace only)."""
    return label_selector_matches((policy.inputs.get("spec") or {}).get("podSelector") or {}, labels)


def _open_ingress(policy: Res) -> str | None:
    """How a policy admits every source, or ``None`` if each of its ingress rules names its peers.

    An ingress rule without ``from`` admits all sources; a peer with an empty namespaceSelector and no podSelector, or
    an empty one, admits every pod of every namespace
    (https://kubernetes.io/docs/concepts/services-networking/network-policies/). An ipBlock of every address is one of
    ``_broad_ip_blocks``.
    """
    spec = policy.inputs.get("spec") or {}
    # policyTypes left out means Ingress (plus Egress when egress rules are present): the same docs page.
    if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
        return None
    for rule in spec.get("ingress") or []:
        peers = rule.get("from") or []
        if not peers:
            return "an ingress rule without from (every source)"
        for peer in peers:
            namespaces = peer.get("namespaceSelector")
            if not peer or (
                isinstance(namespaces, Mapping)
                and _everything(namespaces)
                and _everything(peer.get("podSelector") or {})
            ):
                return "a peer that matches every pod in every namespace"
    return None


def _everything(selector: Mapping[str, Any]) -> bool:
    """Whether a label selector is empty (matches every object): no matchLabels and no matchExpressions."""
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


def _named_namespaces(selector: Mapping[str, Any]) -> set[str] | None:
    """The namespaces a namespaceSelector names by ``kubernetes.io/metadata.name`` (``matchLabels`` or an ``In``
    expression), or ``None`` where it selects by other labels, which any namespace may carry."""
    names: set[str] | None = None
    pinned = (selector.get("matchLabels") or {}).get(NAMESPACE_NAME_LABEL)
    if pinned is not None:
        names = {str(pinned)}
    for e in selector.get("matchExpressions") or []:
        if e.get("key") == NAMESPACE_NAME_LABEL and e.get("operator") == "In":
            values = {str(v) for v in e.get("values") or []}
            names = values if names is None else names & values
    return names


def _gateway_namespaces(stack: Stack) -> set[tuple[str, str]]:
    """(provider, namespace) where the stack runs the gateway's pods and nothing else: a peer of that whole namespace
    admits the gateway only. A Helm release there, or any other workload, makes it a namespace like another."""
    tenants: dict[tuple[str, str], set[bool]] = defaultdict(set)
    for pod in stack.pods:
        gateway = all((pod.labels or {}).get(k) == v for k, v in GATEWAY_POD_LABELS.items())
        tenants[(pod.owner.provider, pod.owner.namespace)].add(gateway)
    for release in stack.by_type[HELM_RELEASE]:
        tenants[(release.provider, str(release.inputs.get("namespace") or "default"))].add(False)
    return {where for where, gateway in tenants.items() if gateway == {True}}


def _whole_namespace_peers(policy: Res, gateways: set[tuple[str, str]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(which namespace, peer) for each ingress peer that admits every pod of a namespace other than a gateway's.

    A peer with a namespaceSelector and no podSelector, or an empty one, admits every pod of the namespaces it
    selects; a podSelector alone that is empty, every pod of the policy's own namespace (the NetworkPolicy docs'
    "Behavior of to and from selectors"). Peers that admit every namespace are ``_open_ingress``'s."""
    spec = policy.inputs.get("spec") or {}
    for rule in spec.get("ingress") or []:
        for peer in rule.get("from") or []:
            if not isinstance(peer, Mapping) or not _everything(peer.get("podSelector") or {}):
                continue
            namespaces = peer.get("namespaceSelector")
            if isinstance(namespaces, Mapping) and not _everything(namespaces):
                names = _named_namespaces(namespaces)
                if names is None:
                    yield "every namespace its namespaceSelector matches", peer
                elif any((policy.provider, n) not in gateways for n in names):
                    yield f"namespace {', '.join(sorted(names))}", peer
            elif namespaces is None and "podSelector" in peer:
                yield f"its own namespace {policy.namespace}", peer


Network = IPv4Network | IPv6Network


def _network(cidr: Any) -> Network | None:
    """A CIDR as the API server reads an ipBlock's: host bits masked off, an IPv4 octet's leading zeros read as
    decimal (k8s.io/utils/net ParseCIDRSloppy); ``None`` where unknown at preview or not a CIDR."""
    if not isinstance(cidr, str) or not known(cidr):
        return None
    text = cidr.strip()
    try:
        return ip_network(text, strict=False)
    except ValueError:
        pass
    address, _, prefix = text.partition("/")
    octets = address.split(".")
    if len(octets) != 4 or not all(o.isdigit() for o in [*octets, prefix]):
        return None
    try:
        return ip_network(f"{'.'.join(str(int(o)) for o in octets)}/{int(prefix)}", strict=False)
    except ValueError:
        return None


def _within(inner: Network, outer: Network) -> bool:
    """Whether every address of ``inner`` is in ``outer`` (false across IP versions, where ``subnet_of`` raises)."""
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


CLUSTER_NETWORK_TYPES = (("aws:ec2/vpc:Vpc", "VPC"), ("aws:ec2/subnet:Subnet", "subnet"))


def _cluster_networks(stack: Stack) -> list[tuple[str, str, Network]]:
    """(kind: VPC or subnet, how a message names it, network) for each network the plan numbers the cluster's nodes
    and pods from: the stack's VPCs and subnets, whose addresses the EKS VPC CNI gives every node and pod (and a load
    balancer's interfaces). On-prem and edge plans do not say which pod network their CNI uses."""
    found: list[tuple[str, str, Network]] = []
    for type_, kind in CLUSTER_NETWORK_TYPES:
        for r in stack.by_type[type_]:
            for key in ("cidrBlock", "ipv6CidrBlock"):
                network = _network(r.inputs.get(key))
                if network is not None:
                    found.append((kind, f"the {kind} {r.name} ({network})", network))
    return found


def _broad_ip_blocks(policy: Res, cluster: list[tuple[str, str, Network]]) -> Iterator[tuple[str, str, bool]]:
    """(the peer's CIDR as written, what it admits, whether it has an ``except`` list) for each ingress ipBlock
    peer wider than ``BROADEST_BLOCK`` or covering a network of the cluster's own.

    An ``except`` list does not narrow a wide block: it takes out only the ranges it names, and every other address
    of the block still gets in. It does keep out a network of the cluster's that one of its entries covers."""
    spec = policy.inputs.get("spec") or {}
    for rule in spec.get("ingress") or []:
        for peer in rule.get("from") or []:
            block = peer.get("ipBlock") if isinstance(peer, Mapping) else None
            if not isinstance(block, Mapping) or (network := _network(block.get("cidr"))) is None:
                continue
            excepted = [n for n in map(_network, block.get("except") or []) if n is not None]
            widest = BROADEST_BLOCK[network.version]
            if network.prefixlen == 0:
                yield str(block["cidr"]), "every address", bool(excepted)
            elif network.prefixlen < widest:
                yield (
                    str(block["cidr"]),
                    f"every address of {network}, a /{network.prefixlen}: wider than the widest network one "
                    f"organisation numbers privately (a /{widest} for IPv{network.version})",
                    bool(excepted),
                )
            else:
                covered = [
                    what
                    for _, what, own in cluster
                    if _within(own, network) and not any(_within(own, e) for e in excepted)
                ]
                # A block inside a subnet admits whichever nodes and pods the VPC CNI happens to number there: "these
                # should be cluster-external IPs, since Pod IPs are ephemeral and unpredictable" (Kubernetes docs,
                # Network Policies, ipBlock). The rest of the VPC holds no pod of the stack's.
                inside = [
                    what
                    for kind, what, own in cluster
                    if kind == "subnet"
                    and _within(network, own)
                    and network != own
                    and not any(_within(network, e) for e in excepted)
                ]
                if covered:
                    yield (
                        str(block["cidr"]),
                        f"every node and pod of {covered[0]}, which the VPC CNI numbers them from",
                        False,
                    )
                elif inside:
                    yield (
                        str(block["cidr"]),
                        f"whichever nodes and pods the VPC CNI numbers in it, a range inside {inside[0]} (an ipBlock "
                        "is for addresses outside the cluster: a pod's address is ephemeral)",
                        False,
                    )


def network_policy_guards(stack: Stack) -> Iterator[Finding]:
    """The cache's and the model servers' pods are each selected by an ingress NetworkPolicy of their namespace and
    cluster (provider), and none lets everyone in, an ipBlock wider than one organisation's network or covering the
    cluster's own (``BROADEST_BLOCK``), or every pod of a namespace other than the gateway's (NetworkPolicies add up:
    one open policy opens the pod).

    Ports are left alone: a rule without ``ports`` admits every port, but the kit's own model-server policies have
    one on purpose (a multi-node group's ranks reach each other on the ports NCCL and Ray pick), so a rule that names
    its peers may leave its ports out."""
    gateways = _gateway_namespaces(stack)
    cluster = _cluster_networks(stack)
    for pod in stack.pods:
        what = _guarded(stack, pod)
        if what is None:
            continue
        ingress = [
            np
            for np in stack.by_kind["NetworkPolicy"]
            if np.namespace == pod.owner.namespace
            and np.provider == pod.owner.provider
            and "Ingress" in ((np.inputs.get("spec") or {}).get("policyTypes") or ["Ingress"])
            and _selects(np, pod.labels or {})
        ]
        if not ingress:
            yield (
                f"{pod.label} is a {what} that no NetworkPolicy selects for ingress: every pod in the cluster can "
                f"reach it. Fix: add a NetworkPolicy in {pod.owner.namespace} selecting its labels that admits only "
                "the gateway (and monitoring)",
                pod.owner,
            )
            continue
        for np in ingress:
            why = _open_ingress(np)
            if why is not None:
                yield (
                    f"{np.label} selects the {what} {pod.label} and admits everyone through {why}: name the peers "
                    "(the gateway's pods, monitoring)",
                    np,
                )
                continue
            for cidr, admits, excepted in _broad_ip_blocks(np, cluster):
                yield (
                    f"{np.label} selects the {what} {pod.label} and admits {admits} through the peer ipBlock "
                    f"{cidr}"
                    + (
                        " (its except list takes out only the ranges it names: every other address of the block "
                        "still gets in)"
                        if excepted
                        else ""
                    )
                    + ", past the gateway's API keys: an address range names no pod. Fix: replace it with a "
                    f"podSelector naming the pods that need it ({NAMED_PEERS})",
                    np,
                )
            for where, peer in _whole_namespace_peers(np, gateways):
                yield (
                    f"{np.label} selects the {what} {pod.label} and admits every pod of {where} through the peer "
                    f"{json.dumps(peer, sort_keys=True)}: give it a podSelector naming the pods that need it "
                    f"({NAMED_PEERS})",
                    np,
                )


NAMED_PEERS = ", ".join(
    f"{who}'s {', '.join(f'{k}={v}' for k, v in labels.items())}"
    for who, labels in (("the gateway", GATEWAY_POD_LABELS), ("Prometheus", PROMETHEUS_POD_LABELS))
)
"""The pods the kit's own policies admit, for the fix of a peer that admits a whole namespace."""


# ---------------------------------------------------------------------------------------------
# GPU capacity, parallelism and fabric


def _gpus(pod: Pod) -> int:
    return sum(device_count(c, "nvidia.com/gpu") for c in pod.containers(init=False))


def _pool_max_gpus(pool: NodePool) -> int | None:
    if pool.max_gpus is not None:
        return pool.max_gpus
    if pool.max_nodes is not None and pool.gpus_per_node:
        return pool.max_nodes * pool.gpus_per_node
    return None


def _serving_pods(stack: Stack) -> list[Pod]:
    return [p for p in stack.pods if p.owner.kind not in ("Job", "CronJob", "DaemonSet") and _gpus(p)]


def gpu_capacity_fits(stack: Stack) -> Iterator[Finding]:
    demand: dict[str, list[tuple[Pod, int]]] = defaultdict(list)
    for pod in _serving_pods(stack):
        landing = stack.landing(pod.spec)
        if len(landing) == 1:
            demand[landing[0].name].append((pod, pod.replicas * _gpus(pod)))
    for pool in stack.pools:
        cap = _pool_max_gpus(pool)
        users = demand.get(pool.name) or []
        total = sum(n for _, n in users)
        if cap is not None and total > cap:
            who = ", ".join(f"{p.label} ({p.replicas} replicas x {_gpus(p)} GPUs)" for p, _ in users)
            yield (
                f"{who} need {total} GPUs on {pool.source}, whose maximum is {cap} GPUs"
                f"{f' ({pool.max_nodes} nodes x {pool.gpus_per_node})' if pool.max_nodes else ''}: raise the pool's "
                "max size (or its NodePool limit), or lower the replicas",
                users[0][0].owner,
            )


def _parallelism(stack: Stack, pod: Pod) -> tuple[int, int, str] | None:
    """(TP, PP, where read) from the server's flags, or from the engine build of the same model."""
    for c in pod.containers(init=False):
        words = argv(c)
        tp = flag_value(words, "--tensor-parallel-size", "-tp")
        if tp:
            pp = flag_value(words, "--pipeline-parallel-size", "-pp")
            return as_int(tp, 1), as_int(pp, 1), f"container {c.get('name')}"
    model = (pod.labels or {}).get("inferstack.io/model")
    for other in stack.pods:
        if other.owner is pod.owner or (other.labels or {}).get("inferstack.io/model") != model or not model:
            continue
        for c in other.containers():
            words = argv(c)
            tp = flag_value(words, "--tp_size")
            if tp:
                pp = flag_value(words, "--pp_size")
                return as_int(tp, 1), as_int(pp, 1), f"{other.label} container {c.get('name')}"
    return None


def parallelism_matches(stack: Stack) -> Iterator[Finding]:
    for pod in _serving_pods(stack):
        read = _parallelism(stack, pod)
        if read is None:
            continue
        tp, pp, where = read
        gpus = _gpus(pod)
        group = 1
        if pod.owner.kind == "LeaderWorkerSet":
            group = as_int(((pod.owner.inputs.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size"), 1)
        if tp * pp != gpus * group:
            yield (
                f"{pod.label} runs TP{tp}xPP{pp} ({where}) = {tp * pp} GPUs, but its group has {group} pod(s) x {gpus} "
                f"GPU(s) = {gpus * group}: make the GPU request times the group size equal TPxPP",
                pod.owner,
            )
        for pool in stack.landing(pod.spec):
            if pool.gpus_per_node and gpus > pool.gpus_per_node:
                yield (
                    f"{pod.label} asks {gpus} GPUs per pod, more than {pool.source} has per node "
                    f"({pool.gpus_per_node}): split across nodes with a LeaderWorkerSet (TP within a node, PP across)",
                    pod.owner,
                )


def fabric_device_requested(stack: Stack) -> Iterator[Finding]:
    for pod in stack.pods:
        landing = stack.landing(pod.spec) if stack.pools else []
        for c in pod.containers():
            env = env_of(c)
            caps = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
            uses_efa = str(env.get("FI_PROVIDER")).lower() == "efa"
            uses_rdma = "IPC_LOCK" in caps or bool(env.get("NCCL_IB_HCA")) or str(env.get("NCCL_NET")).upper() == "IB"
            multi_node_on_efa = pod.owner.kind == "LeaderWorkerSet" and landing and all(p.efa for p in landing)
            needs_efa = uses_efa or (multi_node_on_efa and device_count(c, "nvidia.com/gpu") > 0)
            has_efa = device_count(c, "vpc.amazonaws.com/efa") > 0
            if needs_efa and not has_efa:
                yield (
                    f"{pod.label} container {c.get('name')} "
                    + ("sets FI_PROVIDER=efa" if uses_efa else "spans nodes of an EFA pool")
                    + " but requests no vpc.amazonaws.com/efa: without the device NCCL falls back to TCP. Fix: "
                    "request the node's EFA interfaces (resources.limits vpc.amazonaws.com/efa)",
                    pod.owner,
                )
            if uses_rdma and not uses_efa and not has_efa and not device_count(c, "rdma/"):
                yield (
                    f"{pod.label} container {c.get('name')} uses RDMA (IPC_LOCK / NCCL_IB) but requests no rdma/ "
                    "device: request rdma/rdma_shared_device_a (NVIDIA Network Operator)",
                    pod.owner,
                )


# ---------------------------------------------------------------------------------------------
# Engines and hosts


def _repository(image: str) -> str:
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def _engine_problems(table: Any, image: str, args: list[str]) -> list[str]:
    """The table's verdict on ``image``: by its exact pin first, then without its digest."""
    missing = ""
    for candidate in dict.fromkeys([image, image.split("@", 1)[0]]):
        try:
            return list(table.engine_arg_problems(candidate, args))
        except KeyError as err:  # an engine image without a row in the table
            missing = str(err).strip("'\"")
    return [missing]


def _engine_words(container: Mapping[str, Any]) -> list[str]:
    """The container's words that run the engine. A multi-node vLLM group's ranks run a shell script (the kit's
    ``ray_group_script``): Ray's steps (the image's own ``ray`` CLI, flags per docs.ray.io "ray start"), a wait,
    then ``exec vllm serve ...`` on the leader, while a worker only joins Ray. Of a script, only the steps that
    start the engine (``vllm``) are its words; Ray's flags are not the engine's."""
    command = [*(container.get("command") or []), *(container.get("args") or [])]
    if len(command) < 3 or command[:2] not in (["/bin/sh", "-c"], ["sh", "-c"]):
        return argv(container)
    kept: list[str] = []
    for line in str(command[2]).splitlines():
        for step in line.replace(";", "&&").split("&&"):
            words = step.split()
            if words[:1] == ["exec"]:
                words = words[1:]
            if words[:1] == ["vllm"]:
                kept += words
    return kept


def engine_args_supported(stack: Stack) -> Iterator[Finding]:
    from components.catalog import engine_support

    engine_repositories = {_repository(i) for i in engine_support.ENGINE_IMAGES}
    for pod in stack.pods:
        for c in pod.containers():
            image = c.get("image")
            if not isinstance(image, str) or _repository(image) not in engine_repositories:
                continue
            problems = _engine_problems(engine_support, image, _engine_words(c))
            for problem in problems:
                yield (
                    f"{pod.label} container {c.get('name')}: {problem} (support table: "
                    "components/catalog/engine_support.py)",
                    pod.owner,
                )


STAGING_RATIO = 1.5
"""Host memory ≥ 1.5 x the node's GPU memory, so weights can be staged through RAM (the seeds' rule)."""


def host_memory_stages_weights(stack: Stack) -> Iterator[Finding]:
    from components.catalog.instances import INSTANCES

    for pool in stack.pools:
        for it in pool.instance_types:
            spec = INSTANCES.get(it)
            if spec is None or not spec.gpu_count:
                continue
            need = STAGING_RATIO * spec.gpu_memory_gib
            if spec.host_memory_gib < need:
                yield (
                    f"{pool.source} uses {it}: {spec.host_memory_gib} GiB of host memory for "
                    f"{spec.gpu_memory_gib:.0f} GiB of GPU memory, below {STAGING_RATIO} x = {need:.0f} GiB: weights "
                    "cannot be staged through RAM; loads stream from disk (slower cold starts). Pick a larger instance "
                    "if cold-start time matters",
                    None,
                )


def autoscaler_max_fits(stack: Stack) -> Iterator[Finding]:
    targets = {}
    for so in stack.by_kind["ScaledObject"]:
        ref = (so.inputs.get("spec") or {}).get("scaleTargetRef") or {}
        targets[(so.namespace, ref.get("name"))] = (
            so,
            as_int((so.inputs.get("spec") or {}).get("maxReplicaCount"), 100),
        )
    for hpa in stack.by_kind["HorizontalPodAutoscaler"]:
        ref = (hpa.inputs.get("spec") or {}).get("scaleTargetRef") or {}
        targets.setdefault(
            (hpa.namespace, ref.get("name")), (hpa, as_int((hpa.inputs.get("spec") or {}).get("maxReplicas"), 1))
        )
    for pod in _serving_pods(stack):
        scaler = targets.get((pod.owner.namespace, pod.owner.object_name))
        landing = stack.landing(pod.spec)
        if scaler is None or len(landing) != 1:
            continue
        cap = _pool_max_gpus(landing[0])
        so, max_replicas = scaler
        if cap is not None and max_replicas * _gpus(pod) > cap:
            yield (
                f"{so.label} may scale {pod.label} to {max_replicas} x {_gpus(pod)} GPUs = "
                f"{max_replicas * _gpus(pod)}, "
                f"beyond {landing[0].source}'s {cap}: the extra pods stay Pending. Cap maxReplicaCount at "
                f"{cap // max(_gpus(pod), 1)} or grow the pool",
                so,
            )


SELECTOR_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"})


def workload_selectors_disjoint(stack: Stack) -> Iterator[Finding]:
    """No workload's selector matches another workload's pods in its namespace.

    The Kubernetes docs on Deployments: controllers with overlapping selectors "fight with each other and won't
    behave correctly". Owner references keep a controller from adopting pods another one owns, but everything that
    finds the pods by the selector sees both sets: a Service meant for one sends requests to both, and a
    PodDisruptionBudget or an autoscaler's pod metrics count both. Two gateways in one namespace answered each other's
    clients with the other's keys and models."""
    workloads = [
        r
        for kind in sorted(SELECTOR_KINDS)
        for r in stack.by_kind[kind]
        # a namespace not known until the update may be any: such a workload is compared with none
        if r.type != HELM_RELEASE
        and known(r.metadata.get("name"))
        and ("namespace" not in r.metadata or known(r.metadata["namespace"]))
    ]
    for owner in workloads:
        selector = (owner.inputs.get("spec") or {}).get("selector")
        if not isinstance(selector, Mapping) or not selector or not known(selector):
            continue
        for other in workloads:
            if other is owner or other.namespace != owner.namespace or other.provider != owner.provider:
                continue
            for pod in pods(other):
                if known(pod.labels) and label_selector_matches(selector, pod.labels):
                    shown = ", ".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
                    yield (
                        f"{owner.label}'s selector ({shown or 'its matchExpressions'}) also matches the pods of "
                        f"{other.label}: a Service, PodDisruptionBudget or autoscaler for one counts and sends "
                        "requests to both. Give each workload a label of its own in its selector "
                        "and pod template (two of one component: put each in its own namespace)",
                        other,
                    )
