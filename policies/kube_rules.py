"""Kubernetes resource rules: each looks at one object (a workload, a Service, a ConfigMap, a Helm release).

Pod Security "restricted" is split into its controls, one rule each, as the Kubernetes docs list
them (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted), so a
violation names the control and an allowance can be as narrow as the need.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import re
from collections.abc import Iterator, Mapping
from typing import Any

from policies.exceptions import POD_SECURITY_ALLOWANCES, PodSecurityAllowance, tag_allowed
from policies.model import (
    HELM_RELEASE,
    Pod,
    Res,
    argv,
    chart_name,
    device_count,
    helm_values,
    known,
    pods,
    resources_of,
)

Finding = tuple[str, Res | None]
ALLOW_HINT = "or name an allowance with its reason in policies/exceptions.py"


def _allowances(pod: Pod, container: Mapping[str, Any]) -> list[PodSecurityAllowance]:
    return [
        a
        for a in POD_SECURITY_ALLOWANCES
        if fnmatch.fnmatchcase(pod.owner.name, a.workloads)
        and fnmatch.fnmatchcase(str(container.get("name")), a.containers)
        and (a.requires_resource is None or device_count(container, a.requires_resource) > 0)
        and (not a.images or container.get("image") in a.images)
    ]


def _sc(pod: Pod, container: Mapping[str, Any], key: str) -> Any:
    """A security-context field, the container's overriding the pod's."""
    value = (container.get("securityContext") or {}).get(key)
    return value if value is not None else (pod.spec.get("securityContext") or {}).get(key)


def _containers(res: Res) -> Iterator[tuple[Pod, Mapping[str, Any]]]:
    for pod in pods(res):
        for c in pod.containers():
            yield pod, c


def _where(pod: Pod, c: Mapping[str, Any]) -> str:
    return f"{pod.label} container {c.get('name')}"


def pss_non_root(res: Res) -> Iterator[Finding]:
    for pod in pods(res):
        # A patch that writes only the pod's securityContext sets it for every live container: judged as one.
        for c in pod.containers() or ([{}] if pod.partial else []):
            non_root = _sc(pod, c, "runAsNonRoot")
            # A patch is judged on what it writes: runAsNonRoot left out keeps the live value; false turns root on.
            unset = non_root is False or (not pod.partial and non_root is not True)
            root = unset or _sc(pod, c, "runAsUser") == 0
            if root and not any(a.run_as_root for a in _allowances(pod, c)):
                yield (
                    f"{_where(pod, c) if c else pod.label} may run as root: set securityContext.runAsNonRoot: true "
                    f"and a non-zero runAsUser (Pod Security restricted, 'Running as Non-root'), {ALLOW_HINT}",
                    None,
                )


def pss_no_privilege_escalation(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        value = (c.get("securityContext") or {}).get("allowPrivilegeEscalation")
        escalates = value is True or (value is None and not pod.partial)
        if escalates and not any(a.privileged for a in _allowances(pod, c)):
            yield (
                f"{_where(pod, c)} must set securityContext.allowPrivilegeEscalation: false "
                "(Pod Security restricted, 'Privilege Escalation')",
                None,
            )


def pss_drop_all_capabilities(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        allowed = {"NET_BIND_SERVICE"}.union(*(a.capabilities for a in _allowances(pod, c)))
        drop = [str(x).upper() for x in caps.get("drop") or []]
        added = [str(x).upper() for x in caps.get("add") or []]
        extra = [x for x in added if x not in allowed and "ALL" not in allowed]
        if "ALL" not in drop and "ALL" not in allowed and not (pod.partial and "drop" not in caps):
            yield (
                f"{_where(pod, c)} must drop ALL capabilities (securityContext.capabilities.drop: [ALL]; "
                "Pod Security restricted, 'Capabilities')",
                None,
            )
        if extra:
            yield (
                f"{_where(pod, c)} adds capabilities {', '.join(extra)}: restricted allows only NET_BIND_SERVICE; "
                f"drop them, {ALLOW_HINT}",
                None,
            )


def pss_seccomp(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        profile = (_sc(pod, c, "seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost") and not (pod.partial and profile is None):
            yield (
                f"{_where(pod, c)} has seccompProfile {profile or 'unset'}: set the pod's "
                "securityContext.seccompProfile.type: RuntimeDefault (Pod Security restricted, 'Seccomp')",
                None,
            )


def pss_host_and_privileged(res: Res) -> Iterator[Finding]:
    for pod in pods(res):
        host = [k for k in ("hostNetwork", "hostPID", "hostIPC") if pod.spec.get(k)]
        containers = pod.containers()
        if host and not all(any(a.host_network for a in _allowances(pod, c)) for c in containers):
            yield (f"{pod.label} shares the host's namespaces ({', '.join(host)}): remove them, {ALLOW_HINT}", None)
        for c in containers:
            privileged = (c.get("securityContext") or {}).get("privileged") is True
            if privileged and not any(a.privileged for a in _allowances(pod, c)):
                yield (f"{_where(pod, c)} is privileged (Pod Security baseline): remove it, {ALLOW_HINT}", None)
            if any(p.get("hostPort") for p in c.get("ports") or []):
                yield (f"{_where(pod, c)} binds a hostPort (Pod Security baseline): use a Service", None)


def read_only_root(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        value = (c.get("securityContext") or {}).get("readOnlyRootFilesystem")
        read_only = value is True or (pod.partial and value is None)
        if not read_only and not any(a.writable_root for a in _allowances(pod, c)):
            yield (
                f"{_where(pod, c)} may write to its root filesystem: set securityContext.readOnlyRootFilesystem: "
                f"true and mount an emptyDir where it writes (/tmp, HOME), {ALLOW_HINT}",
                None,
            )


RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def pss_volume_types(res: Res) -> Iterator[Finding]:
    for pod in pods(res):
        containers = pod.containers()
        for volume in pod.spec.get("volumes") or []:
            kinds = [k for k in volume if k != "name"]
            for kind in kinds:
                if kind in RESTRICTED_VOLUMES:
                    continue
                path = str((volume.get(kind) or {}).get("path", "")) if kind == "hostPath" else ""
                users = [
                    c
                    for c in containers
                    if any(m.get("name") == volume.get("name") for m in c.get("volumeMounts") or [])
                ]
                allowances = [a for c in users or containers for a in _allowances(pod, c)]
                if kind == "hostPath" and any(fnmatch.fnmatchcase(path, p) for a in allowances for p in a.host_paths):
                    continue
                what = f"hostPath {path}" if kind == "hostPath" else kind
                yield (
                    f"{pod.label} mounts volume {volume.get('name')} of type {what}: Pod Security restricted "
                    f"allows only {', '.join(sorted(RESTRICTED_VOLUMES))}; {ALLOW_HINT}",
                    None,
                )


EBS_PROVISIONERS = ("ebs.csi.aws.com", "ebs.csi.eks.amazonaws.com", "kubernetes.io/aws-ebs")
"""The EBS CSI driver, EKS Auto Mode's, and the in-tree name that CSI migration hands to the driver."""


def ebs_storage_class_encrypted(res: Res) -> Iterator[Finding]:
    """A StorageClass that provisions EBS volumes encrypts them: the driver's ``encrypted`` parameter defaults to
    false, and it reads parameter keys in any case (kubernetes-sigs/aws-ebs-csi-driver docs/parameters.md)."""
    if res.kind != "StorageClass" or res.inputs.get("provisioner") not in EBS_PROVISIONERS:
        return
    parameters = {str(k).lower(): v for k, v in (res.inputs.get("parameters") or {}).items()}
    if str(parameters.get("encrypted")).lower() != "true":
        yield (
            f"{res.label} provisions EBS volumes unencrypted (the driver's default): set parameters.encrypted: "
            '"true" (and kmsKeyId for a key of your own)',
            None,
        )


def resource_requests(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        have = resources_of(c)
        missing = [r for r in ("cpu", "memory") if r not in have and not pod.partial]
        if missing:
            yield (
                f"{_where(pod, c)} requests no {' or '.join(missing)}: every container, init containers and Jobs "
                "included, needs CPU and memory requests so the scheduler and the autoscaler can place it",
                None,
            )


_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _tag(image: str) -> str | None:
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def _images(res: Res) -> Iterator[tuple[str, str]]:
    for pod, c in _containers(res):
        image = c.get("image")
        if isinstance(image, str) and known(image):
            yield _where(pod, c), image


def image_digest(res: Res) -> Iterator[Finding]:
    for where, image in _images(res):
        if not _DIGEST.search(image) and not tag_allowed(image) and _tag(image) not in (None, "latest"):
            yield (
                f"{where} runs {image}, pinned by a mutable tag: pin it by digest (image@sha256:…), or allow-list "
                "the tag with its reason in policies/exceptions.py ALLOWED_TAGS",
                None,
            )


def no_latest(res: Res) -> Iterator[Finding]:
    for where, image in _images(res):
        if not _DIGEST.search(image) and _tag(image) in (None, "latest"):
            yield (f"{where} runs {image}, which floats with :latest: pin a version and its digest", None)
    if res.type == HELM_RELEASE:
        for path, _, node in walk(helm_values(res)):
            if isinstance(node, Mapping) and node.get("tag") == "latest" and "repository" in node:
                yield (f"{res.label} values {path}.tag is latest: pin a version", None)


def automount_token_off(res: Res) -> Iterator[Finding]:
    for pod in pods(res):
        value = pod.spec.get("automountServiceAccountToken")
        if value is True or (value is None and not pod.partial):
            yield (
                f"{pod.label} mounts a service-account token it does not need: set automountServiceAccountToken: "
                "false, or, if the pod talks to the Kubernetes API, add it to policies/exceptions.py EXCEPTIONS "
                "with that reason",
                None,
            )


INTERNET_OPT_IN = "inferstack.io/internet-facing"
"""The deliberate opt-in to face the internet: an annotation on a Service or Ingress, a tag on an AWS load balancer or
security group (``policies/rules.py``). No kit component sets it (``gateway.loadBalancer`` is ``none`` or ``internal``):
a user's own resource carries it when the user means it."""
_INTERNAL_MARKERS = {
    # Only annotations a controller of stack_rules.LB_CONTROLLERS reads: another cloud's marker (GKE's
    # networking.gke.io/load-balancer-type, Azure's azure-load-balancer-internal) is ignored on EKS and k3s,
    # whose load balancer then faces the internet.
    "service.beta.kubernetes.io/aws-load-balancer-scheme": ("internal",),
    "service.beta.kubernetes.io/aws-load-balancer-internal": ("true", "0.0.0.0/0"),
}


def _private_sources(res: Res) -> bool:
    """A Service that admits only private networks (``spec.loadBalancerSourceRanges``, enforced by kube-proxy
    for every load balancer implementation) is internal wherever its address lives."""
    import ipaddress

    ranges = (res.inputs.get("spec") or {}).get("loadBalancerSourceRanges") or []
    try:
        return bool(ranges) and all(ipaddress.ip_network(str(r)).is_private for r in ranges)
    except ValueError:
        return False


def no_internet_facing(res: Res) -> Iterator[Finding]:
    annotations = res.metadata.get("annotations") or {}
    if str(annotations.get(INTERNET_OPT_IN, "")).lower() == "true":
        return
    if res.kind == "Service" and (res.inputs.get("spec") or {}).get("type") == "LoadBalancer":
        internal = any(str(annotations.get(k)) in v for k, v in _INTERNAL_MARKERS.items()) or _private_sources(res)
        if annotations.get("service.beta.kubernetes.io/aws-load-balancer-scheme") == "internet-facing" or not internal:
            yield (
                f"{res.label} is a LoadBalancer that may face the internet: mark it internal "
                "(service.beta.kubernetes.io/aws-load-balancer-scheme: internal), or, if it is meant to, opt in "
                f'with the annotation {INTERNET_OPT_IN}: "true"',
                None,
            )
    if res.kind == "Ingress" and annotations.get("alb.ingress.kubernetes.io/scheme") == "internet-facing":
        yield (f"{res.label} asks for an internet-facing ALB without the opt-in annotation {INTERNET_OPT_IN}", None)
    if res.kind == "IngressClassParams" and (res.inputs.get("spec") or {}).get("scheme") == "internet-facing":
        # The AWS Load Balancer Controller gives every Ingress of the class this scheme, whatever its own
        # annotations say (https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/guide/ingress/ingress_class/).
        yield (
            f"{res.label} makes every ALB of its class internet-facing without the opt-in annotation {INTERNET_OPT_IN}",
            None,
        )


SECRET_NAME = re.compile(r"(?i)(passw(or)?d|secret|token|api[-_]?key|private[-_]?key|credential|auth[-_]?key)")
SECRET_VALUE = re.compile(
    r"AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----|://[^/\s:@$]*:(?!\$\()[^@\s/$]{3,}@|\bsk-[A-Za-z0-9]{20,}"
)
"""AWS access keys, PEM private keys, passwords inside URLs (``$(VAR)`` references are fine), API keys."""
SECRET_ASSIGNMENT = re.compile(
    r"(?im)^\s*[\w.-]*(passw(or)?d|secret|token|api[-_]?key)\s*[:=]\s*[\"']?"
    r"(?!\$|\{\{|<|\[secret\]|[\"']?\s*$|[0-9]+\s*$)([^\s\"'#]{4,})"
)
"""``password: hunter2`` in an embedded config file: the key ends with the secret word (so
``tokens_per_minute`` is not one), the value is a literal (not ``${VAR}``, ``$(VAR)`` or a template)."""


PULUMI_SECRET = "[secret]"
"""How a Pulumi secret input reaches a rule (``policies.model.plain``): Pulumi encrypts it in the state, but a
Kubernetes object that holds it as a plain field shows it to whoever may read the object."""


def walk(node: Any, path: str = "", key: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, nearest key, node) of ``node`` and of everything under it, maps and lists alike (a list's items keep
    the key that holds the list)."""
    yield path, key, node
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}", str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]", key)


def _decoded(value: str) -> str | None:
    """A ``binaryData`` value as text (base64 is an encoding, not a protection), or ``None`` for bytes that are
    not UTF-8 text (an image, a compressed archive)."""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _configmap_entries(res: Res) -> Iterator[tuple[str, str, str]]:
    """(key, how a message names it, its text) for ``data`` and ``binaryData``. A ``binaryData`` value is scanned
    as the text it decodes to; bytes that are not text keep their base64, which only the key's name can judge."""
    for key, value in (res.inputs.get("data") or {}).items():
        if isinstance(value, str) and known(value):
            yield str(key), f"key {key}", value
    for key, value in (res.inputs.get("binaryData") or {}).items():
        if isinstance(value, str) and known(value):
            yield str(key), f"binaryData key {key}", _decoded(value) or value


def no_secret_in_configmap(res: Res) -> Iterator[Finding]:
    if res.kind != "ConfigMap":
        return
    for key, where, value in _configmap_entries(res):
        if value == PULUMI_SECRET:
            yield (
                f"{res.label} {where} holds a Pulumi secret, which the cluster keeps in plain text in a ConfigMap: "
                "move it to a Secret and reference it",
                None,
            )
        elif SECRET_NAME.search(key) and value.strip():
            yield (f"{res.label} {where} holds what its name says is a secret: move it to a Secret", None)
        elif SECRET_VALUE.search(value) or SECRET_ASSIGNMENT.search(value):
            yield (
                f"{res.label} {where} contains a credential in plain text: move it to a Secret and reference it",
                None,
            )


SECRET_FLAG = re.compile(r"(?i)^--?[\w-]*(passw(or)?d|secret|token|api[-_]?key|private[-_]?key|credential)$")
"""A command-line flag that takes a secret (``--api-key``, ``--hf-token``), not one that merely mentions
tokens (``--max-num-batched-tokens``, ``--tokenizer``)."""


def no_secret_in_env(res: Res) -> Iterator[Finding]:
    for pod, c in _containers(res):
        words = argv(c)
        for i, word in enumerate(words):
            flag, _, inline = word.partition("=")
            value = inline or (words[i + 1] if i + 1 < len(words) else "")
            # A Pulumi secret as a word of its own is found at that word (below), not again at the flag before it.
            literal = bool(value) and value != PULUMI_SECRET and not value.startswith(("$", "-")) and known(value)
            if word == PULUMI_SECRET:
                previous = words[i - 1] if i else ""
                flag = previous if previous.startswith("-") and "=" not in previous else f"argument {i}"
            elif (
                inline != PULUMI_SECRET and not (SECRET_FLAG.match(flag) and literal) and not SECRET_VALUE.search(word)
            ):
                continue
            yield (
                f"{_where(pod, c)} passes a secret on its command line ({flag}), where the pod spec shows it in "
                "plain text: read it from an env var set by valueFrom.secretKeyRef, referenced as $(VAR)",
                None,
            )
        for e in c.get("env") or []:
            value = e.get("value")
            if not isinstance(value, str) or not value or not known(value):
                continue
            if (
                value == PULUMI_SECRET
                or (SECRET_NAME.search(str(e.get("name"))) and "$(" not in value)
                or SECRET_VALUE.search(value)
            ):
                yield (
                    f"{_where(pod, c)} env {e.get('name')} carries a secret value in plain text: use "
                    "valueFrom.secretKeyRef",
                    None,
                )


_RANGE = re.compile(r"[\^~*><=|xX ]|\.x$")


def helm_chart_pinned(res: Res) -> Iterator[Finding]:
    if not res.type.startswith("kubernetes:helm.sh/"):
        return
    version = res.inputs.get("version")
    if not known(version) or not str(version).strip():
        yield (f"{res.label} has no chart version: pin one (components/catalog/charts.py)", None)
    elif _RANGE.search(str(version).lstrip("v")):
        yield (f"{res.label} pins the range {version!r}: pin one exact chart version", None)


DEFAULT_PASSWORDS = frozenset({"admin", "password", "prom-operator", "changeme", "changeit", "root", "secret"})


def _get(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


CHART_DEFAULT_CREDENTIALS: tuple[tuple[str, str, str, str], ...] = (
    # (chart, values path of the password, the chart's default, values path that replaces it with a Secret)
    # kube-prometheus-stack's values.yaml sets grafana.adminPassword: prom-operator.
    ("kube-prometheus-stack", "grafana.adminPassword", "prom-operator", "grafana.admin.existingSecret"),
)


def no_default_admin_credentials(res: Res) -> Iterator[Finding]:
    if res.type != HELM_RELEASE:
        return
    values = helm_values(res)
    chart = chart_name(res)
    for name, path, default, override in CHART_DEFAULT_CREDENTIALS:
        if chart != name or _get(values, override):
            continue
        value = _get(values, path)
        if value is None or str(value) in DEFAULT_PASSWORDS:
            yield (
                f"{res.label} keeps the chart's default admin password ({path}: {value or default!r}): set "
                f"{override} to a Secret the stack generates",
                None,
            )
    reported = {path for name, path, _, _ in CHART_DEFAULT_CREDENTIALS if name == chart}
    for path, _, node in walk(values):
        key = path.rsplit(".", 1)[-1]
        if path.lstrip(".") in reported:
            continue
        if re.search(r"(?i)password$", key) and isinstance(node, str) and node in DEFAULT_PASSWORDS:
            yield (f"{res.label} values {path.lstrip('.')} is a well-known default password: generate one", None)


def alerts_reach_a_person(res: Res) -> Iterator[Finding]:
    """kube-prometheus-stack's Alertmanager has a receiver that sends somewhere.

    The chart's default config routes every alert to its ``null`` receiver: the rules fire and notify no one.
    """
    if res.type != HELM_RELEASE or chart_name(res) != "kube-prometheus-stack":
        return
    alertmanager = helm_values(res).get("alertmanager") or {}
    if alertmanager.get("enabled") is False:
        return  # no Alertmanager here: Prometheus's alertingEndpoints name one elsewhere, or nothing alerts at all
    receivers = (alertmanager.get("config") or {}).get("receivers") or []
    sends = [r for r in receivers if any(k.endswith("_configs") and v for k, v in r.items())]
    if not sends:
        yield (
            f"{res.label}: Alertmanager keeps the chart's null receiver, so every alert fires and notifies no one: "
            "set observability.alerting (pagerdutyRoutingKeySecret, slackWebhookSecret or webhookUrlSecret)",
            None,
        )
