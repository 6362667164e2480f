"""Typed sections of the environment config, shared by the stacks and the components.

Each section is a frozen pydantic model. Keys are camelCase in the stack files
(``instanceType``) and snake_case in Python (``instance_type``). Every field has a
default that encodes the low-latency profile, or it is required for a stated reason.
Cross-section rules (a pool's zone must be one of the network's zones) live in
``stacks.environment``; rules about one section live here.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import datetime
from ipaddress import IPv4Network, ip_network
from typing import Annotated, Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from components.catalog.images import KIT_IMAGES
from components.catalog.instances import INSTANCES, SYSTEM_FAMILIES, SYSTEM_INSTANCES, SystemInstanceSpec


def _str_input(value: Any) -> Any:
    """A ``pulumi.Input[str]`` as a component argument: a string, an Output or an awaitable, never ``None``.

    An unset config value is ``None`` (``pulumi.Config().get_secret("kubeconfig")``): passed on, it became a resource
    input that is simply absent, and a Kubernetes provider without a kubeconfig uses the deployer's ambient
    ``~/.kube/config``. A field that may be unset says so (``StrInput | None``)."""
    import inspect

    import pulumi

    if isinstance(value, str | pulumi.Output) or inspect.isawaitable(value):
        return value
    raise PydanticCustomError(
        "str_input",
        "expected a string or a pulumi.Output[str], got {got}",
        {"got": "None" if value is None else type(value).__name__},
    )


StrInput = Annotated[Any, AfterValidator(_str_input)]
"""A string or a ``pulumi.Output[str]`` (``pulumi.Input[str]``): pydantic cannot validate an Output's value, so it
checks only that the argument is one of these."""


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _namespace_arg(value: str) -> str:
    """A component's namespace argument: one Kubernetes would take, or an error naming what it allows and the fix."""
    if not _NAMESPACE.fullmatch(value) or len(value) > 63:
        suggestion = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-") or "ml"
        raise ValueError(
            f"{value!r} is not a namespace name; allowed: a DNS label (lowercase letters, digits and '-', starting and "
            f"ending with a letter or digit, at most 63 characters); fix: e.g. {suggestion!r}"
        )
    return value


ComponentNamespace = Annotated[str, AfterValidator(_namespace_arg)]
"""A namespace a component's arguments name (where it writes objects, or whose pods it admits): refused when the
component is built, where Kubernetes would refuse it at ``pulumi up`` (a ``pulumi.Output`` is refused as well: the
name is needed when the program runs)."""

PATTERN_HELP: dict[str, tuple[str, str]] = {}
"""Each ``described`` pattern → (what it allows, how to fix a value that misses it): a config error says these
instead of the regex (``stacks.environment``)."""


def described(pattern: str, *, allowed: str, fix: str, **field: Any) -> Any:
    """``Field(pattern=...)`` that also says, in words, what the pattern allows and how to write a matching value.

    Every field (and every type) that uses the pattern gets the words in its config errors."""
    PATTERN_HELP[pattern] = (allowed, fix)
    return Field(pattern=pattern, description=allowed, json_schema_extra={"fix": fix}, **field)


DnsLabel = Annotated[
    str,
    described(
        r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?$",
        allowed="a DNS label: lowercase letters, digits and '-', starting with a letter, ending with a letter or "
        "digit, at most 32 characters",
        fix="e.g. llama-3b",
    ),
]
KubernetesName = Annotated[
    str,
    described(
        r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        allowed="a Kubernetes object name (DNS subdomain): lowercase letters, digits, '-' and '.', starting and "
        "ending with a letter or digit, at most 253 characters",
        fix="e.g. gateway-tls, hub-ca",
    ),
]
"""The name of a Secret or ConfigMap the stack reads (``gateway.tlsSecret``, ``hub.caConfigMap``)."""
SecretConfigName = Annotated[
    str,
    described(
        r"^[a-zA-Z][a-zA-Z0-9_.-]*$",
        allowed="a config key name: a letter, then letters, digits, '_', '.' or '-'",
        fix="e.g. kubeconfig (set it with pulumi config set --secret inferstack:kubeconfig)",
    ),
]
"""The name of a secret Pulumi config value (``inferstack:<name>``)."""
EndpointUrl = Annotated[
    str,
    described(
        r"^https?://[^\s/]+(:\d+)?/?$",
        allowed="an http(s) endpoint URL without a path",
        fix="e.g. https://minio.storage.example:9000",
    ),
]
OtlpEndpoint = Annotated[
    str,
    described(
        r"^(https?://)?[A-Za-z0-9.-]+(:\d+)?/?$",
        allowed="an OTLP/gRPC endpoint: host:port, optionally after http:// or https://",
        fix="e.g. tempo-distributor.tracing:4317",
    ),
]
BucketName = Annotated[
    str,
    described(
        r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
        allowed="an S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a "
        "letter or digit",
        fix="e.g. models",
    ),
]
LABEL_NAME = r"[A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?"
"""A label's name, and a non-empty label value: 1 to 63 characters (Kubernetes "Labels and Selectors")."""
LabelKey = Annotated[
    str,
    described(
        rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{LABEL_NAME}$",
        allowed="a Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name of 1 to 63 letters, "
        "digits, '-', '_' and '.', starting and ending with a letter or digit",
        fix="e.g. nvidia.com/gpu.product",
    ),
]
LabelValue = Annotated[
    str,
    described(
        rf"^({LABEL_NAME})?$",
        allowed="a Kubernetes label value: empty, or 1 to 63 letters, digits, '-', '_' and '.', starting and "
        "ending with a letter or digit",
        fix="e.g. NVIDIA-H100-80GB-HBM3",
    ),
]


def _openai_base_url(value: str) -> str:
    """A gateway's OpenAI base URL, ``/v1`` included, as the kit renders every upstream (``<server>/v1``): the hub is
    one more upstream of the sending side's gateway. That gateway appends ``/chat/completions`` to it and dials only
    its host and port (``inferstack_gateway.upstream``, ``http_client.Target``): a query or fragment would swallow
    the appended path, and a user name or password would be dropped (the hub's key is ``hub.apiKeySecret``)."""
    allowed = "http(s)://<host>[:port][/path]/v1, e.g. https://gateway.dc1.example.com/v1"
    try:
        parts = urlsplit(value)
        dialable = bool(parts.hostname) and parts.port != 0
    except ValueError:  # an unclosed IPv6 bracket, a port that is not a number or is over 65535
        dialable = False
    # Lowercase schemes only: the gateway's own config check is case-sensitive (``inferstack_gateway.config``).
    if not dialable or not value.startswith(("http://", "https://")) or re.search(r"\s", value):
        raise config_error(
            "not an http(s) URL with a host and a port from 1 to 65535",
            allowed=allowed,
            fix="write the gateway's URL with the /v1 path",
        )
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    fix = f"write {base if base.endswith('/v1') else base + '/v1'!r}"
    if parts.username is not None or parts.password is not None:
        raise config_error(
            "a user name or password in the URL, which the gateway drops and the ConfigMap would hold in clear",
            allowed=allowed,
            fix="remove it from the URL; the hub's key goes in a secret config value named by hub.apiKeySecret",
        )
    if parts.query or parts.fragment:
        raise config_error(
            f"a {'query' if parts.query else 'fragment'}, after which the gateway would append /chat/completions",
            allowed=allowed,
            fix=fix,
        )
    if not parts.path.endswith("/v1"):
        raise config_error(
            "not an OpenAI base URL ending in /v1",
            allowed=allowed,
            fix=fix,
        )
    return value


OpenAiBaseUrl = Annotated[str, AfterValidator(_openai_base_url)]
"""The hub gateway's URL as both sides name it (``hub.url``, ``gateway.hubUrl``): scheme, host, ``/v1``."""


@runtime_checkable
class ServingPool(Protocol):
    """What the serving layer needs of a GPU pool on any tier: cloud instance types and on-prem servers alike."""

    @property
    def name(self) -> str: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def spec(self) -> Any: ...
    @property
    def node_labels(self) -> dict[str, str]: ...
    @property
    def efa_enabled(self) -> bool: ...


class Spec(BaseModel):
    """Base of every config section: frozen, camelCase keys, unknown keys refused."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        validate_default=True,
        # YAML reads .nan and .inf as floats: no count, size or latency is either, and pydantic would pass .inf on.
        allow_inf_nan=False,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_true_or_false_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """``replicas: true``: pydantic reads true as 1 and false as 0 in a number field; a stack file means neither."""
        if isinstance(value, bool) and info.field_name is not None:
            kinds = _scalar_types(cls.model_fields[info.field_name].annotation)
            if bool not in kinds and (int in kinds or float in kinds):
                whole = float not in kinds
                raise config_error(
                    "true or false is not a number",
                    allowed="a whole number" if whole else "a number",
                    fix=f"write the number itself, e.g. {2 if whole else 2.5}",
                )
        return value


def _scalar_types(annotation: Any) -> set[Any]:
    """The types a field's annotation admits, through ``X | None`` and ``Annotated`` (not into containers)."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, Annotated):
        args = typing.get_args(annotation)
        return set().union(*(_scalar_types(a) for a in (args[:1] if origin is Annotated else args)))
    return {annotation}


class Args(BaseModel):
    """Base of every component's ``XArgs``: frozen, unknown fields refused, Pulumi inputs allowed."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)


def config_error(message: str, *, allowed: str, fix: str) -> PydanticCustomError:
    """A validation error that carries what is allowed and how to fix it."""
    return PydanticCustomError("inferstack", message, {"allowed": allowed, "fix": fix})


def _repeated(items: tuple[str, ...]) -> list[str]:
    """The values ``items`` lists more than once, sorted."""
    return sorted({item for item in items if items.count(item) > 1})


def did_you_mean(value: str, choices: list[str]) -> str:
    """The closest of ``choices``, whatever the case (``l4`` is ``L4``), as a parenthesis; empty when none is close."""
    folded = {choice.casefold(): choice for choice in choices}
    close = difflib.get_close_matches(value.casefold(), list(folded), n=1)
    return f" (did you mean {folded[close[0]]!r}?)" if close else ""


def catalog_member(value: str, catalog: Mapping[str, Any], *, catalog_name: str, item: str) -> str:
    """``value`` if it is a key of ``catalog``, else an error listing the catalog with a did-you-mean."""
    if value not in catalog:
        raise config_error(
            f"not in the {catalog_name} catalog",
            allowed=", ".join(catalog),
            fix=f"use a catalog {item}{did_you_mean(value, list(catalog))}",
        )
    return value


def _cidr_text(value: Any) -> Any:
    """A CIDR as the stack file writes it: pydantic would read the number 123 as the host 0.0.0.123/32."""
    if isinstance(value, int | float | bool):
        raise config_error(
            "not a CIDR string",
            allowed="an IPv4 CIDR such as 203.0.113.0/24",
            fix="write the network address with its prefix length, e.g. 203.0.113.0/24",
        )
    return value


Cidr = Annotated[IPv4Network, BeforeValidator(_cidr_text)]
"""An IPv4 network written as ``a.b.c.d/n``."""

WIDEST_ALLOWLIST_PREFIX = 8
"""An allow-list entry wider than a /8 reaches past any one organisation's network into the internet (no private
range is wider than 10.0.0.0/8): ``[0.0.0.0/1, 128.0.0.0/1]`` is ``0.0.0.0/0`` in two halves."""


def _too_wide(cidrs: tuple[IPv4Network, ...]) -> IPv4Network | None:
    return next((c for c in cidrs if c.prefixlen < WIDEST_ALLOWLIST_PREFIX), None)


class NetworkSpec(Spec):
    """The VPC: one private and one public subnet per availability zone."""

    cidr: Cidr = IPv4Network("10.0.0.0/16")
    """VPC CIDR; private subnets get the larger share, since every pod takes a VPC IP."""
    availability_zones: tuple[str, ...] = ()
    """Two or three distinct zones: the EKS control plane requires subnets in two, and the subnet layout
    (``components.aws.network.subnet_cidrs``) carves a VPC into four quarters, three of them private."""
    nat_gateways: Literal["single", "per-zone"] = "per-zone"
    """``per-zone`` keeps a zone's egress alive when another zone fails."""

    @field_validator("availability_zones")
    @classmethod
    def _two_or_three_zones(cls, zones: tuple[str, ...]) -> tuple[str, ...]:
        repeated = _repeated(zones)
        if repeated or not 2 <= len(zones) <= 3:
            raise config_error(
                f"{repeated[0]!r} listed twice" if repeated else f"{len(zones)} zones",
                allowed="2 to 3 distinct zones of the region (EKS needs two; the subnet layout has room for three)",
                fix="list two or three different zones, e.g. [us-east-1a, us-east-1b, us-east-1c]",
            )
        return zones


ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]


class ClusterSpec(Spec):
    """The EKS control plane."""

    kubernetes_version: str = described(
        r"^1\.\d{2}$", allowed="a Kubernetes minor version, 1.<minor>", fix="e.g. 1.33", default="1.33"
    )
    endpoint_public_access_cidrs: tuple[Cidr, ...] = ()
    """Empty: the API endpoint is private only. A public endpoint needs an explicit allowlist."""
    admin_role_arns: tuple[
        Annotated[
            str,
            described(
                r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$",
                allowed="an IAM role ARN: arn:aws:iam::<12-digit account>:role/<name>",
                fix="e.g. arn:aws:iam::111122223333:role/platform-admins",
            ),
        ],
        ...,
    ] = ()
    """IAM roles given cluster-admin through access entries (API authentication mode)."""
    deployer_cidrs: tuple[Cidr, ...] = ()
    """Networks allowed to reach the private API endpoint on 443 (the runner, VPN or bastion that runs
    ``pulumi up``). The cluster security group admits only itself otherwise."""
    deployer_security_group_ids: tuple[
        Annotated[
            str,
            described(
                r"^sg-[0-9a-f]{8,17}$",
                allowed="a security group id: sg- and 8 to 17 lowercase hex digits",
                fix="e.g. sg-0123456789abcdef0",
            ),
        ],
        ...,
    ] = ()
    """Security groups (e.g. a CI runner's) allowed to reach the private API endpoint on 443."""
    ami_release_version: str | None = described(
        r"^1\.\d{2}\.\d+-\d{8}$",
        allowed="an EKS AL2023 AMI release: <Kubernetes patch version>-<build date YYYYMMDD>",
        fix="e.g. 1.33.5-20251120",
        default=None,
    )
    """Required: the EKS AL2023 AMI release every node runs (``1.33.5-20251120``: Kubernetes patch version
    and build date). Pinned so a node roll is a reviewed config change, never a side effect of ``up``."""
    log_types: tuple[ControlPlaneLog, ...] = ("api", "audit", "authenticator", "controllerManager", "scheduler")

    @field_validator("ami_release_version")
    @classmethod
    def _real_build_date(cls, release: str | None) -> str | None:
        # The date names the AMI (amazon-eks-node-al2023-x86_64-nvidia-<version>-v<date>) and Karpenter's alias
        # (al2023@v<date>): a date no build has resolves to no image at `pulumi up`.
        if release is None:
            return release
        date = release.rsplit("-", 1)[1]
        try:
            datetime.strptime(date, "%Y%m%d")
        except ValueError:
            raise config_error(
                f"{date} is not a date",
                allowed="an EKS AL2023 AMI release: <Kubernetes patch version>-<build date YYYYMMDD>",
                fix="copy the release from the AMI's release notes or SSM (e.g. 1.33.5-20251120)",
            ) from None
        return release

    @field_validator("endpoint_public_access_cidrs")
    @classmethod
    def _no_open_world(cls, cidrs: tuple[IPv4Network, ...]) -> tuple[IPv4Network, ...]:
        wide = _too_wide(cidrs)
        if wide is not None:
            raise config_error(
                f"{wide} opens the Kubernetes API to the internet",
                allowed=f"specific CIDRs, /{WIDEST_ALLOWLIST_PREFIX} or longer, such as your office or VPN range "
                "(e.g. 203.0.113.0/24)",
                fix="list only the networks that run `pulumi up` or kubectl, or leave it empty for a private endpoint",
            )
        return cidrs

    @field_validator("deployer_cidrs")
    @classmethod
    def _no_open_deployer(cls, cidrs: tuple[IPv4Network, ...]) -> tuple[IPv4Network, ...]:
        wide = _too_wide(cidrs)
        if wide is not None:
            raise config_error(
                f"{wide} admits {'every network' if wide.prefixlen == 0 else 'networks of the internet'} to the "
                "Kubernetes API",
                allowed=f"the runner's, VPN's or bastion's CIDR, /{WIDEST_ALLOWLIST_PREFIX} or longer "
                "(e.g. 10.0.0.0/16 for runners inside the VPC)",
                fix="list only the networks that run `pulumi up` or kubectl",
            )
        return cidrs

    @field_validator("admin_role_arns", "deployer_cidrs", "deployer_security_group_ids")
    @classmethod
    def _each_once(cls, items: tuple[Any, ...]) -> tuple[Any, ...]:
        # Each entry becomes one access entry or ingress rule named after it (components.aws.eks_cluster): EKS keeps one
        # access entry per role and a security group one rule per source, so a repeat could never be created.
        repeated = _repeated(tuple(str(item) for item in items))
        if repeated:
            raise config_error(
                f"{repeated[0]!r} listed twice",
                allowed="each entry once",
                fix=f"remove the second {repeated[0]}",
            )
        return items

    @property
    def ami_release_date(self) -> str | None:
        """``20251120`` of ``1.33.5-20251120``: the same build as Karpenter's alias ``al2023@v20251120``."""
        return self.ami_release_version.rsplit("-", 1)[1] if self.ami_release_version else None


GP3_MAX_GIB = 16_384
"""The largest root volume a node's template may ask for: the EC2 API's launch-template block device
(``LaunchTemplateEbsBlockDeviceRequest.VolumeSize``: "gp2 and gp3: 1 - 16,384 GiB"), which EC2 refuses beyond at
launch. ``CreateVolume`` takes gp3 to 65,536 GiB, and Karpenter's EC2NodeClass to 59,000Gi (its ``volumeSize``
pattern, CRD v1.14.1): the launch template's bound is the one every pool passes."""


class ScalingSpec(Spec):
    """Node-count bounds shared by the system pool and the GPU pools."""

    min_size: int = Field(default=0, ge=0)
    max_size: int = Field(default=1, ge=1)
    desired_size: int | None = Field(default=None, ge=0)
    """A managed node group's node count; defaults to ``min_size``. No autoscaler runs on managed node groups, so this
    is their size: change it and ``pulumi up`` resizes the group (a Karpenter pool sizes itself up to ``max_size``)."""

    @property
    def initial_size(self) -> int:
        return self.min_size if self.desired_size is None else self.desired_size


class SystemPoolSpec(ScalingSpec):
    """CPU nodes for controllers, the gateway, the cache and observability."""

    instance_type: str = "m7i.2xlarge"
    """One of the system catalog's x86_64 CPU types (``SYSTEM_INSTANCES``): the nodes boot ``AL2023_x86_64_STANDARD``,
    and the in-cluster cache's memory is checked against the type's."""
    min_size: int = Field(default=2, ge=1)
    max_size: int = Field(default=6, ge=1)
    root_volume_gib: int = Field(default=100, ge=20, le=GP3_MAX_GIB)

    @field_validator("instance_type")
    @classmethod
    def _known_system_type(cls, value: str) -> str:
        if value in SYSTEM_INSTANCES:
            return value
        close = did_you_mean(value, list(SYSTEM_INSTANCES))
        raise config_error(
            "a GPU instance type: GPU nodes are gpuPools[]" if value in INSTANCES else "not in the system catalog",
            allowed=f"an x86_64 CPU type (the nodes boot AL2023_x86_64_STANDARD) of the families "
            f"{', '.join(SYSTEM_FAMILIES)}, sizes large to 16xlarge",
            fix=f"use a catalog type{close or ', e.g. m7i.2xlarge'}, or add its family to "
            "components/catalog/instances.py:SYSTEM_FAMILIES",
        )

    @property
    def spec(self) -> SystemInstanceSpec:
        return SYSTEM_INSTANCES[self.instance_type]


CapacityType = Literal["on-demand", "spot", "odcr", "capacity-block"]


class CapacitySpec(Spec):
    """Where a GPU pool's instances come from."""

    type: CapacityType = "on-demand"
    """``odcr``: an On-Demand Capacity Reservation; ``capacity-block``: EC2 Capacity Blocks for ML."""
    reservation_id: str | None = described(
        r"^cr-[0-9a-f]{8,17}$",
        allowed="a capacity reservation id: cr- and 8 to 17 lowercase hex digits",
        fix="e.g. cr-0123456789abcdef0",
        default=None,
    )
    """The ``cr-…`` id; required for ``odcr`` and ``capacity-block``."""
    on_demand_fallback: bool = False
    """Karpenter pools with a reservation: launch on-demand when the reservation is full or not active.
    Off: the pool only ever runs on the reservation (the cost is fixed and known)."""

    @property
    def reserved(self) -> bool:
        return self.type in ("odcr", "capacity-block")


class GpuPoolSpec(ScalingSpec):
    """One GPU node pool: one instance type, one zone when EFA is on."""

    name: DnsLabel
    """Required: it names the node group, its label and the models' pool reference."""
    instance_type: str
    """Required: the GPU is the pool's whole point. One of the catalog's types."""
    zone: str | None = None
    """Defaults to the network's first zone. EFA pools live in one zone (placement group)."""
    efa: bool | None = None
    """Defaults to on for instance types that have EFA."""
    placement_group: bool | None = None
    """Cluster placement group. Defaults to on with EFA, off with a reservation (it may conflict)."""
    capacity: CapacitySpec = CapacitySpec()
    provisioner: Literal["managed", "karpenter"] = "managed"
    """``managed``: an EKS managed node group. ``karpenter``: a Karpenter NodePool (scales to zero fast)."""
    root_volume_gib: int = Field(default=200, ge=50, le=GP3_MAX_GIB)
    """Root gp3 volume. Images and model caches go to the NVMe RAID0 array, not here."""

    @field_validator("instance_type")
    @classmethod
    def _known_instance_type(cls, value: str) -> str:
        return catalog_member(value, INSTANCES, catalog_name="GPU", item="instance type")

    @property
    def spec(self) -> Any:
        """The catalog row (``components.catalog.instances.InstanceSpec``)."""
        return INSTANCES[self.instance_type]

    @property
    def efa_enabled(self) -> bool:
        return self.spec.efa if self.efa is None else self.efa

    @property
    def node_labels(self) -> dict[str, str]:
        """The label the kit gives this pool's nodes and the serving pods select."""
        from components.kube.labels import POOL_LABEL

        return {POOL_LABEL: self.name}

    @property
    def placement_group_enabled(self) -> bool:
        if self.placement_group is not None:
            return self.placement_group
        # terraform-aws-eks #3730: a forced cluster placement group conflicts with ODCRs and
        # Capacity Blocks that were not created in that group (insufficient capacity).
        return self.efa_enabled and not self.capacity.reserved


class ModelStoreSpec(Spec):
    """S3 bucket for weights and engines, and ECR repositories for the kit's images."""

    protect: bool = True
    """Protect the bucket from deletion by ``pulumi destroy``."""
    force_destroy: bool = False
    """Allow deleting a non-empty bucket. Keep off outside throwaway stacks."""
    image_repositories: tuple[DnsLabel, ...] = KIT_IMAGES
    """ECR repositories to create: the kit's images (``gateway``, ``model-loader``, which the stack deploys from
    them) and any of your own."""

    @field_validator("image_repositories")
    @classmethod
    def _kit_images_once(cls, repos: tuple[str, ...]) -> tuple[str, ...]:
        missing = [r for r in KIT_IMAGES if r not in repos]
        repeated = _repeated(repos)
        if missing or repeated:
            raise config_error(
                f"{missing[0]!r} missing" if missing else f"{repeated[0]!r} listed twice",
                allowed=f"distinct repository names including {', '.join(KIT_IMAGES)} (the stack deploys those images)",
                fix=f"list each repository once and keep {' and '.join(KIT_IMAGES)}",
            )
        return repos


class S3CompatibleStoreSpec(Spec):
    """Where weights and engines live: an S3-compatible endpoint (MinIO, Ceph RGW) the model loader reads.

    Credentials are secret config values, ``inferstack:modelStoreAccessKeyId`` and
    ``inferstack:modelStoreSecretAccessKey``, written to a Kubernetes Secret the loader reads.
    """

    endpoint: EndpointUrl
    """Required: the endpoint URL, e.g. ``https://minio.storage.example:9000``."""
    bucket: BucketName
    """Required: checkpoints live under ``<model id>/hf``, engines under ``<model id>/trtllm/``, GGUF files
    under ``<model id>/gguf/``."""
    region: str = "us-east-1"
    """Signing region the endpoint expects (MinIO's default is us-east-1)."""


class SloSpec(Spec):
    """Latency targets for one model. They size tensor parallelism and drive the SLO alerts."""

    ttft_p99_ms: float = Field(default=100, gt=0)
    """Time to first token, p99 (interactive chat: under 100 ms)."""
    itl_p99_ms: float = Field(default=20, gt=0)
    """Inter-token latency, p99: the decode roofline must be under it."""


class AutoscalingSpec(Spec):
    """Pod autoscaling on queue depth (KEDA). Warm by default: at least one replica stays up."""

    enabled: bool = True
    """Off: the model keeps exactly ``replicas`` (a deliberate fixed size)."""
    max_replicas: int | None = Field(default=None, ge=1)
    """Defaults to 4 x ``replicas`` (at least 2)."""
    queue_depth: int | None = Field(default=None, ge=1)
    """Waiting requests per replica before one is added; defaults to the latency profile's."""
    scale_to_zero: bool = False
    """Let an idle model go to zero replicas. Its next request waits for a cold start (minutes)."""


class RemoteWriteSpec(Spec):
    """Forward metrics to another Prometheus (kube-prometheus-stack ``prometheus.prometheusSpec.remoteWrite``)."""

    url: str = described(
        r"^https?://[^\s]+$", allowed="an http(s) URL", fix="e.g. https://prometheus.dc1.example.com/api/v1/write"
    )
    """Required: the receiver, e.g. the hub Prometheus's ``/api/v1/write`` (its remote-write receiver enabled)."""
    ca_config_map: KubernetesName | None = None
    """A ConfigMap in Prometheus's namespace (``monitoring``) holding the PEM bundle of the private CA the receiver's
    HTTPS certificate chains to (``tlsConfig.ca.configMap``). Unset: the system's trust store."""
    ca_key: str = Field(default="ca.crt", pattern=r"^[-._a-zA-Z0-9]+$")
    """The key of ``caConfigMap`` that holds the PEM bundle."""
    username: str | None = Field(default=None, min_length=1, max_length=256)
    """HTTP basic auth user (``basicAuth``), for a receiver behind an authenticating proxy or a hosted one (Mimir,
    Grafana Cloud); its password is ``passwordSecret``."""
    password_secret: SecretConfigName | None = None
    """With ``username``: the secret config value holding the password."""
    bearer_token_secret: SecretConfigName | None = None
    """Instead of basic auth: the secret config value holding a bearer token (``authorization``)."""
    forward: Literal["dashboards", "all"] = "dashboards"
    """What leaves the site: ``dashboards``, the series the kit's dashboards read and the site's alerts (``ALERTS``),
    so the hub draws every site with the same dashboards and lists what fires where; ``all``, every sample the site's
    Prometheus stores (node, kubelet and cAdvisor series included: many times the volume, and as many more series
    on the hub per site)."""
    extra_metrics: list[str] = Field(default_factory=list, max_length=64)
    """With ``forward: dashboards``: more metric names to forward, each a name or a regular expression (RE2) that
    must match the whole name, e.g. ``node_load1`` or ``node_network_.*``."""

    @field_validator("extra_metrics")
    @classmethod
    def _metric_patterns(cls, patterns: list[str]) -> list[str]:
        import re2  # Google's RE2, the syntax of Go's regexp, which Prometheus compiles relabel regexes with

        options = re2.Options()
        options.log_errors = False  # the error is in the message below, not on stderr
        for pattern in patterns:
            try:
                re2.compile(pattern, options)
                why = "" if pattern.strip() and "\n" not in pattern else ": empty, or more than one line"
            except re2.error as exc:
                why = f": {exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc}"
            if why:
                raise config_error(
                    f"{pattern!r} is not a metric name or an RE2 regular expression{why}",
                    allowed="metric names or RE2 regular expressions matched against the whole name (RE2 has no "
                    "lookaround and no backreferences)",
                    fix="e.g. node_load1 or node_network_.*",
                )
        return patterns

    @model_validator(mode="after")
    def _credentials_over_tls(self) -> RemoteWriteSpec:
        if (self.username is None) != (self.password_secret is None):
            raise config_error(
                "basic auth needs both username and passwordSecret",
                allowed="both (basic auth), or neither",
                fix="set username and passwordSecret (the name of a secret config value) together",
            )
        if self.username is not None and self.bearer_token_secret is not None:
            raise config_error(
                "both basic auth and a bearer token",
                allowed="one way to authenticate: username + passwordSecret, or bearerTokenSecret",
                fix="keep one of them",
            )
        if self.url.startswith("http://") and (self.credential_secret() is not None or self.ca_config_map is not None):
            raise config_error(
                f"a credential or caConfigMap for a receiver reached over plain HTTP ({self.url})",
                allowed="credentials and a CA only with an https:// url, so the credential never crosses the link in "
                "clear",
                fix="write the receiver's https:// URL, or remove the credential and caConfigMap",
            )
        if self.forward == "all" and self.extra_metrics:
            raise config_error(
                "extraMetrics with forward: all",
                allowed="extraMetrics only with forward: dashboards (forward: all sends every sample already)",
                fix="remove extraMetrics, or set forward: dashboards",
            )
        return self

    def credential_secret(self) -> str | None:
        """The secret config value holding the password or the bearer token; ``None`` without authentication."""
        return self.password_secret or self.bearer_token_secret


NamespaceName = Annotated[
    str,
    described(
        # The DNS label of a PVC's name (components.onprem.specs) spelt differently: PATTERN_HELP is keyed by
        # the pattern, and an error here must say "namespace".
        r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        allowed="a Kubernetes namespace name (DNS label): lowercase letters, digits and '-', starting and ending "
        "with a letter or digit, at most 63 characters",
        fix="e.g. ingress-nginx",
    ),
]
"""A namespace the stack does not create but names (``observability.remoteWriteSources[].namespace``)."""

REMOTE_WRITE_SOURCES_EXAMPLE = (
    "e.g. remoteWriteSources: [{cidr: 10.60.0.0/16}] (the sites' network, with a LoadBalancer Service with "
    "externalTrafficPolicy: Local in front of Prometheus) or [{namespace: ingress-nginx}] (the ingress controller "
    "in front of it)"
)


class RemoteWriteSourceSpec(Spec):
    """Where the sites' remote writes reach the hub's Prometheus from: exactly one of ``cidr`` and ``namespace``.
    The Prometheus NetworkPolicy admits each on 9090 (``components.observability.observability``)."""

    cidr: str | None = None
    """The sites' network, as the Prometheus pod sees it: the client addresses a load balancer that keeps them
    (``externalTrafficPolicy: Local``) passes on. An IPv4 or IPv6 CIDR, private (the receiver takes writes without
    authentication); rendered as a NetworkPolicy ``ipBlock``."""
    namespace: NamespaceName | None = None
    """The namespace of the ingress controller or proxy in front of Prometheus; every pod there may write."""

    @field_validator("cidr", mode="before")
    @classmethod
    def _private_network(cls, value: Any) -> Any:
        if value is None:
            return value
        allowed = "a private IPv4 or IPv6 network in CIDR notation, e.g. 10.60.0.0/16 or fd00:60::/48"
        try:
            if not isinstance(value, str):
                raise ValueError("not a string")
            network = ip_network(value.strip(), strict=True)
        except ValueError as exc:
            raise config_error(
                f"not a CIDR: {exc}",
                allowed=allowed,
                fix="write the network address with its prefix length, e.g. 10.60.0.0/16 (no host bits set)",
            ) from None
        if network.is_global:
            raise config_error(
                f"{network} reaches public addresses, and the receiver takes writes without authentication",
                allowed=allowed + " (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fc00::/7 or inside "
                "them)",
                fix="list the private networks the sites reach the hub from over their VPN",
            )
        return str(network)

    @model_validator(mode="after")
    def _one_kind(self) -> RemoteWriteSourceSpec:
        if (self.cidr is None) == (self.namespace is None):
            raise config_error(
                "both cidr and namespace" if self.cidr is not None else "neither cidr nor namespace",
                allowed="exactly one of cidr (the sites' network) and namespace (the ingress controller's)",
                fix="write one per entry, e.g. {cidr: 10.60.0.0/16} or {namespace: ingress-nginx}",
            )
        return self


class AlertingSpec(Spec):
    """Where Alertmanager sends alerts (``components/observability/alerting.py``). Each ``*Secret`` key names a Pulumi
    secret config value (``pulumi config set --secret inferstack:<name> ...``); the value reaches Alertmanager as a
    mounted file, never in the chart's values."""

    pagerduty_routing_key_secret: SecretConfigName | None = None
    """Critical alerts page: a PagerDuty Events API v2 integration key."""
    slack_webhook_secret: SecretConfigName | None = None
    """Critical and warning alerts, and their resolution: a Slack incoming webhook URL."""
    slack_channel: str | None = described(
        r"^[#@][^\s]{1,80}$", allowed="a Slack channel or user: #channel or @user", fix="e.g. #inference-alerts",
        default=None,
    )  # fmt: skip
    """Overrides the webhook's own channel."""
    webhook_url_secret: SecretConfigName | None = None
    """Critical and warning alerts as Alertmanager's webhook JSON (an incident tool, a chat bridge): the URL."""

    @model_validator(mode="after")
    def _channel_needs_slack(self) -> AlertingSpec:
        if self.slack_channel is not None and self.slack_webhook_secret is None:
            raise config_error(
                "slackChannel without slackWebhookSecret",
                allowed="a channel for the Slack webhook the stack sends to",
                fix="set slackWebhookSecret to the name of the secret config value holding the webhook URL, or "
                "remove slackChannel",
            )
        return self

    def secret_names(self) -> tuple[str, ...]:
        """The secret config values these destinations read."""
        names = (self.pagerduty_routing_key_secret, self.slack_webhook_secret, self.webhook_url_secret)
        return tuple(n for n in names if n is not None)


class ObservabilitySpec(Spec):
    """Prometheus, Grafana, alerting and tracing."""

    retention_days: int = Field(default=15, ge=1)
    retention_size_gib: int | None = Field(default=None, ge=1)
    """Also delete the oldest blocks beyond this size (``retentionSize``); empty: age only."""
    remote_write: RemoteWriteSpec | None = None
    """Forward every sample to another Prometheus (an edge site to its hub)."""
    remote_write_receiver: bool = False
    """Hub side: accept the samples edge sites forward (``remoteWrite``) on ``/api/v1/write`` (kube-prometheus-stack
    ``prometheus.prometheusSpec.enableRemoteWriteReceiver``, false by default in 88.0.0). It takes writes without
    authentication: reach it only over the private link, never from a public address. Needs
    ``remoteWriteSources``."""
    remote_write_sources: tuple[RemoteWriteSourceSpec, ...] = Field(default=(), max_length=64)
    """With ``remoteWriteReceiver``, required: where the sites' writes reach Prometheus from. A NetworkPolicy then
    admits only these, the monitoring namespace and KEDA's to Prometheus's port."""
    scrape_interval_s: int = Field(default=15, ge=1, le=15)
    """At most 15 s, so a latency regression shows within one alert window."""
    storage_gib: int = Field(default=100, ge=10)
    traces_endpoint: OtlpEndpoint | None = None
    """Forward traces to this OTLP/gRPC endpoint (Tempo, Jaeger, a vendor); spans always become metrics."""
    alerting: AlertingSpec = AlertingSpec()
    """Where alerts go; none set: they fire in Alertmanager and notify no one (the plan says so)."""

    @field_validator("remote_write_sources")
    @classmethod
    def _sources_of_the_receiver(
        cls, sources: tuple[RemoteWriteSourceSpec, ...], info: ValidationInfo
    ) -> tuple[RemoteWriteSourceSpec, ...]:
        if "remote_write_receiver" not in info.data:  # a receiver flag that failed is reported on its own
            return sources
        if info.data["remote_write_receiver"] and not sources:
            raise config_error(
                "no sources with remoteWriteReceiver: true: Prometheus's NetworkPolicy would admit no site's writes",
                allowed="one or more entries, each {cidr: <private network>} or {namespace: <namespace>}",
                fix="list where the sites' writes reach Prometheus from, " + REMOTE_WRITE_SOURCES_EXAMPLE,
            )
        if sources and not info.data["remote_write_receiver"]:
            raise config_error(
                "sources without remoteWriteReceiver: true, where nothing receives writes and they would be ignored",
                allowed="remoteWriteSources only with remoteWriteReceiver: true",
                fix="remove remoteWriteSources, or set remoteWriteReceiver: true",
            )
        return sources

    def secret_names(self) -> tuple[str, ...]:
        """The secret config values this section reads: alert destinations and the remote-write credential."""
        credential = self.remote_write.credential_secret() if self.remote_write is not None else None
        return (*self.alerting.secret_names(), *((credential,) if credential else ()))

    @model_validator(mode="after")
    def _retention_fits_the_disk(self) -> ObservabilitySpec:
        if self.retention_size_gib is not None and self.retention_size_gib >= self.storage_gib:
            raise config_error(
                f"retentionSize {self.retention_size_gib} GiB on a {self.storage_gib} GiB volume: the disk fills "
                "before size-based retention deletes anything, and Prometheus stops ingesting",
                allowed="retentionSizeGib below storageGib (Prometheus's WAL and compaction need the rest)",
                fix=f"set retentionSizeGib to about {max(1, self.storage_gib * 8 // 10)} or raise storageGib",
            )
        return self


class ModelDeploySpec(Spec):
    """One served model: one engine on one GPU pool."""

    name: DnsLabel
    """Required: it names the Deployment/LeaderWorkerSet, its Service and the gateway's alias."""
    model: str
    """Required: the architecture, a catalog id such as ``meta-llama/Llama-3.1-8B-Instruct``."""
    source: str | None = described(
        r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
        allowed="an S3 URL: s3://<bucket>[/<prefix>]",
        fix="e.g. s3://models/meta-llama/Llama-3.1-8B-Instruct",
        default=None,
    )
    """Where the weights are: ``s3://bucket/prefix``. Defaults to the stack's model store, prefix = ``model``."""
    engine: Literal["vllm", "triton", "llamacpp"]
    """Required: ``vllm`` (OpenAI server), ``triton`` (Triton + TensorRT-LLM) or ``llamacpp`` (llama.cpp's
    ``llama-server`` on a GGUF file: CPU, or offloaded to one small GPU)."""
    pool: DnsLabel
    """Required: the GPU pool (``gpuPools[].name``) the model runs on."""
    precision: Literal["fp8", "bf16", "fp16", "int4"] = "fp8"
    """vLLM and Triton: the weights' precision. ``int4`` on vLLM needs an AWQ or GPTQ checkpoint as ``source``.
    Not for ``llamacpp``: a GGUF file's ``quantization`` is its precision."""
    quantization: str | None = described(
        r"^[A-Z0-9_]{2,10}$",
        allowed="a GGUF quantization type: 2 to 10 uppercase letters, digits and '_'",
        fix="e.g. Q4_K_M",
        default=None,
    )
    """``llamacpp`` only: the GGUF quantization type served (llama.cpp's names, e.g. ``Q4_K_M``, ``Q8_0``,
    ``F16``); defaults to ``Q4_K_M`` for chat models and ``Q8_0`` for embedding models."""
    tensor_parallel: int | None = Field(default=None, ge=1, le=8)
    """Defaults to the smallest degree that fits and meets ``slo.itlP99Ms`` by the decode roofline."""
    pipeline_parallel: int = Field(default=1, ge=1, le=8)
    """Stages across nodes; above 1 the model runs as a LeaderWorkerSet group of that many nodes."""
    replicas: int = Field(default=1, ge=0)
    """Replicas (or LeaderWorkerSet groups) at start. Interactive models keep at least one warm."""
    profile: Literal["ultra-low-latency", "balanced", "throughput"] = "ultra-low-latency"
    slo: SloSpec = SloSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    speculative: Any | None = None
    """vLLM speculative decoding (``components.serving._vllm.SpeculativeConfig``): method, numSpeculativeTokens, ..."""

    @property
    def replica_ceiling(self) -> int:
        """The most replicas the model runs: KEDA's ``maxReplicas`` (default 4 x ``replicas``, at least 2) when it
        autoscales, else ``replicas``."""
        if not self.autoscaling.enabled:
            return self.replicas
        return self.autoscaling.max_replicas or max(2, 4 * self.replicas)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        from components.catalog.models import MODELS

        return catalog_member(value, MODELS, catalog_name="model", item="model id")

    @field_validator("speculative", mode="before")
    @classmethod
    def _speculative(cls, value: Any) -> Any:
        from components.serving._vllm import SpeculativeConfig

        if value is None or isinstance(value, SpeculativeConfig):
            return value
        if not isinstance(value, dict):
            raise config_error(
                "not a mapping", allowed="method, numSpeculativeTokens, model, ...", fix="write a mapping"
            )
        snake = {"".join("_" + c.lower() if c.isupper() else c for c in k): v for k, v in value.items()}
        try:
            return SpeculativeConfig.model_validate(snake)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            key = ".".join(to_camel(str(p)) for p in first["loc"])
            ctx = first.get("ctx") or {}
            if first["type"] == "inferstack":  # SpeculativeConfig's own refusal, with its allowed and fix
                raise config_error(first["msg"], allowed=ctx["allowed"], fix=ctx["fix"]) from None
            raise config_error(
                f"{key} {first['msg'].replace('Input should', 'should')}" if key else first["msg"],
                allowed="method: eagle3|eagle|ngram|mtp|draft_model, numSpeculativeTokens: 1..16",
                fix="see vLLM's speculative decoding docs",
            ) from None

    @property
    def queue_target(self) -> int:
        """KEDA's target of waiting requests per replica: ``autoscaling.queueDepth``, else the latency profile's."""
        from components.catalog.profiles import PROFILES

        return self.autoscaling.queue_depth or PROFILES[self.profile].keda_queue_depth_per_replica


class CacheSpec(Spec):
    """The Redis-protocol cache behind the gateway (exact keys + vector index)."""

    kind: Literal["elasticache", "in-cluster"] = "in-cluster"
    """``elasticache``: ElastiCache for Valkey (cloud). ``in-cluster``: a Redis 8 StatefulSet with search."""
    node_type: str = described(
        r"^cache\.[a-z][0-9]+[a-z]*\.(micro|small|medium|large|([1-9][0-9]?)?xlarge)$",
        allowed="an ElastiCache node type: cache.<family>.<size>, the size micro, small, medium, large, xlarge or "
        "<n>xlarge",
        fix="e.g. cache.r7g.large (inferstack preflight checks that the region sells it)",
        default="cache.r7g.large",
    )
    """ElastiCache node type. Offline only its form is checked: ``inferstack preflight`` asks the region."""
    replicas: int = Field(default=2, ge=1, le=6)
    """ElastiCache: nodes in the replication group (≥ 2 for multi-AZ failover)."""
    memory_gib: int = Field(default=4, ge=1)
    """In-cluster: the Redis container's memory limit; maxmemory is set below it. It must fit the node it runs on
    (the cloud's system pool, an edge site's node budget)."""
    storage_gib: int = Field(default=20, ge=1)
    """In-cluster: the persistent volume for AOF/RDB."""
    protect: bool = True
    """Protect the cache (replication group or StatefulSet) from ``pulumi destroy``."""


class ApiKeySpec(Spec):
    """One gateway API key, stored only as its SHA-256 (``printf %s "$KEY" | sha256sum``)."""

    tenant: DnsLabel
    key_sha256: str = described(
        r"^[0-9a-f]{64}$",
        allowed="the key's SHA-256: 64 lowercase hex digits",
        fix='hash the key: printf %s "$KEY" | sha256sum',
    )
    name: str | None = None
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    residency: Literal["any", "local"] = "any"
    """``local``: this tenant's requests never leave the tier (never sent to the hub), even at saturation."""
    models: tuple[DnsLabel, ...] = ()
    """Model aliases (``models[].name``, ``routes[].alias``) this key may use; empty: every alias."""


class SpilloverSpec(Spec):
    """``gateway.burst``: when a local model's tier overflows to the hub (rendered as ``tiers.<t>.spillover``).

    It spills when a ``spillAbove*`` threshold is reached and returns under ``returnBelow*`` (default: half)."""

    spill_above_inflight: int | None = Field(default=None, ge=1)
    """Requests in flight to the local model (per gateway replica) at which new requests go to the hub."""
    return_below_inflight: int | None = Field(default=None, ge=1)
    """At least 1: the gateway serves locally again under this count, and no count is under 0."""
    spill_above_ttft_ms: float | None = Field(default=None, gt=0)
    """Average time to first token of the local model (ms) at which new requests go to the hub."""
    return_below_ttft_ms: float | None = Field(default=None, gt=0)

    @field_validator("return_below_inflight", "return_below_ttft_ms")
    @classmethod
    def _under_spill(cls, below: float | None, info: ValidationInfo) -> float | None:
        """The gateway's own rule (``SpilloverConfig``), said with the stack file's keys: a return threshold at or
        above its spill threshold makes the tier flap, and one without a spill threshold never applies."""
        signal = "Inflight" if info.field_name == "return_below_inflight" else "TtftMs"
        spill_field = "spill_above_inflight" if signal == "Inflight" else "spill_above_ttft_ms"
        if below is None or spill_field not in info.data:  # a spill threshold that failed is reported on its own
            return below
        above = info.data[spill_field]
        if above is None:
            raise config_error(
                f"returnBelow{signal} without spillAbove{signal}",
                allowed=f"returnBelow{signal} together with spillAbove{signal}",
                fix=f"set spillAbove{signal} too, or remove returnBelow{signal}",
            )
        if below >= above:
            raise config_error(
                f"not under spillAbove{signal} ({above}): the tier would flap between local and hub",
                allowed=f"less than spillAbove{signal} (default: half of it)",
                fix=f"lower returnBelow{signal}, or remove it",
            )
        return below


class BurstTenantSpec(Spec):
    """``gateway.burstTenant``: the hub side. The stack issues a key (``burst_api_key`` output, secret) to the
    stacks that burst or fall back to it, registered as this tenant."""

    enabled: bool = True
    tenant: DnsLabel = "burst"
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    models: tuple[DnsLabel, ...] = ()
    """Model aliases (``models[].name``, ``routes[].alias``) the burst key may use; empty: every alias. A sending
    stack that asks for another gets 404 ``model_not_found`` and leaves this hub out for that model for a while."""


class HubSpec(Spec):
    """The stack this one sends complex prompts and overflow to (and falls back to): an on-prem or cloud gateway.

    Either ``stack`` (a Pulumi StackReference to another stack of this project, which exports ``gateway_url`` and
    the secret ``burst_api_key``) or ``url`` with ``apiKeySecret`` (the name of a secret config value).
    """

    stack: str | None = described(
        r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$",
        allowed="a stack reference: <organization>/<project>/<stack>",
        fix="e.g. organization/inferstack/prod",
        default=None,
    )
    """``<organization>/<project>/<stack>`` of the hub."""
    url: OpenAiBaseUrl | None = None
    """The hub gateway's OpenAI base URL, including ``/v1``."""
    api_key_secret: SecretConfigName | None = None
    """With ``url``: the secret config value holding the hub's key
    (``pulumi config set --secret inferstack:<name>``)."""
    model: str | None = None
    """The alias requested at the hub; empty: the alias the client asked for."""
    fallback: bool = True
    """Local models fail over to the hub (connect errors, 5xx, timeouts before the first byte)."""
    ca_config_map: KubernetesName | None = None
    """A ConfigMap in the gateway's namespace holding the PEM certificate(s) of the private CA the hub's HTTPS
    certificate chains to (a hub serving ``gateway.tlsSecret``'s certificate of the site's own CA): the gateway then
    trusts that CA, and only it, for the hub. Unset: the system's trust store (a publicly trusted certificate, such
    as the ACM one on the cloud's load balancer)."""
    ca_key: str = Field(default="ca.crt", pattern=r"^[-._a-zA-Z0-9]+$")
    """The key of ``caConfigMap`` that holds the PEM bundle (trust-manager writes the key its Bundle names)."""

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        # Empty is "not set" (the gateway forwards the client's alias), but whitespace is a name: the gateway would ask
        # the hub for a model called "  ", which no hub serves, on every request it sends there.
        if value is not None and value != value.strip():
            raise config_error(
                "only whitespace"
                if not value.strip()
                else "whitespace around the name, which the gateway sends as it is",
                allowed="the name of a model the hub serves (e.g. llama-70b), with no whitespace around it; no "
                "hub.model: the alias the client asked for",
                fix="remove hub.model to send the client's alias, or name the hub's model"
                if not value.strip()
                else f"write {value.strip()!r}",
            )
        return value

    @model_validator(mode="after")
    def _one_way(self) -> HubSpec:
        if self.ca_config_map is not None and self.url is not None and not self.url.startswith("https://"):
            raise config_error(
                f"caConfigMap for a hub reached over plain HTTP ({self.url})",
                allowed="a CA to trust for a hub whose url is https://",
                fix="write the hub's https:// URL in hub.url, or remove hub.caConfigMap",
            )
        if (self.stack is None) == (self.url is None):
            raise config_error(
                "names its hub both ways or neither",
                allowed="either stack: <org>/<project>/<stack>, or url + apiKeySecret",
                fix="keep exactly one of `stack` and `url`",
            )
        if self.stack is not None and self.api_key_secret is not None:
            raise config_error(
                "apiKeySecret with a stack reference",
                allowed="the key comes from the hub stack's secret output burst_api_key",
                fix="remove apiKeySecret, or name the hub by url",
            )
        return self


class RouteSpec(Spec):
    """A model alias that sends simple requests to ``small`` and complex ones to ``large``."""

    alias: DnsLabel
    small: DnsLabel
    """A ``models[].name``: the default."""
    large: DnsLabel
    """A ``models[].name``: used when any rule below matches."""
    large_if_prompt_tokens: int | None = Field(default=2000, ge=1)
    large_if_turns: int | None = Field(default=None, ge=1)
    large_if_keywords: tuple[str, ...] = ()
    """Words or phrases that send a prompt to ``large`` (case-insensitive substring match)."""
    residency: Literal["any", "local"] = "any"
    """``local``: requests for this alias never leave the tier (never the hub), even at saturation."""

    @field_validator("large_if_keywords")
    @classmethod
    def _no_blank_keyword(cls, keywords: tuple[str, ...]) -> tuple[str, ...]:
        # An empty keyword is a substring of every prompt: every request would go to ``large``.
        blank = next((i for i, k in enumerate(keywords) if not k.strip()), None)
        if blank is not None:
            raise config_error(
                f"item {blank} is blank: it matches every prompt",
                allowed="words or phrases with at least one non-space character",
                fix="remove the blank keyword",
            )
        return keywords

    @model_validator(mode="after")
    def _has_a_rule(self) -> RouteSpec:
        # The gateway refuses a complexity rule without a condition (ComplexityRule in images/gateway's config.py):
        # said here with the stack file's keys, not the rendered config's.
        if self.large_if_prompt_tokens is None and self.large_if_turns is None and not self.large_if_keywords:
            raise config_error(
                f"no rule sends a request to large ({self.large!r}): largeIfPromptTokens is off and no other is set",
                allowed="at least one of largeIfPromptTokens, largeIfTurns or largeIfKeywords",
                fix="set largeIfPromptTokens (default 2000), largeIfTurns or largeIfKeywords; or route the alias's "
                "clients to a model's own name",
            )
        return self


REDIS_MAX_EXPIRE_S = (2**63 - 1 - 2**42) // 1000
"""The longest lifetime Redis gives a key: it refuses an expiry (``SET ... EX``, ``EXPIRE``) whose milliseconds, added
to the current time's, pass a signed 64-bit integer (``getExpireMillisecondsOrReply`` in Redis's t_string.c); 2**42 ms
is the current time's bound until the year 2109. Past it every cache write fails and nothing is ever cached."""


class GatewayCacheSpec(Spec):
    """``gateway.cache``: what the gateway caches, for every model and route alias (``models.<alias>.cache``)."""

    policy: Literal["temperature_zero", "always", "never"] = "temperature_zero"
    """``temperature_zero``: only requests with temperature 0 (or that opt in with ``x-inferstack-cache-opt-in``);
    ``always``: every request, whatever its temperature; ``never``: nothing is stored or served from the cache (a
    gateway whose tenants must never get a stored answer)."""
    ttl_seconds: int = Field(default=3600, ge=1, le=REDIS_MAX_EXPIRE_S)
    """How long a cached answer is kept, exact and semantic entries alike (the gateway's ``ttl_s`` and
    ``semantic.ttl_s``)."""

    @model_validator(mode="after")
    def _ttl_only_when_caching(self) -> GatewayCacheSpec:
        # A lifetime for entries that are never written: refused, as a returnBelow* without its spillAbove* is.
        if self.policy == "never" and "ttl_seconds" in self.model_fields_set:
            raise config_error(
                f"ttlSeconds ({self.ttl_seconds}) with policy: never, which stores nothing",
                allowed="ttlSeconds with policy temperature_zero or always",
                fix="remove ttlSeconds, or set policy to temperature_zero or always",
            )
        return self


class GatewayBudgetsSpec(Spec):
    """``gateway.budgets``: the gateway's latency budgets (its ``budgets``) that a deployment has a reason to change."""

    request_ms: int = Field(default=300_000, ge=1)
    """The whole request, the whole stream included: past it the client gets 504, or the stream ends with an error
    event. A long answer needs its tokens x the inter-token latency (16,000 tokens at 25 ms: 400 s). Unset, the kit
    renders the longer of this default and the longest answer a chat model may stream on target plus
    ``upstreamTtftMs`` (``components.gateway.gateway.longest_answer_ms``). A request sent on to the hub is cut by the
    hub's own ``requestMs`` too."""
    upstream_ttft_ms: int = Field(default=10_000, ge=1)
    """A stream's time to its first event from one upstream, after which the next upstream is tried (a model that
    answers long prompts slowly, or wakes from zero replicas, needs more). Under ``requestMs`` where that is set; unset,
    the request budget the kit renders adds it to the longest answer."""

    @model_validator(mode="after")
    def _ttft_under_request(self) -> GatewayBudgetsSpec:
        # The gateway takes the smaller of the two, so it accepts this; but a request whose budget runs out first
        # never gives up on its first upstream in time to try the next (a local model's hub fallback included).
        # Unset, requestMs is not this default: the kit renders at least a chat model's longest answer plus
        # upstreamTtftMs (``components.gateway.gateway.gateway_config``), above upstreamTtftMs whatever it is.
        if "request_ms" not in self.model_fields_set or self.upstream_ttft_ms < self.request_ms:
            return self
        ttft = f"upstreamTtftMs ({self.upstream_ttft_ms}" + (
            ")" if "upstream_ttft_ms" in self.model_fields_set else ", its default)"
        )
        raise config_error(
            f"{ttft} is not under requestMs ({self.request_ms}): the request's budget runs out before the gateway "
            "gives up on one upstream, so it never fails over to the next",
            allowed="upstreamTtftMs less than requestMs",
            fix=f"raise requestMs above {self.upstream_ttft_ms}, or lower upstreamTtftMs below {self.request_ms}",
        )


class GatewaySpec(Spec):
    """The OpenAI-compatible gateway in front of the models (``images/gateway``)."""

    enabled: bool = True
    replicas: int = Field(default=2, ge=1)
    max_replicas: int = Field(default=10, ge=1)
    target_cpu_percent: int = Field(default=60, ge=10, le=95)
    """HPA target. The gateway is CPU-bound per request: CPU tracks requests per second closely."""
    load_balancer: Literal["none", "internal"] = "none"
    """``internal``: an internal NLB through the AWS Load Balancer Controller; ``none``: ClusterIP only."""
    load_balancer_port: int | None = Field(default=None, ge=1, le=65535)
    """Off AWS, with ``loadBalancer: internal``: the port the private load balancer listens on (plain TCP to the
    gateway). Unset: 443 where the gateway serves HTTPS itself (``tls_secret``), else 80 (``listen_port``). The edge
    tier's default is 8080 (``EdgeGatewaySpec``); the cloud's NLB serves TLS on 443 only."""
    tls_certificate_arn: str | None = described(
        r"^arn:aws[a-z-]*:acm:[a-z]{2}(-[a-z]+)+-\d:\d{12}:certificate/[0-9a-f-]{36}$",
        allowed="an ACM certificate ARN: arn:aws:acm:<region>:<12-digit account>:certificate/<id>",
        fix="e.g. arn:aws:acm:us-east-1:111122223333:certificate/00000000-0000-4000-8000-000000000000",
        default=None,
    )
    """ACM certificate the load balancer terminates TLS with, on port 443. Required with ``loadBalancer``:
    API keys never cross the network in clear text."""
    tls_secret: KubernetesName | None = None
    """Off AWS: a ``kubernetes.io/tls`` Secret in the gateway's namespace (``tls.crt``, ``tls.key``; made beforehand,
    by cert-manager or ``kubectl create secret tls``). The gateway then serves HTTPS itself on every port (the
    private load balancer forwards TCP): API keys and prompts never cross the network in clear text. The cloud's
    NLB terminates TLS with ``tlsCertificateArn`` instead."""
    embeddings_url: str | None = described(
        r"^https?://[^\s/]+(/[^\s]*)?$",
        allowed="an http(s) URL: the OpenAI-compatible base, /v1 included",
        fix="e.g. http://embeddings.serving:8000/v1",
        default=None,
    )
    """OpenAI-compatible ``/v1`` base URL for embeddings. Without it the semantic cache is off (exact only)."""
    semantic_max_distance: float = Field(default=0.1, ge=0, le=1)
    """Cosine distance for a semantic hit. Strict: 0.2 serves "delete my password" for "reset my password"."""
    cache: GatewayCacheSpec = GatewayCacheSpec()
    """What is cached and for how long (every alias alike)."""
    budgets: GatewayBudgetsSpec = GatewayBudgetsSpec()
    """The whole request's and each upstream's time-to-first-token budgets."""
    api_keys: tuple[ApiKeySpec, ...] = ()
    """Hashed keys, one tenant each; written to a Kubernetes Secret the gateway reads as its keys file."""
    routes: tuple[RouteSpec, ...] = ()
    burst: SpilloverSpec | None = None
    """With a hub: the thresholds at which each local model's tier spills over to it; none: failover only."""
    hub_url: OpenAiBaseUrl | None = None
    """Hub side: the URL other stacks reach this gateway at (the ``gateway_url`` output), e.g. a private DNS name
    that matches ``tlsCertificateArn``'s; default: the internal load balancer's own address."""
    burst_tenant: BurstTenantSpec = BurstTenantSpec()
    """The hub side: the tenant whose key (the ``burst_api_key`` output) other stacks burst with."""
    requests_per_minute: int = Field(default=600, ge=1)
    tokens_per_minute: int = Field(default=400_000, ge=1)

    @property
    def listen_port(self) -> int:
        """The private load balancer's port: ``loadBalancerPort``, else HTTPS's 443 with ``tlsSecret`` (clients dial
        ``https://<address>/v1``), else 80."""
        if self.load_balancer_port is not None:
            return self.load_balancer_port
        return 443 if self.tls_secret is not None else 80

    def aliases_of(self, model: str) -> tuple[str, ...]:
        """The ``routes[].alias`` whose requests may reach ``model`` (as its ``small`` or its ``large``); none when the
        gateway is disabled, as nothing then serves them."""
        if not self.enabled:
            return ()
        return tuple(r.alias for r in self.routes if model in (r.small, r.large))
