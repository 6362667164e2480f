"""Apply a rendered custom-resource manifest (a plain dict from a pure builder) as a typed Pulumi resource."""

from __future__ import annotations

import re
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s

from components.kube.labels import NAMESPACE_NAME_LABEL


def custom_resource(
    name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions, *, spec: Any = None
) -> k8s.apiextensions.CustomResource:
    """``spec`` overrides the manifest's (for a spec that holds Outputs)."""
    return k8s.apiextensions.CustomResource(
        name,
        api_version=manifest["apiVersion"],
        kind=manifest["kind"],
        metadata=manifest["metadata"],
        spec=manifest["spec"] if spec is None else spec,
        opts=opts,
    )


def per_instance(component: str, child: str, opts: pulumi.ResourceOptions) -> tuple[str, pulumi.ResourceOptions]:
    """The logical name ``<component>-<child>`` of a child each instance of a component makes once, and ``opts`` with
    an alias to ``child``, the name it had before.

    A child's URN holds its parent's type, never its parent's name (Pulumi docs, "Resource names", URNs: children of a
    component should take the component's name into theirs), so a child named ``child`` alone had one URN in every
    instance: two clusters' ``ServingBase`` in one program stopped with "Duplicate resource URN". The alias keeps an
    existing stack's state: ``pulumi up`` finds the resource under its former URN and renames it in place, where it
    would otherwise delete it and create it again (a Namespace with everything in it). The engine refuses one former URN
    claimed by two resources ("Duplicate resource alias"): upgrade a stack before adding a second instance."""
    return f"{component}-{child}", pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(aliases=[pulumi.Alias(name=child)])
    )


def restricted_pod(uid: int) -> dict[str, Any]:
    """Pod securityContext that meets the "restricted" Pod Security level for an image running as ``uid``."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
"""Container securityContext of every kit container that writes nothing outside its volumes."""


MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "inferstack"}
"""Label on every object the kit renders itself (not the charts')."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def check_name(field: str, value: str) -> None:
    """Refuse a name Kubernetes would refuse, before a render hands it on."""
    if not _DNS_LABEL.fullmatch(value) or len(value) > 63:  # fullmatch: a `$` would let a trailing newline by
        raise ValueError(f"{field}: {value!r} is not a DNS-1123 label; use lowercase letters, digits and '-'")


def one_or_several(names: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """A field that takes one namespace or several (``gateway_namespace``), as a tuple: each once, in order."""
    if names is None:
        return ()
    return tuple(dict.fromkeys((names,) if isinstance(names, str) else names))


def namespace_peer(name: str) -> dict[str, Any]:
    """A NetworkPolicy peer of one namespace, named by the label the API server sets to its name. Alone it admits
    every pod there; beside a ``podSelector`` (``{**namespace_peer(n), "podSelector": ...}``), those pods only."""
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: name}}}
