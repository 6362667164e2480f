"""One view of a stack's resources for the rules: the same under ``pulumi preview`` and ``inferstack plan``.

CrossGuard hands a ``StackValidationPolicy`` a list of ``PolicyResource`` (type, props, urn, name,
parent, property dependencies); ``inferstack plan`` has the mock engine's registrations (type,
wire-format inputs, urn, name, parent). Both become :class:`Res`, so every rule is written once.

Under ``pulumi preview`` a value that is not known yet arrives as Pulumi's unknown sentinel; the
helpers here treat it as "cannot tell" and the rules skip what they cannot tell, never guess.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import proxy as _proxy
from pulumi_policy import secret as _secret

UNKNOWN = _proxy.UNKNOWN_STRING_VALUE
"""Pulumi's wire sentinel for a string not known during preview (``pulumi.runtime.rpc.UNKNOWN``)."""
UNKNOWNS = frozenset(
    {
        _proxy.UNKNOWN_BOOLEAN_VALUE,
        _proxy.UNKNOWN_NUMBER_VALUE,
        _proxy.UNKNOWN_STRING_VALUE,
        _proxy.UNKNOWN_ARRAY_VALUE,
        _proxy.UNKNOWN_ASSET_VALUE,
        _proxy.UNKNOWN_ARCHIVE_VALUE,
        _proxy.UNKNOWN_OBJECT_VALUE,
    }
)
_PROXIES = (_proxy._DictProxy, _proxy._ListProxy, _secret._DictSecretsProxy, _secret._ListSecretsProxy)


PENDING_REFERENCES = frozenset({"keyArn", "kmsKeyId", "kmsMasterKeyId"})
"""Keys whose rules ask only whether a reference is set (EKS secrets' KMS key): an ARN the preview cannot know yet,
of a key the same stack creates, is set, so these keep Pulumi's unknown sentinel instead of being left out."""


def plain(value: Any, namespaced: bool = True) -> Any:
    """Inputs as plain dicts and lists, with every value still unknown during a preview left out.

    CrossGuard wraps props in proxies that raise ``UnknownValueError`` on an unknown value, which
    would stop a whole-stack rule at the first ARN a preview cannot know yet; the rules want the
    known part of every resource instead (a missing value is one they cannot judge, and skip), except
    ``PENDING_REFERENCES`` and a namespace (``metadata.namespace``, a Helm release's ``namespace``): one not known
    yet is not the provider's default that a missing namespace means (``namespaced``: this map may hold one).
    Secret values are masked as ``inferstack plan`` masks them.
    """
    if isinstance(value, _PROXIES):
        value = value["__target"]
    if isinstance(value, _secret.Secret):
        return "[secret]"
    if isinstance(value, Mapping):
        return {
            k: plain(v, k == "metadata")
            for k, v in value.items()
            if not _unknown(v) or k in PENDING_REFERENCES or (namespaced and k == "namespace")
        }
    if isinstance(value, list | tuple):
        return [plain(v, False) for v in value if not _unknown(v)]
    return value


def _unknown(value: Any) -> bool:
    return isinstance(value, str) and value in UNKNOWNS


HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "LeaderWorkerSet")


def known(value: Any) -> bool:
    return value is not None and not _unknown(value)


@dataclass(frozen=True)
class Res:
    """One resource: its Pulumi identity and its wire-format (camelCase) inputs."""

    urn: str
    type: str
    name: str
    inputs: Mapping[str, Any]
    parent: str | None = None
    deps: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Property → URNs it depends on (CrossGuard's ``property_dependencies``); empty offline."""
    provider: str = ""
    """URN of its provider: a Kubernetes object's cluster. Empty offline for the default provider; two objects of one
    name under two providers (one program, two clusters) are two objects."""

    @property
    def kind(self) -> str:
        kind = self.inputs.get("kind")
        return kind if isinstance(kind, str) else self.type.rsplit(":", 1)[-1]

    @property
    def metadata(self) -> Mapping[str, Any]:
        meta = self.inputs.get("metadata")
        return meta if isinstance(meta, Mapping) else {}

    @property
    def namespace(self) -> str:
        ns = self.metadata.get("namespace")
        return ns if isinstance(ns, str) and known(ns) else "default"

    @property
    def object_name(self) -> str:
        name = self.metadata.get("name")
        return name if isinstance(name, str) and known(name) else self.name

    @property
    def label(self) -> str:
        """How messages name the resource: ``Deployment inferstack-serving/llama-8b``."""
        if self.type == HELM_RELEASE:
            # The release's own name (what `helm list` shows), not the Pulumi resource's (``<component>-<release>``).
            release = self.inputs.get("name")
            shown = release if isinstance(release, str) and known(release) else self.name
            return f"Helm release {shown} (chart {chart_name(self)})"
        if self.type.startswith("kubernetes:"):
            cluster_scoped = "namespace" not in self.metadata
            where = self.object_name if cluster_scoped else f"{self.namespace}/{self.object_name}"
            return f"{self.kind} {where}"
        return f"{self.type.rsplit(':', 1)[-1]} {self.name}"


def from_plan(resources: Iterable[Any]) -> list[Res]:
    """Registrations (``inferstack_cli.mocks.Registration``) or plan-JSON dicts → :class:`Res`."""
    out = []
    for r in resources:
        if isinstance(r, Mapping):
            inputs, provider = plain(r.get("inputs") or {}), r.get("provider") or ""
            out.append(Res(r["urn"], r["type"], r["name"], inputs, r.get("parent"), provider=provider))
        else:
            provider = getattr(r, "provider", "") or ""
            out.append(Res(r.urn, r.type, r.name, plain(r.inputs or {}), r.parent, provider=provider))
    return out


def from_policy(resources: Iterable[Any]) -> list[Res]:
    """CrossGuard ``PolicyResource`` objects → :class:`Res` (props, parent URN, property dependencies)."""
    out = []
    for r in resources:
        deps = {k: tuple(d.urn for d in v) for k, v in (r.property_dependencies or {}).items()}
        parent = r.parent.urn if r.parent is not None else None
        provider = r.provider.urn if r.provider is not None else ""
        out.append(Res(r.urn, r.resource_type, r.name, plain(r.props), parent, deps, provider))
    return out


# ---------------------------------------------------------------------------------------------
# Kubernetes shapes


def chart_name(release: Res) -> str:
    """A Helm release's chart, without its repository or OCI prefix: ``karpenter``, ``gpu-operator``."""
    chart = str(release.inputs.get("chart") or "")
    return chart.rstrip("/").rsplit("/", 1)[-1]


def helm_values(release: Res) -> Mapping[str, Any]:
    values = release.inputs.get("values")
    return values if isinstance(values, Mapping) else {}


@dataclass(frozen=True)
class Pod:
    """A pod template inside a workload (or a placement block inside Helm values)."""

    owner: Res
    spec: Mapping[str, Any]
    where: str
    """Path of the template inside the owner, for messages: ``spec.template.spec``."""
    replicas: int = 1
    labels: Mapping[str, Any] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        """A patch (``DeploymentPatch``, server-side apply) writes some fields of an object already in the cluster; a
        field it leaves out keeps its live value, which the plan cannot see, so only what it writes is judged."""
        return self.owner.type.endswith("Patch")

    @property
    def label(self) -> str:
        return self.owner.label if self.where in ("", "spec.template.spec") else f"{self.owner.label} ({self.where})"

    def containers(self, init: bool = True) -> list[Mapping[str, Any]]:
        keys = ("initContainers", "containers") if init else ("containers",)
        return [c for k in keys for c in (self.spec.get(k) or []) if isinstance(c, Mapping)]

    @property
    def service_account(self) -> str:
        sa = self.spec.get("serviceAccountName") or self.spec.get("serviceAccount")
        return sa if isinstance(sa, str) and known(sa) else "default"


def as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def pods(res: Res) -> list[Pod]:
    """Every pod template a Kubernetes workload object carries (none for other resources)."""
    if not res.type.startswith("kubernetes:") or res.kind not in WORKLOAD_KINDS:
        return []
    spec = res.inputs.get("spec") or {}
    if res.kind == "Pod":
        return [Pod(res, spec, "", 1, res.metadata.get("labels") or {})]
    if res.kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        return [Pod(res, template.get("spec") or {}, "spec.jobTemplate.spec.template.spec", 1, _labels(template))]
    if res.kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        groups = as_int(spec.get("replicas"), 1)
        size = as_int(lwt.get("size"), 1)
        out = []
        if lwt.get("leaderTemplate"):
            t = lwt["leaderTemplate"]
            out.append(Pod(res, t.get("spec") or {}, "leaderTemplate", groups, _labels(t)))
        worker = lwt.get("workerTemplate") or {}
        workers = groups * (size - 1 if lwt.get("leaderTemplate") else size)
        out.append(Pod(res, worker.get("spec") or {}, "workerTemplate", workers, _labels(worker)))
        return out
    template = spec.get("template") or {}
    replicas = 1 if res.kind in ("Job", "DaemonSet") else as_int(spec.get("replicas"), 1)
    return [Pod(res, template.get("spec") or {}, "spec.template.spec", replicas, _labels(template))]


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """Whether a Kubernetes label selector (``matchLabels`` and ``matchExpressions``) matches these labels; an empty
    selector matches everything."""
    if any(str(labels.get(k)) != str(v) for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = str(e.get("key")), e.get("operator"), [str(v) for v in e.get("values") or []]
        present = key in labels
        if (
            (op == "In" and (not present or str(labels[key]) not in values))
            or (op == "NotIn" and present and str(labels[key]) in values)
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def _labels(template: Mapping[str, Any]) -> Mapping[str, Any]:
    return (template.get("metadata") or {}).get("labels") or {}


PLACEMENT_KEYS = ("nodeSelector", "affinity", "tolerations")


def helm_placements(release: Res) -> list[Pod]:
    """Each block of a release's values that places pods (has a nodeSelector, affinity or tolerations).

    Charts spell placement per component (``prometheus.prometheusSpec.nodeSelector``); the
    top-level block is the chart's main workload. Blocks without placement keys schedule with the
    chart's defaults, which the plan cannot see, so they are not judged.
    """
    out: list[Pod] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, Mapping):
            if any(k in node for k in PLACEMENT_KEYS):
                out.append(Pod(release, node, f"values{path}" if path else "values"))
            for k, v in node.items():
                if k not in PLACEMENT_KEYS:
                    walk(v, f"{path}.{k}")

    walk(helm_values(release), "")
    return out


def resources_of(container: Mapping[str, Any]) -> dict[str, Any]:
    """A container's requests merged over its limits (a limit alone implies the request)."""
    res = container.get("resources") or {}
    return {**(res.get("limits") or {}), **(res.get("requests") or {})}


def device_count(container: Mapping[str, Any], resource: str) -> int:
    """How many of an extended resource a container asks for (prefix match for ``rdma/``)."""
    total = 0
    for k, v in resources_of(container).items():
        if k == resource or (resource.endswith("/") and k.startswith(resource)):
            total += as_int(v, 0)
    return total


def argv(container: Mapping[str, Any]) -> list[str]:
    """Command + args as one list, with ``sh -c`` scripts split into words."""
    words: list[str] = []
    for part in [*(container.get("command") or []), *(container.get("args") or [])]:
        if isinstance(part, str):
            words += part.split() if " " in part else [part]
    return words


def flag_value(words: list[str], *flags: str) -> str | None:
    for i, w in enumerate(words):
        for f in flags:
            if w == f and i + 1 < len(words):
                return words[i + 1]
            if w.startswith(f + "="):
                return w.split("=", 1)[1]
    return None


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    return {str(e.get("name")): e.get("value") for e in container.get("env") or [] if isinstance(e, Mapping)}


# ---------------------------------------------------------------------------------------------
# Nodes: what labels and taints the stack's node pools give


ANY = None
"""A label whose value is not fixed by the pool (``Exists``)."""

WELL_KNOWN_LABEL_PREFIXES = (
    "kubernetes.io/",
    "node.kubernetes.io/",
    "topology.kubernetes.io/",
    "beta.kubernetes.io/",
    "failure-domain.beta.kubernetes.io/",
    "karpenter.sh/",
    "karpenter.k8s.aws/",
    "eks.amazonaws.com/",
    "node-role.kubernetes.io/",
)
"""Labels kubelet, the cloud provider or the provisioner set on every node: any value may appear
(https://kubernetes.io/docs/reference/labels-annotations-taints/)."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodePool:
    """A group of nodes that share labels and taints: a managed node group, a NodePool, a tier's fleet."""

    name: str
    source: str
    """How messages name where the pool comes from: ``NodeGroup gpu-h100``."""
    labels: Mapping[str, tuple[str, ...] | None]
    taints: tuple[Taint, ...] = ()
    instance_types: tuple[str, ...] = ()
    gpus_per_node: int = 0
    max_nodes: int | None = None
    max_gpus: int | None = None
    efa: bool = False
    builtin_devices: tuple[str, ...] = ()
    """Extended resources the node image advertises by itself (Bottlerocket NVIDIA's device plugin)."""

    def describe(self) -> str:
        labels = ", ".join(f"{k}={'*' if v is ANY else '|'.join(v)}" for k, v in sorted(self.labels.items()))
        taints = ", ".join(f"{t.key}={t.value}:{t.effect}" for t in self.taints)
        return f"{self.source} (labels {{{labels}}}{'; taints ' + taints if taints else ''})"


_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _label_value(pool: NodePool, key: str) -> tuple[bool, tuple[str, ...] | None]:
    """(present, values) of ``key`` on the pool's nodes; well-known keys are present with any value."""
    if key in pool.labels:
        return True, pool.labels[key]
    if key.startswith(WELL_KNOWN_LABEL_PREFIXES):
        return True, ANY
    return False, ()


def _expression_holds(pool: NodePool, expr: Mapping[str, Any]) -> bool:
    key, op = str(expr.get("key")), expr.get("operator")
    values = tuple(str(v) for v in expr.get("values") or [])
    present, have = _label_value(pool, key)
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op == "In":
        return present and (have is ANY or bool(set(have) & set(values)))
    if op == "NotIn":
        return not present or have is ANY or not set(have) <= set(values)
    return True  # Gt / Lt: numeric labels the plan cannot see; never guess a mismatch


def selects(pod_spec: Mapping[str, Any], pool: NodePool) -> bool:
    """Whether a pod with this spec can be scheduled onto the pool's nodes (selector, affinity, taints)."""
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        present, have = _label_value(pool, key)
        if not present or (have is not ANY and str(value) not in have):
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_expression_holds(pool, e) for e in (t.get("matchExpressions") or [])) for t in terms):
        return False
    return all(tolerated(t, pod_spec.get("tolerations") or []) for t in pool.taints)


def tolerated(taint: Taint, tolerations: list[Mapping[str, Any]]) -> bool:
    if taint.effect == "PreferNoSchedule":
        return True
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.effect:
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t.get("key") == taint.key):
            return True
        if t.get("key") == taint.key and str(t.get("value", "")) == taint.value:
            return True
    return False


def node_pools(resources: list[Res]) -> list[NodePool]:
    """Every node pool the stack declares: EKS managed node groups and Karpenter NodePools."""
    from components.catalog.instances import INSTANCES

    node_classes = {r.object_name: r for r in resources if r.type == "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"}
    efa_parents = {
        r.parent
        for r in resources
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate"
        and any(i.get("interfaceType") in ("efa", "efa-only") for i in r.inputs.get("networkInterfaces") or [])
    }
    pools: list[NodePool] = []
    for r in resources:
        if r.type == "aws:eks/nodeGroup:NodeGroup":
            types = tuple(r.inputs.get("instanceTypes") or ())
            spec = INSTANCES.get(types[0]) if types else None
            labels: dict[str, tuple[str, ...] | None] = {
                k: (str(v),) for k, v in (r.inputs.get("labels") or {}).items()
            }
            if types:
                labels["node.kubernetes.io/instance-type"] = types
            ami = str(r.inputs.get("amiType") or "")
            pools.append(
                NodePool(
                    name=r.name,
                    source=f"NodeGroup {r.name}",
                    labels=labels,
                    taints=tuple(
                        Taint(
                            str(t.get("key")), str(t.get("value", "")), _EFFECTS.get(t.get("effect"), t.get("effect"))
                        )
                        for t in r.inputs.get("taints") or []
                    ),
                    instance_types=types,
                    gpus_per_node=spec.gpu_count if spec else 0,
                    max_nodes=as_int((r.inputs.get("scalingConfig") or {}).get("maxSize"), 0) or None,
                    efa=r.parent in efa_parents,
                    builtin_devices=("nvidia.com/gpu",) if ami.startswith("BOTTLEROCKET") and "NVIDIA" in ami else (),
                )
            )
        elif r.type == "kubernetes:karpenter.sh/v1:NodePool":
            template = (r.inputs.get("spec") or {}).get("template") or {}
            tspec = template.get("spec") or {}
            labels = {k: (str(v),) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
            for req in tspec.get("requirements") or []:
                if req.get("operator") == "In":
                    labels[str(req.get("key"))] = tuple(str(v) for v in req.get("values") or [])
                elif req.get("operator") == "Exists":
                    labels[str(req.get("key"))] = ANY
            types = labels.get("node.kubernetes.io/instance-type") or ()
            spec = INSTANCES.get(types[0]) if types else None
            limits = (r.inputs.get("spec") or {}).get("limits") or {}
            node_class = node_classes.get(str((tspec.get("nodeClassRef") or {}).get("name")))
            efa = bool(
                node_class
                and any(
                    i.get("interfaceType") == "efa-only"
                    for i in (node_class.inputs.get("spec") or {}).get("networkInterfaces") or []
                )
            )
            pools.append(
                NodePool(
                    name=r.object_name,
                    source=f"Karpenter NodePool {r.object_name}",
                    labels=labels,
                    taints=tuple(
                        Taint(str(t.get("key")), str(t.get("value", "")), str(t.get("effect")))
                        for t in tspec.get("taints") or []
                    ),
                    instance_types=tuple(types),
                    gpus_per_node=spec.gpu_count if spec else 0,
                    max_gpus=as_int(limits.get("nvidia.com/gpu"), 0) or None,
                    efa=efa,
                )
            )
    return pools


# ---------------------------------------------------------------------------------------------
# IAM: roles, their policies, and what they allow


def statements(document: Any) -> list[Mapping[str, Any]]:
    import json

    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return []
    st = document.get("Statement", []) if isinstance(document, Mapping) else []
    return [st] if isinstance(st, Mapping) else [s for s in st if isinstance(s, Mapping)]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def allows(docs: Iterable[Any], action: str, resource: str) -> bool:
    """IAM evaluation reduced to what the rules need: an Allow matches and no Deny does."""
    allowed = False
    for doc in docs:
        for st in statements(doc):
            actions = [str(a).lower() for a in as_list(st.get("Action", []))]
            resources = [str(r) for r in as_list(st.get("Resource", "*"))]
            if not any(fnmatch.fnmatchcase(action.lower(), a) for a in actions):
                continue
            if not any(fnmatch.fnmatchcase(resource, p) for p in resources):
                continue
            if st.get("Effect") == "Deny":
                return False
            allowed = allowed or st.get("Effect") == "Allow"
    return allowed


_AUTONAME = re.compile(r"^(?P<logical>.+)-[0-9a-f]{7,8}$")


def same_object(reference: Any, target: Res) -> bool:
    """Whether a name, ARN or URN refers to ``target``.

    Matches a URN, the target's own ``name``/``arn`` inputs, or Pulumi's auto-naming (the
    logical name plus a ``-`` and random hex suffix), which is all ``inferstack plan`` knows.
    """
    if not known(reference):
        return False
    ref = str(reference)
    if ref == target.urn:
        return True
    own = {str(target.inputs.get(k)) for k in ("name", "arn", "id") if known(target.inputs.get(k))}
    last = ref.rsplit("/", 1)[-1] if ref.startswith("arn:") else ref
    if ref in own or last in own:
        return True
    m = _AUTONAME.match(last)
    return bool(m and m.group("logical") == target.name)


def resolve(holder: Res, prop: str, candidates: Iterable[Res]) -> Res | None:
    """The resource ``holder.inputs[prop]`` refers to: by property dependency first, then by name."""
    candidates = list(candidates)
    for urn in holder.deps.get(prop, ()):
        for c in candidates:
            if c.urn == urn:
                return c
    value = holder.inputs.get(prop)
    return next((c for c in candidates if same_object(value, c)), None)


def iter_strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for v in node.values():
            yield from iter_strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from iter_strings(v)
