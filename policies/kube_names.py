"""Kubernetes names: each object's name, namespace, labels and annotation keys are ones the API server accepts, and
no two resources of a stack create the same object.

Neither is in the OpenAPI schemas that ``kubernetes-validate`` checks, so without these rules a name such as
``Llama_8B`` passes ``pulumi preview`` and fails at ``pulumi up``, part of the way through an update. The formats are
Kubernetes' own (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ and
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set): the API server
validates a custom resource's name as a DNS-1123 subdomain too (apiextensions-apiserver's customResourceValidator).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from policies.kube_rules import walk
from policies.model import HELM_RELEASE, Res, known

if TYPE_CHECKING:
    from policies.stack_rules import Stack

Finding = tuple[str, Res | None]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


class Format(NamedTuple):
    """A name format: how messages describe it, its length limit and its pattern."""

    what: str
    limit: int
    pattern: re.Pattern[str]

    def problem(self, value: str) -> str | None:
        """Why `value` is not of this format, or None."""
        if len(value) > self.limit:
            return f"is {len(value)} characters, over the {self.limit} allowed"
        if not self.pattern.fullmatch(value):
            return f"is not {self.what}"
        return None

    def suggest(self, name: str, limit: int | None = None) -> str:
        """A name of this format close to `name`: lowercase, runs of other characters (and dots, but in a subdomain)
        as one '-', cut to `limit` (default: the format's); a DNS-1035 label starts with a letter."""
        limit = self.limit if limit is None else limit
        other = r"[^a-z0-9.]+" if self.pattern is DNS1123_SUBDOMAIN else r"[^a-z0-9]+"
        fixed = re.sub(other, "-", name.lower()).strip("-.")[:limit].rstrip("-.") or "name"
        if self.pattern is DNS1035_LABEL and not fixed[0].isalpha():
            return self.suggest(f"svc-{fixed}", limit)
        return fixed


SUBDOMAIN = Format("a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter "
                   "or digit", 253, DNS1123_SUBDOMAIN)  # fmt: skip
LABEL = Format("a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit", 63,
               DNS1123_LABEL)  # fmt: skip
SERVICE = Format("a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a "
                 "letter or digit", 63, DNS1035_LABEL)  # fmt: skip
# Kinds whose names are DNS labels, and those whose controllers put the name into a label value of their pods (63
# characters at most), so that a longer name is accepted and then no pod is ever created.
NAME_FORMATS: Mapping[str, Format] = {
    "Namespace": LABEL,
    "Service": SERVICE,
    # the controller-revision-hash label of a StatefulSet's pods is "<name>-<10-character hash>" (kubernetes#64023)
    "StatefulSet": LABEL._replace(limit=52),
    # A Job's name is a subdomain (batch validation: ValidateReplicationControllerName), and its pods' job-name label
    # value (63 characters at most, dots allowed); a CronJob's Jobs add 11 characters (ValidateCronJobCreate: 52).
    "Job": SUBDOMAIN._replace(limit=63),
    "CronJob": SUBDOMAIN._replace(limit=52),
}
# RBAC names are path segments: anything but '/', '%', '.' and '..'.
PATH_SEGMENT_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
# Helm: a release name is a DNS-1123 subdomain of 53 characters at most (`helm install` refuses longer ones).
HELM_RELEASE_NAME = SUBDOMAIN._replace(limit=53)
AUTONAME_SUFFIX = "0a1b2c3d"
"""Stands for the 8 random hex digits Pulumi appends to an auto-named object's resource name."""


def _qualified_key(key: str) -> str | None:
    """A label or annotation key: an optional DNS-1123 subdomain prefix (≤253) and '/', then a name (≤63)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:  # IsQualifiedName: "prefix part must be non-empty"
        return "has an empty prefix before its '/': drop the '/' or put a DNS-1123 subdomain before it"
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"has the prefix {prefix!r}, which is not a DNS-1123 subdomain of 253 characters at most"
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        return ("is not a qualified name: an optional prefix and '/', then at most 63 letters, digits, '-', '_' "
                "and '.', starting and ending with a letter or digit")  # fmt: skip
    return None


def _label_maps(inputs: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every map of Kubernetes labels in an object: its own, its pod templates' and its selectors'. (An alerting
    rule's `labels` are Prometheus labels, not Kubernetes ones, and are left alone.)"""
    for path, key, node in walk(inputs):
        if not isinstance(node, Mapping):
            continue
        parent = path.rsplit(".", 2)[-2] if path.count(".") >= 2 else ""
        if (key == "labels" and parent in ("metadata", "podMetadata")) or key == "matchLabels":
            yield path.lstrip("."), node


def names_valid(res: Res) -> Iterator[Finding]:
    """A Kubernetes object's name, namespace, label keys and values, and annotation keys are valid."""
    if res.type == HELM_RELEASE:
        yield from _release_names(res)
        return
    if not res.type.startswith("kubernetes:") or "metadata" not in res.inputs:
        return
    metadata = res.metadata
    name = metadata.get("name")
    if "name" not in metadata and "generateName" not in metadata:
        # Pulumi names the object "<resource name>-<8 random hex digits>"
        yield from _name_problems(res, f"{res.name}-{AUTONAME_SUFFIX}", f"the resource name {res.name!r}", 9)
    elif isinstance(name, str) and known(name):
        yield from _name_problems(res, name, f"metadata.name {name!r}", 0)
    yield from _namespace_problems(res, "metadata.namespace", metadata.get("namespace"))
    if res.kind == "Job" and isinstance(name, str) and known(name):
        yield from _indexed_job(res, name)
    for path, labels in _label_maps(res.inputs):
        for key, value in labels.items():
            if problem := _qualified_key(str(key)):
                yield (f"{res.label}: {path} key {key!r} {problem}", None)
            if isinstance(value, str) and known(value) and (len(value) > 63 or not LABEL_VALUE.fullmatch(value)):
                yield (
                    f"{res.label}: {path}.{key} value {value!r} is not a label value (at most 63 letters, digits, "
                    "'-', '_' and '.', starting and ending with a letter or digit): shorten or rename it",
                    None,
                )
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping):
        for key in annotations:
            # An annotation key is a qualified name "except that case doesn't matter" (apimachinery's
            # ValidateAnnotations checks it lowercased): Example.com/Owner is accepted.
            if problem := _qualified_key(str(key).lower()):
                yield (f"{res.label}: metadata.annotations key {key!r} {problem}", None)


def _name_problems(res: Res, name: str, what: str, suffix: int) -> Iterator[Finding]:
    """`name` against its kind's format; `suffix` characters of it are Pulumi's auto-naming."""
    if res.kind in PATH_SEGMENT_KINDS:
        if name in (".", "..") or "/" in name or "%" in name:
            yield (f"{res.label}: {what} may not be '.' or '..' or contain '/' or '%', so the API server refuses it at "
                   "`pulumi up`: rename it", None)  # fmt: skip
        return
    rule = NAME_FORMATS.get(res.kind, SUBDOMAIN)
    if problem := rule.problem(name):
        if suffix:
            problem = problem.replace(f"is {len(name)} characters", f"makes {len(name)} with Pulumi's suffix")
            problem = f"auto-names the object {name[:-8]}<8 random hex digits>, which {problem}"
        shown = rule.suggest(name[: len(name) - suffix], rule.limit - suffix)
        yield (
            f"{res.label}: {what} {problem}, so the API server refuses it at `pulumi up`: rename it (for example "
            f"{shown!r})",
            None,
        )


def _indexed_job(res: Res, name: str) -> Iterator[Finding]:
    """An Indexed Job's pods are named and hostnamed "<name>-<index>": the API server refuses a Job whose last index
    makes that no DNS-1123 label (batch validation, ValidateJob: "will not able to create pod with invalid DNS
    label")."""
    spec = res.inputs.get("spec")
    if not isinstance(spec, Mapping) or spec.get("completionMode") != "Indexed":
        return
    completions = spec.get("completions")
    if isinstance(completions, bool) or not isinstance(completions, int) or completions < 1:
        return
    hostname = f"{name}-{completions - 1}"
    if problem := LABEL.problem(hostname):
        room = LABEL.limit - len(f"-{completions - 1}")
        yield (
            f"{res.label}: an Indexed Job's pods are named <name>-<index>, and {hostname!r} {problem}, so the API "
            f"server refuses it at `pulumi up`: rename it (for example {LABEL.suggest(name, room)!r})",
            None,
        )


def _release_names(res: Res) -> Iterator[Finding]:
    name = res.inputs.get("name")
    if isinstance(name, str) and known(name) and (problem := HELM_RELEASE_NAME.problem(name)):
        yield (f"{res.label}: the release name {name!r} {problem}: use {HELM_RELEASE_NAME.suggest(name)!r}", None)
    yield from _namespace_problems(res, "namespace", res.inputs.get("namespace"))


def _namespace_problems(res: Res, key: str, namespace: Any) -> Iterator[Finding]:
    if isinstance(namespace, str) and known(namespace) and (problem := LABEL.problem(namespace)):
        yield (f"{res.label}: {key} {namespace!r} {problem}: use {LABEL.suggest(namespace)!r}", None)


def _identity(res: Res) -> tuple[str, str, str, str, str] | None:
    """(provider, API group, kind, namespace, name) of the object a resource creates: the provider is its cluster, so
    one name in two clusters is two objects. None for one it only patches, for a component (a chart, a YAML group),
    for a name the engine makes up (Pulumi's auto-naming is unique), and for a name or namespace not known until the
    update (two unknown namespaces are not one namespace)."""
    if res.type == HELM_RELEASE:
        name, namespace = res.inputs.get("name"), res.inputs.get("namespace")
        if isinstance(name, str) and known(name) and (namespace is None or known(namespace)):
            return res.provider, "helm.sh", "Release", str(namespace or "default"), name
        return None
    if not res.type.startswith("kubernetes:") or "metadata" not in res.inputs or res.type.endswith("Patch"):
        return None
    name = res.metadata.get("name")
    if not isinstance(name, str) or not known(name):
        return None
    group = res.type.split(":")[1].rsplit("/", 1)[0]
    namespaced = "namespace" in res.metadata
    if namespaced and not known(res.metadata.get("namespace")):
        return None
    return res.provider, group, res.kind, res.namespace if namespaced else "", name


def objects_unique(stack: Stack) -> Iterator[Finding]:
    """No two resources create the same Kubernetes object (or the same Helm release): the second create fails with
    "already exists" at `pulumi up`, or, applied server-side, the two overwrite each other on every update."""
    owners: dict[tuple[str, str, str, str, str], list[Res]] = defaultdict(list)
    for res in stack.resources:
        if (identity := _identity(res)) is not None:
            owners[identity].append(res)
    for lws in stack.resources:
        # A LeaderWorkerSet's controller creates a headless Service named after it for its pods' DNS (subdomainPolicy
        # Shared, the default; kubernetes-sigs/lws reconcileHeadlessServices) and leaves one that exists alone.
        identity = _identity(lws) if lws.kind == "LeaderWorkerSet" else None
        network = (lws.inputs.get("spec") or {}).get("networkConfig") or {}
        if identity is None or network.get("subdomainPolicy", "Shared") != "Shared":
            continue
        provider, _, _, namespace, name = identity
        if taken := owners.get((provider, "core", "Service", namespace, name)):
            yield (
                f"Service {namespace}/{name} ({', '.join(sorted(r.name for r in taken))}) has the name of "
                f"LeaderWorkerSet {lws.name}, whose controller creates a headless Service of that name for its pods' "
                "DNS (LWS_LEADER_ADDRESS): `pulumi up` fails on it, or the Service takes the name and the leader's "
                f"address never resolves; name the Service otherwise (e.g. {name}-leader)",
                taken[0],
            )
    for (_, _, kind, namespace, name), resources in owners.items():
        if len(resources) < 2:
            continue
        where = f"{namespace}/{name}" if namespace else name
        what = "Helm release" if kind == "Release" else kind
        names = ", ".join(sorted(r.name for r in resources))
        yield (
            f"{what} {where} is created by {len(resources)} resources ({names}): the second fails at `pulumi up`; "
            "give each its own name (two components of the same kind in one namespace need distinct names)",
            resources[1],
        )
