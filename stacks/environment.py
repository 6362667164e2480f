"""The one environment config key, ``inferstack:environment``, and its validation.

``load_environment`` turns the raw object from a stack file into an ``Environment``
or raises ``ConfigError`` with one ``ConfigIssue`` per problem. Each issue names
the stack file, the key path, the value received, what is allowed, and the fix.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from ipaddress import IPv4Network, ip_network
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from components.catalog.images import KIT_IMAGES
from components.catalog.instances import INSTANCES
from components.edge.specs import EdgeClusterSpec, EdgeGatewaySpec, EdgeNodeSpec, EdgeObservabilitySpec
from components.onprem.specs import (
    FabricSpec,
    GpuOperatorSpec,
    LocalStorageSpec,
    NetworkOperatorSpec,
    OnpremClusterSpec,
    OnpremGpuPoolSpec,
    OnpremLoadBalancerSpec,
    OnpremModelStoreSpec,
)
from components.specs import (
    PATTERN_HELP,
    CacheSpec,
    ClusterSpec,
    GatewaySpec,
    GpuPoolSpec,
    HubSpec,
    KubernetesName,
    ModelDeploySpec,
    ModelStoreSpec,
    NetworkSpec,
    ObservabilitySpec,
    S3CompatibleStoreSpec,
    Spec,
    SystemPoolSpec,
    config_error,
    described,
    did_you_mean,
)

CONFIG_KEY = "inferstack:environment"
_DOMAIN_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_REGISTRY = re.compile(
    rf"(?P<host>{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9a-f:]+\])(?::(?P<port>[0-9]+))?(?:/{_PATH_COMPONENT})*"
)
"""distribution/reference's grammar (``reference.go``) for an image name's part before the image's own name: a
``domain`` (host, optional port) and path components of lowercase letters and digits joined by ``.``, ``_``, ``__``
or dashes. Host names in lowercase here, as the kit writes them."""
_IMAGE_NAME_MAX = 255
"""distribution/reference's ``NameTotalLengthMax``: an image name (without its tag) longer than this is refused."""
IMAGE_REGISTRY_MAX = _IMAGE_NAME_MAX - max(len("/" + image) for image in KIT_IMAGES)
"""The longest ``imageRegistry`` for which every kit image (``<registry>/model-loader``) is a name Docker takes."""
_IMAGE_REGISTRY_ALLOWED = (
    "a registry host[:port][/path] as image references write it (distribution/reference): a host name with a dot, "
    "an IP address or localhost, an optional :port, then lowercase path components of letters and digits joined by "
    f"'.', '_' or '-'; no scheme, no tag; at most {IMAGE_REGISTRY_MAX} characters"
)
_IMAGE_REGISTRY_EXAMPLE = "e.g. harbor.dc1.example.com/inferstack"


def _image_registry(value: str) -> str:
    """``imageRegistry`` as the kit writes each image, ``<imageRegistry>/gateway:<tag>``: anything but a registry's
    host[:port][/path] makes a reference that Kubernetes refuses (a scheme, a tag) or that resolves elsewhere."""

    def refuse(problem: str, fix: str) -> PydanticCustomError:
        return config_error(problem, allowed=_IMAGE_REGISTRY_ALLOWED, fix=fix)

    scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value)
    if scheme:
        rest = value[scheme.end() :].rstrip("/")
        raise refuse(
            "a URL scheme, which an image reference does not take",
            f"remove {scheme.group()}: write {rest!r}" if rest else _IMAGE_REGISTRY_EXAMPLE,
        )
    # A tag is a ':' in the last path component (one in the first, with no '/', is the registry's port); a digest
    # follows an '@'.
    name = value.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    colon = last.rfind(":")
    tagged = colon >= 0 and ("/" in name or not (last[colon + 1 :].isdigit() or last.endswith("]")))
    cut = len(name) - len(last) + (last.index(":") if "/" in name else colon) if tagged else len(name)
    if cut < len(value):
        suffix = value[cut:]
        kind = "digest" if suffix.startswith("@") else "tag" if "@" not in suffix else "tag and digest"
        raise refuse(
            f"a {kind} ({suffix}): the kit appends each image's name and tag (<imageRegistry>/gateway:<tag>)",
            f"remove {suffix}: write {value[:cut]!r}",
        )
    if value.endswith("/") and value.rstrip("/"):
        raise refuse("a trailing '/'", f"write {value.rstrip('/')!r}")
    if value != value.lower() and _IMAGE_REGISTRY.fullmatch(value.lower()):
        raise refuse("capital letters", f"write {value.lower()!r}")
    if len(value) > IMAGE_REGISTRY_MAX:
        raise refuse(
            f"{len(value)} characters: <imageRegistry>/model-loader would pass the {_IMAGE_NAME_MAX} characters an "
            "image name may have",
            "use a shorter path under the registry's host",
        )
    match = _IMAGE_REGISTRY.fullmatch(value)
    if match is None:
        raise refuse("not a registry host[:port][/path]", _IMAGE_REGISTRY_EXAMPLE)
    host, port = match.group("host"), match.group("port")
    if port is not None and not 1 <= int(port) <= 65535:
        raise refuse(f"port {port}, outside 1 to 65535", "write the registry's port")
    if port is None and "." not in host and host != "localhost" and not host.startswith("["):
        # distribution/reference (splitDockerDomain): a first component with no '.' or ':' that is not localhost is
        # a path on Docker Hub, so <imageRegistry>/gateway would be pulled from docker.io.
        raise refuse(
            f"a host name without a dot, a port or localhost: Docker and Kubernetes read {host!r} as a namespace on "
            f"Docker Hub (docker.io/{host}/...)",
            "write the registry's full host name (harbor.dc1.example.com) or add its :port",
        )
    if any(len(label) > 63 for label in host.split(".")):
        raise refuse("a host name label longer than 63 characters (DNS)", "write the registry's host name")
    return value


ImageRegistry = Annotated[str, AfterValidator(_image_registry)]
"""Where the kit's images (``gateway``, ``model-loader``) are pushed."""
HUB_TARGET = "hub"
"""What a route names as its ``large`` target to send complex prompts to the stack's hub."""


class BaseEnvironment(Spec):
    """What every tier serves with: the same models, cache, gateway and observability sections."""

    tier: str
    """Required: it selects the tier plug-in (``stacks.tiers``)."""
    models: tuple[ModelDeploySpec, ...] = ()
    """The served models; each runs on one of ``gpuPools``."""
    cache: CacheSpec = CacheSpec()
    observability: ObservabilitySpec = ObservabilitySpec()
    gateway: GatewaySpec = GatewaySpec()

    def pool(self, name: str) -> Any:
        return next(p for p in self.gpu_pools if p.name == name)  # type: ignore[attr-defined]

    def secret_keys(self) -> tuple[str, ...]:
        """Pulumi secret config values this stack reads (``inferstack plan`` stands in for missing ones)."""
        return self.observability.secret_names()


class CloudEnvironment(BaseEnvironment):
    """The cloud tier: everything one AWS stack provisions."""

    tier: Literal["cloud"]
    region: str = described(
        r"^[a-z]{2}(-[a-z]+)+-\d$", allowed="an AWS region: <area>-<direction>-<n>", fix="e.g. us-east-1"
    )
    """Required on the cloud tier: the AWS region everything lives in."""
    network: NetworkSpec
    cluster: ClusterSpec = ClusterSpec()
    system_pool: SystemPoolSpec = SystemPoolSpec()
    gpu_pools: tuple[GpuPoolSpec, ...] = Field(min_length=1)
    """Required: a serving platform without GPU capacity has nothing to serve with."""
    model_store: ModelStoreSpec = ModelStoreSpec()
    tags: dict[str, str] = Field(default_factory=dict)
    """Extra tags on every AWS resource that takes tags."""

    @field_validator("tags")
    @classmethod
    def _aws_tags(cls, tags: dict[str, str]) -> dict[str, str]:
        # AWS's tag rules ("Tag naming limits and requirements", Tagging AWS resources): keys 1 to 128 characters,
        # values up to 256, of letters, digits, spaces and _ . : / = + - @; the aws: prefix is AWS's own.
        for key, value in tags.items():
            if key.lower().startswith("aws:") or not _AWS_TAG.fullmatch(key) or len(key) > 128:
                raise config_error(
                    f"the tag key {key!r}",
                    allowed="1 to 128 letters, digits, spaces and _ . : / = + - @, not starting with aws: (AWS's own)",
                    fix="rename the tag, e.g. team: inference",
                )
            if len(value) > 256 or (value and not _AWS_TAG.fullmatch(value)):
                raise config_error(
                    f"the value of tag {key!r}",
                    allowed="up to 256 letters, digits, spaces and _ . : / = + - @",
                    fix="shorten it or drop the other characters",
                )
        return tags

    def pool(self, name: str) -> GpuPoolSpec:
        return next(p for p in self.gpu_pools if p.name == name)


_AWS_TAG = re.compile(r"[\w .:/=+\-@]+")


class OnpremEnvironment(BaseEnvironment):
    """The on-prem tier: an existing bare-metal cluster with fixed GPU servers, usually on InfiniBand."""

    tier: Literal["onprem"]
    cluster: OnpremClusterSpec = OnpremClusterSpec()
    gpu_pools: tuple[OnpremGpuPoolSpec, ...] = Field(min_length=1)
    """Required: the fixed GPU servers, one pool per kind of server."""
    gpu_operator: GpuOperatorSpec = GpuOperatorSpec()
    network_operator: NetworkOperatorSpec = NetworkOperatorSpec()
    fabric: FabricSpec = FabricSpec()
    local_storage: LocalStorageSpec = LocalStorageSpec()
    model_store: OnpremModelStoreSpec
    """Required: where weights come from (an S3-compatible endpoint, or a pre-filled volume)."""
    load_balancer: OnpremLoadBalancerSpec = OnpremLoadBalancerSpec()
    persistent_storage_class: KubernetesName | None = None
    """StorageClass of Prometheus's and Redis's claims; empty: the cluster's default StorageClass. A DNS subdomain, as
    the API server checks a claim's ``storageClassName`` (``ValidateClassName``)."""
    image_registry: ImageRegistry
    """Required: where the kit's images (``gateway``, ``model-loader``) are pushed, e.g. ``harbor.dc1.example/ai``."""
    hub: HubSpec | None = None
    """The stack that takes this one's overflow (``gateway.burst``) and failover: usually the cloud ``prod``."""

    def secret_keys(self) -> tuple[str, ...]:
        """Pulumi secret config values this stack reads (``inferstack plan`` stands in for missing ones)."""
        store = (MODEL_STORE_KEY_ID, MODEL_STORE_SECRET_KEY) if self.model_store.kind == "s3" else ()
        hub_key = (self.hub.api_key_secret,) if self.hub and self.hub.api_key_secret else ()
        return (self.cluster.kubeconfig_secret, *store, *hub_key, *super().secret_keys())

    def pool(self, name: str) -> OnpremGpuPoolSpec:
        return next(p for p in self.gpu_pools if p.name == name)


MODEL_STORE_KEY_ID = "modelStoreAccessKeyId"
MODEL_STORE_SECRET_KEY = "modelStoreSecretAccessKey"


class EdgeEnvironment(BaseEnvironment):
    """The edge tier: one k3s site with one small GPU or none, small quantized models, a cache, and a hub."""

    tier: Literal["edge"]
    cluster: EdgeClusterSpec = EdgeClusterSpec()
    nodes: tuple[EdgeNodeSpec, ...] = Field(min_length=1)
    """Required: the site's node(s); models name one as their ``pool``. The plan refuses pods that don't fit."""
    model_store: S3CompatibleStoreSpec
    """Required: where the GGUF files come from (the hub's MinIO, a site NAS): ``<model id>/gguf/<file>``."""
    image_registry: ImageRegistry
    """Required: where the kit's images (``gateway``, ``model-loader``) are pushed."""
    hub: HubSpec | None = None
    """The on-prem or cloud stack's gateway: complex prompts go there, and local models fall back to it."""
    observability: EdgeObservabilitySpec = EdgeObservabilitySpec()
    gateway: EdgeGatewaySpec = EdgeGatewaySpec()

    @model_validator(mode="before")
    @classmethod
    def _fixed_replicas(cls, raw: Any) -> Any:
        """A site's replicas are fixed (no KEDA): say so in each model, so nothing reads autoscaling as on."""
        if isinstance(raw, dict) and isinstance(raw.get("models"), list | tuple):
            raw = {
                **raw,
                "models": [
                    {**m, "autoscaling": {"enabled": False}} if isinstance(m, dict) and "autoscaling" not in m else m
                    for m in raw["models"]
                ],
            }
        return raw

    @property
    def gpu_pools(self) -> tuple[EdgeNodeSpec, ...]:
        """The serving layer's pools are the site's nodes."""
        return self.nodes

    def secret_keys(self) -> tuple[str, ...]:
        """Pulumi secret config values this stack reads (``inferstack plan`` stands in for missing ones)."""
        hub_key = (self.hub.api_key_secret,) if self.hub and self.hub.api_key_secret else ()
        return (
            self.cluster.kubeconfig_secret,
            MODEL_STORE_KEY_ID,
            MODEL_STORE_SECRET_KEY,
            *hub_key,
            *super().secret_keys(),
        )

    def pool(self, name: str) -> EdgeNodeSpec:
        return next(n for n in self.nodes if n.name == name)


Environment = CloudEnvironment | OnpremEnvironment | EdgeEnvironment
"""Every tier's validated config; ``tier`` tells which."""

ENVIRONMENTS: dict[str, type[BaseEnvironment]] = {
    "cloud": CloudEnvironment,
    "onprem": OnpremEnvironment,
    "edge": EdgeEnvironment,
}
TIERS = tuple(ENVIRONMENTS)


@dataclass(frozen=True)
class ConfigIssue:
    path: str
    received: str
    allowed: str
    fix: str

    def render(self, source: str) -> str:
        return f"{source}: {self.path}: got {self.received}; allowed: {self.allowed}; fix: {self.fix}"


class ConfigError(Exception):
    """Bad config. ``str()`` gives one line per issue, with no traceback to read."""

    def __init__(self, source: str, issues: list[ConfigIssue]) -> None:
        self.source = source
        self.issues = issues
        super().__init__("\n".join(i.render(source) for i in issues))


def load_environment(raw: Any, source: str, stack: str | None = None) -> Environment:
    """Validate the raw ``inferstack:environment`` object; raise ``ConfigError`` on any problem.

    ``stack``: ``<project>/<stack>`` of the stack being loaded, for the rules that compare the config with it (a hub
    that is the stack itself)."""
    if raw is None:
        raise ConfigError(
            source, [ConfigIssue(CONFIG_KEY, "nothing", "an object", f"add `{CONFIG_KEY}:` under `config:`")]
        )
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ConfigError(
                source, [ConfigIssue(CONFIG_KEY, repr(raw)[:60], "an object", f"fix the JSON: {err}")]
            ) from None
    if isinstance(raw, dict) and raw.get("tier") not in TIERS:
        tier = raw.get("tier")
        raise ConfigError(
            source,
            [
                ConfigIssue(
                    f"{CONFIG_KEY}.tier",
                    _show(tier),
                    ", ".join(TIERS),
                    "set `tier:` to the tier this stack deploys" + did_you_mean(str(tier), list(TIERS))
                    if tier
                    else "add `tier: cloud` (or onprem)",
                )
            ],
        )
    if isinstance(raw, dict):
        unsupported = unsupported_keys(raw)
        if unsupported:
            raise ConfigError(source, unsupported)
    model = ENVIRONMENTS[raw["tier"]] if isinstance(raw, dict) else CloudEnvironment
    try:
        env: Environment = model.model_validate(raw)  # type: ignore[assignment]
    except ValidationError as err:
        errors = err.errors()
        # A list that failed item validation is also reported "too short"; the item errors say it all.
        locs = [tuple(e["loc"]) for e in errors]
        errors = [
            e
            for e in errors
            if not (
                e["type"] == "too_short"
                and any(len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in locs)
            )
        ]
        # A misspelt key the mapping lacks (`regon:` for `region:`) is one problem: the unknown key says to rename it,
        # and the key it stands for, missing (or failing its default), says nothing more; nor does a rule of the
        # section that names the key as absent (returnBelowInflight "without spillAboveInflight").
        meant = _misspelt_keys(errors, raw, model)
        follow = {at: [id(e) for e in errors if _follows_from(e, at[:-1], key)] for at, key in meant.items()}
        meant = {at: key for at, key in meant.items() if follow[at]}  # an optional key: "remove, or rename"
        dropped = {i for found in follow.values() for i in found}
        errors = [e for e in errors if id(e) not in dropped]
        raise ConfigError(
            source, [_issue_from_pydantic(e, model, meant.get(tuple(e["loc"]))) for e in errors]
        ) from None
    issues = cross_checks(env, stack)
    if issues:
        raise ConfigError(source, issues)
    return env


def unsupported_keys(raw: dict[str, Any]) -> list[ConfigIssue]:
    """Keys the chosen tier declares it cannot honour (``stacks.tiers``), each named with the alternative."""
    from stacks.tiers import TIER_PLUGINS

    plugin = TIER_PLUGINS[raw["tier"]]
    issues = []
    for rule in plugin.unsupported:
        for path, value in rule.find(raw):
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.{path}",
                    f"{_show(value)} on tier {plugin.name} ({rule.why})",
                    f"keys the {plugin.name} tier supports (README, config reference)",
                    rule.instead,
                )
            )
    return issues


AWS_REGION_KEY = "aws:region"
"""The default AWS provider's region: every AWS resource of the cloud tier is created there."""


def provider_region_issues(env: Environment, aws_region: Any, source: str = AWS_REGION_KEY) -> list[ConfigIssue]:
    """The AWS provider's region (``aws_region``, read from ``source``) equals the cloud environment's ``region``.

    The cloud tier creates its AWS resources through Pulumi's default AWS provider, whose region is the stack's
    ``aws:region`` or, without it, the ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` of the shell that runs ``pulumi up``
    (pulumi-aws, provider configuration ``region``). The subnets, the kubeconfig, the ACM check and ``inferstack
    preflight`` follow ``region``: a provider elsewhere creates the VPC in one region and asks for zones of another.
    ``None`` (not known here: a shell or a Pulumi ESC environment may give it at ``pulumi up``) passes."""
    if not isinstance(env, CloudEnvironment) or aws_region is None or aws_region == env.region:
        return []
    return [
        ConfigIssue(
            AWS_REGION_KEY,
            f"{_show(aws_region)}{'' if source == AWS_REGION_KEY else f' from {source}'} (the environment's region "
            f"is {env.region!r})",
            f"the environment's region, {env.region}: the provider creates every AWS resource there",
            f"set `aws:region: {env.region}` under `config:` (pulumi config set aws:region {env.region}), or change "
            "the environment's region and zones",
        )
    ]


def provider_region(configured: str | None, environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The region the default AWS provider will use at ``pulumi up``, and where it comes from: ``aws:region``, else
    the shell's ``AWS_REGION``, else its ``AWS_DEFAULT_REGION`` (pulumi-aws provider configuration)."""
    if configured:
        return configured, AWS_REGION_KEY
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if environ.get(variable):
            return environ[variable], variable
    return None, AWS_REGION_KEY


def cross_checks(env: Environment, stack: str | None = None) -> list[ConfigIssue]:
    """Rules that span sections or fields; run after the structure is valid."""
    issues = common_checks(env, stack)
    if isinstance(env, OnpremEnvironment):
        from stacks.onprem_checks import onprem_checks, system_nodes_budget

        issues += onprem_checks(env)
        # As on the cloud: only a config that is otherwise sound is worth a budget.
        return issues or system_nodes_budget(env)
    if isinstance(env, EdgeEnvironment):
        from stacks.edge_checks import edge_checks

        return issues + edge_checks(env, sound=not issues)
    issues += cloud_checks(env)
    from stacks.cloud_checks import managed_pools_fit, system_pool_budget

    issues += managed_pools_fit(env)
    if issues:
        return issues
    # Only a config that is otherwise sound is worth a budget: the budget reads every section.
    return system_pool_budget(env)


def hub_checks(env: Environment, hub: HubSpec | None, stack: str | None = None) -> list[ConfigIssue]:
    """Hybrid burst, on every tier that names a hub: the hub's key, spillover, and data residency."""
    issues: list[ConfigIssue] = []
    if hub is not None and hub.stack is not None and hub.stack.split("/", 1)[1] == stack:
        # The reference would read this stack's own outputs: the gateway would send its overflow to itself.
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.hub.stack",
                f"{hub.stack!r}, this stack itself",
                "another stack of the project, which takes this one's overflow (e.g. the cloud stack prod)",
                "name the hub's stack, or remove `hub`",
            )
        )
    if hub is not None and not env.gateway.enabled:
        # Only the gateway sends prompts to the hub (its routes and fallback): without it, `pulumi up` would read the
        # hub stack (or its key) for nothing.
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.hub",
                "a hub with gateway.enabled: false",
                "a hub only behind this stack's gateway, which routes and falls back to it",
                "remove `hub`, or turn the gateway on",
            )
        )
    for i, model in enumerate(env.models if hub is not None else ()):
        if model.name == HUB_TARGET:
            # The gateway keys its upstreams and tiers by model name, and the hub is upstream and tier `hub`
            # (components/gateway/gateway.py): the hub would replace the model, which then got no request.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.models[{i}].name",
                    f"{model.name!r}, the gateway's name for this stack's hub (its upstream and tier, routes[].large)",
                    "a model name other than hub on a stack that names a hub",
                    "rename the model",
                )
            )
    if hub is not None and hub.url is not None:
        from components.gateway.hub import in_cluster

        if in_cluster(hub.url):
            # As a hub stack's exported in-cluster URL is refused at `pulumi up` (components/gateway/hub.py): the name
            # resolves in this stack's own cluster, where gateway.inferstack-gateway.svc is its own gateway.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.hub.url",
                    f"{hub.url!r} (a Service name: it resolves in this stack's own cluster, not the hub's)",
                    "the hub gateway's address reachable from this cluster: its load balancer's or its gateway.hubUrl",
                    "write the hub's load balancer URL (its gateway_url output), or name the hub by hub.stack",
                )
            )
    if hub is not None and hub.url is not None and hub.api_key_secret is None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.hub.apiKeySecret",
                f"nothing for hub.url {hub.url}",
                "the name of a secret config value holding the key the hub issued to this stack",
                "pulumi config set --secret inferstack:hubApiKey <key>, then set hub.apiKeySecret: hubApiKey",
            )
        )
    burst = env.gateway.burst
    if burst is not None and (hub is None or not hub.fallback):
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.burst",
                "spillover thresholds without a hub to spill to"
                if hub is None
                else "spillover with hub.fallback: false",
                "gateway.burst only with a `hub:` that local models fall back to (hub.fallback: true)",
                "add a `hub:` section (or set hub.fallback: true), or remove gateway.burst",
            )
        )
    elif burst is not None and burst.spill_above_inflight is None and burst.spill_above_ttft_ms is None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.burst",
                "no threshold",
                "spillAboveInflight and/or spillAboveTtftMs",
                "set spillAboveInflight (e.g. the local server's max concurrent sequences)",
            )
        )
    ttft_budget = env.gateway.budgets.upstream_ttft_ms
    if burst is not None and burst.spill_above_ttft_ms is not None and burst.spill_above_ttft_ms >= ttft_budget:
        # The gateway averages the TTFT of the streams that got a first event; a slower one is cut at upstreamTtftMs
        # and fails over instead, so the average never reaches a threshold at or above that budget.
        written = "" if "upstream_ttft_ms" in env.gateway.budgets.model_fields_set else ", its default"
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.burst.spillAboveTtftMs",
                f"{burst.spill_above_ttft_ms:g}, not under gateway.budgets.upstreamTtftMs ({ttft_budget}{written}): "
                "a stream slower than that budget is cut and fails over, so the local model's TTFT average never "
                "reaches the threshold and the tier never spills on latency",
                f"less than gateway.budgets.upstreamTtftMs ({ttft_budget})",
                f"lower spillAboveTtftMs below {ttft_budget}, or raise gateway.budgets.upstreamTtftMs above it",
            )
        )
    # Aliases whose only upstream is the hub (a remote): a route's complex prompts (large: hub).
    remote_only = {r.alias for r in env.gateway.routes if r.large == HUB_TARGET or r.small == HUB_TARGET}
    for i, route in enumerate(env.gateway.routes):
        if route.residency == "local" and route.alias in remote_only:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.routes[{i}].residency",
                    f"local on route {route.alias!r}, which sends complex prompts to the hub (large: hub)",
                    "residency: local only on routes whose targets are served on this tier",
                    "route large to a local model, or remove residency: local",
                )
            )
    for i, key in enumerate(env.gateway.api_keys):
        if key.residency != "local":
            continue
        reachable = sorted(a for a in remote_only if not key.models or a in key.models)
        if reachable:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.apiKeys[{i}].residency",
                    f"local for tenant {key.tenant!r}, who may use route {reachable[0]!r}, which has only a remote "
                    "upstream (large: hub)",
                    "a residency-local tenant only on routes with a local upstream",
                    "list this key's local aliases in apiKeys[].models, or route large to a local model",
                )
            )
    return issues


def common_checks(env: Environment, stack: str | None = None) -> list[ConfigIssue]:
    """Models and gateway: the same rules on every tier."""
    from components.catalog.models import MODELS

    issues = model_checks(env)
    models = [m.name for m in env.models if not MODELS[m.model].is_embedding]
    hub_spec: HubSpec | None = getattr(env, "hub", None)
    hub = hub_spec is not None
    issues += hub_checks(env, hub_spec, stack)
    aliases = [r.alias for r in env.gateway.routes]
    for i, route in enumerate(env.gateway.routes):
        for key in ("small", "large"):
            target = getattr(route, key)
            if key == "large" and target == HUB_TARGET:
                if not hub:
                    issues.append(
                        ConfigIssue(
                            f"{CONFIG_KEY}.gateway.routes[{i}].large",
                            "'hub' without a hub",
                            "'hub' only where the stack names one (edge and on-prem tiers: `hub:`)",
                            "add a `hub:` section, or route to a served model",
                        )
                    )
                continue
            if target not in models:
                issues.append(
                    ConfigIssue(
                        f"{CONFIG_KEY}.gateway.routes[{i}].{key}",
                        repr(target),
                        "one of models[].name: " + ", ".join(models) + (", or hub (large only)" if hub else ""),
                        "name a served model" + did_you_mean(target, models),
                    )
                )
        if aliases.index(route.alias) < i:
            # The rendered config is keyed by alias: the later route would silently replace the earlier one.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.routes[{i}].alias",
                    f"{route.alias!r}, also routes[{aliases.index(route.alias)}].alias",
                    "an alias unique among gateway.routes",
                    "rename one route, or merge the two",
                )
            )
        if route.alias in models:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.routes[{i}].alias",
                    repr(route.alias),
                    "a name that is not also a model's name",
                    "rename the alias",
                )
            )
    issues += gateway_key_checks(env)
    if env.gateway.enabled and env.models and not models:
        # The gateway serves /v1/chat/completions and /v1/completions (images/gateway, app.py); an embedding model
        # is its semantic cache's embedder, never a route.
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.enabled",
                "true with no chat model (models[] has embedding models only, which the gateway routes no client to)",
                "a gateway with at least one chat model to route to",
                "add a chat model to models[], or set gateway.enabled: false",
            )
        )
    if env.gateway.enabled and models and not issues:
        issues += gateway_checks(env)
    if env.gateway.enabled and not env.gateway.api_keys:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.apiKeys",
                "no keys",
                "at least one {tenant, keySha256}",
                'add a key: printf %s "$KEY" | sha256sum, or set gateway.enabled: false',
            )
        )
    if env.gateway.enabled and env.gateway.cache.policy == "never":
        issues += _semantic_cache_unused(env)
    return issues


def _semantic_cache_unused(env: Environment) -> list[ConfigIssue]:
    """With ``gateway.cache.policy: never`` nothing is cached, so what only the semantic cache uses is refused: an
    embedding model would hold its node's CPU and memory for nothing (its NetworkPolicy admits only the gateway, which
    calls it only to embed prompts for the cache), and an embeddings URL or a distance would be read by no one."""
    from components.catalog.models import MODELS

    never = "with gateway.cache.policy: never, which caches nothing"
    fix = "or set gateway.cache.policy to temperature_zero or always"
    issues = [
        ConfigIssue(
            f"{CONFIG_KEY}.models[{i}].model",
            f"the embedding model {m.model!r} ({m.name}) {never}: only the semantic cache calls it",
            "an embedding model only where the gateway caches",
            f"remove models[{i}] ({m.name}), {fix}",
        )
        for i, m in enumerate(env.models)
        if MODELS[m.model].is_embedding
    ]
    for key, field in (("embeddingsUrl", "embeddings_url"), ("semanticMaxDistance", "semantic_max_distance")):
        if field in env.gateway.model_fields_set:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.{key}",
                    f"{getattr(env.gateway, field)!r} {never}",
                    f"{key} only where the gateway caches",
                    f"remove {key}, {fix}",
                )
            )
    return issues


def _size_bounds(at: str, min_size: int, max_size: int, desired: int | None, *, floor: int) -> list[ConfigIssue]:
    """A node group's sizes (``at`` is its key path): minSize ≤ maxSize, and desiredSize between them.

    With minSize above maxSize no desiredSize lies between them: that is one problem, reported at minSize with a fix
    that places both bounds around desiredSize, not a second line at desiredSize."""
    if min_size > max_size:
        fits = desired is None or desired >= floor
        issues = [
            ConfigIssue(
                f"{at}.minSize",
                f"{min_size} (maxSize is {max_size}" + ("" if desired is None else f", desiredSize {desired}") + ")",
                f"{floor} ≤ minSize ≤ maxSize ({max_size})",
                "lower minSize or raise maxSize"
                + (f" so that minSize ≤ desiredSize ({desired}) ≤ maxSize" if desired is not None and fits else ""),
            )
        ]
        if not fits:
            # Below the floor, desiredSize is wrong whatever the bounds become: a problem of its own.
            issues.append(
                ConfigIssue(
                    f"{at}.desiredSize",
                    str(desired),
                    f"at least {floor}, between minSize and maxSize",
                    "set desiredSize inside the bounds, or remove it (defaults to minSize)",
                )
            )
        return issues
    if desired is not None and not min_size <= desired <= max_size:
        return [
            ConfigIssue(
                f"{at}.desiredSize",
                str(desired),
                f"between minSize ({min_size}) and maxSize ({max_size})",
                "set desiredSize inside the bounds, or remove it (defaults to minSize)",
            )
        ]
    return []


def gateway_key_checks(env: Environment) -> list[ConfigIssue]:
    """The gateway's own bounds and its keys: each key hash and name once, and the burst tenant apart from every
    tenant."""
    from components.gateway.gateway import BURST_KEY_NAME

    issues: list[ConfigIssue] = []
    gateway = env.gateway
    if gateway.replicas > gateway.max_replicas:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.replicas",
                f"{gateway.replicas} (maxReplicas is {gateway.max_replicas})",
                f"1 ≤ replicas ≤ maxReplicas ({gateway.max_replicas})",
                "lower replicas or raise maxReplicas",
            )
        )
    hashes = [k.key_sha256 for k in gateway.api_keys]
    for i, key in enumerate(gateway.api_keys):
        first = hashes.index(key.key_sha256)
        if first < i:
            # The gateway looks a key up by its hash: one key would act as two tenants, with one tenant's limits.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.apiKeys[{i}].keySha256",
                    f"the hash of apiKeys[{first}] (tenant {gateway.api_keys[first].tenant!r}) again, for tenant "
                    f"{key.tenant!r}",
                    "one entry per key: each keySha256 once",
                    'issue this tenant its own key (printf %s "$KEY" | sha256sum), or remove the duplicate entry',
                )
            )
    burst = gateway.burst_tenant
    hub_side = not isinstance(env, EdgeEnvironment)  # an edge site issues no burst key (stacks.tiers)
    # The gateway counts each key's rate limits under its name, else its hash's first 8 hex digits (Principal.key_id
    # in images/gateway's auth.py): two keys of one name would share one count of requests and tokens. An entry that
    # repeats a key's hash is reported above, once.
    names = [k.name for k in gateway.api_keys]
    for i, name in enumerate(names):
        if hashes.index(gateway.api_keys[i].key_sha256) < i:
            continue
        if name is not None and names.index(name) < i:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.apiKeys[{i}].name",
                    f"{name!r}, also the name of apiKeys[{names.index(name)}]",
                    "a name unique among gateway.apiKeys: the gateway counts a key's rate limits under its name",
                    "rename one of the keys, or remove its name (the gateway then counts it under its hash)",
                )
            )
        elif name == BURST_KEY_NAME and hub_side and gateway.enabled and burst.enabled:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.apiKeys[{i}].name",
                    f"{name!r}, the name of the burst key this stack issues (gateway.burstTenant)",
                    "a name other than burst: the gateway counts a key's rate limits under its name",
                    "rename the key, or set burstTenant.enabled: false",
                )
            )
    if hub_side and gateway.enabled and burst.enabled:
        from components.catalog.models import MODELS

        chat = [m.name for m in env.models if m.model in MODELS and not MODELS[m.model].is_embedding]
        served = chat + [r.alias for r in gateway.routes]
        for j, alias in enumerate(burst.models):
            if alias not in served:
                issues.append(
                    ConfigIssue(
                        f"{CONFIG_KEY}.gateway.burstTenant.models[{j}]",
                        repr(alias),
                        "an alias this stack's gateway serves: " + ", ".join(served),
                        "name one of them" + did_you_mean(alias, served) + ", or remove it",
                    )
                )
    tenants = [k.tenant for k in gateway.api_keys]
    if hub_side and gateway.enabled and burst.enabled and burst.tenant in tenants:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.burstTenant.tenant",
                f"{burst.tenant!r}, also the tenant of apiKeys[{tenants.index(burst.tenant)}]",
                "a tenant no API key uses: burst traffic from other stacks shares nothing (cache, rate limits) "
                "with a local tenant",
                "rename burstTenant.tenant (default: burst), or set burstTenant.enabled: false",
            )
        )
    return issues


def cloud_checks(env: CloudEnvironment) -> list[ConfigIssue]:
    """The cloud tier's pools, zones, network and cache."""
    issues: list[ConfigIssue] = []
    zones = env.network.availability_zones
    # An AZ's name is its region's and one letter (us-east-1a): EKS's subnets take no Local Zone, and a name such as
    # us-east-1az passed the region check to fail at `pulumi up`.
    zone_issues = [
        ConfigIssue(
            f"{CONFIG_KEY}.network.availabilityZones[{i}]",
            repr(zone),
            f"availability zones of region {env.region}: {env.region}<letter>, e.g. {env.region}a",
            "list zones of the stack's region (aws ec2 describe-availability-zones --region " + env.region + ")",
        )
        for i, zone in enumerate(zones)
        if not re.fullmatch(re.escape(env.region) + "[a-z]", zone)
    ]
    issues += repeated_names([p.name for p in env.gpu_pools], "gpuPools", "pool")
    for i, pool in enumerate(env.gpu_pools):
        at = f"{CONFIG_KEY}.gpuPools[{i}]"
        spec = pool.spec
        if pool.efa and not spec.efa:
            efa_types = ", ".join(t for t, s in INSTANCES.items() if s.efa)
            issues.append(
                ConfigIssue(
                    f"{at}.efa",
                    f"true for {pool.instance_type} (no EFA interfaces)",
                    f"efa: true only on {efa_types}",
                    "remove `efa` (it is derived) or pick an EFA instance type",
                )
            )
        # With a network zone refused, a pool's zone is judged once the list is right: it may name the one to fix.
        if pool.zone is not None and pool.zone not in zones and not zone_issues:
            issues.append(
                ConfigIssue(
                    f"{at}.zone",
                    repr(pool.zone),
                    "one of network.availabilityZones: " + ", ".join(zones),
                    "set the zone to one of the network's zones" + did_you_mean(pool.zone, list(zones)),
                )
            )
        bounds = _size_bounds(at, pool.min_size, pool.max_size, pool.desired_size, floor=0)
        if pool.provisioner == "managed":
            issues += bounds
        else:
            # A NodePool has no node minimum (karpenter.sh/v1 NodePool: requirements, limits, disruption): Karpenter
            # launches a node for pending pods and removes it once empty, so a floor would never be kept. A size out
            # of bounds is always a minSize or desiredSize above 0, refused here: its fix (0, or no key) puts it
            # inside the bounds too, so the bounds' line would report the same key twice.
            managed = ", or set provisioner: managed for a fixed node count"
            if bounds:
                sizes = (
                    ("minSize", "desiredSize", "maxSize") if pool.desired_size is not None else ("minSize", "maxSize")
                )
                managed += " with " + " ≤ ".join(sizes)
            for key, size in (("minSize", pool.min_size), ("desiredSize", pool.desired_size)):
                if size:
                    issues.append(
                        ConfigIssue(
                            f"{at}.{key}",
                            f"{size} on a Karpenter pool (Karpenter launches nodes for pending pods and keeps none "
                            "warm)",
                            f"0 or no {key}: a Karpenter pool grows from zero up to maxSize",
                            "keep warm capacity with models[].replicas (their pods hold the nodes)"
                            # a Capacity Block pool is Karpenter's: a managed one is refused above
                            + ("" if pool.capacity.type == "capacity-block" else managed),
                        )
                    )
        if pool.capacity.reserved and not pool.capacity.reservation_id:
            issues.append(
                ConfigIssue(
                    f"{at}.capacity.reservationId",
                    f"nothing (capacity.type is {pool.capacity.type!r})",
                    "the reservation's id, e.g. cr-0123456789abcdef0",
                    "add `reservationId: cr-…` from the EC2 console or `aws ec2 describe-capacity-reservations`",
                )
            )
        if pool.capacity.reservation_id and not pool.capacity.reserved:
            issues.append(
                ConfigIssue(
                    f"{at}.capacity.type",
                    f"{pool.capacity.type!r} with reservationId {pool.capacity.reservation_id}",
                    "odcr or capacity-block when a reservationId is set",
                    "set `type: odcr` or `type: capacity-block`, or remove reservationId",
                )
            )
        if pool.capacity.type == "capacity-block" and pool.provisioner == "managed":
            # issue 12: a managed group asks for its nodes at create, before the block is active, and must be
            # scaled to zero for every AMI update; Karpenter launches into the block when it is active and
            # drains it 10 minutes before EC2 reclaims it.
            issues.append(
                ConfigIssue(
                    f"{at}.provisioner",
                    "'managed' with capacity.type 'capacity-block'",
                    "provisioner: karpenter for a Capacity Block",
                    "set `provisioner: karpenter` (maxSize then bounds the block's nodes)",
                )
            )
        if pool.capacity.on_demand_fallback and not (pool.capacity.reserved and pool.provisioner == "karpenter"):
            issues.append(
                ConfigIssue(
                    f"{at}.capacity.onDemandFallback",
                    f"true with capacity.type {pool.capacity.type!r} and provisioner {pool.provisioner!r}",
                    "a Karpenter pool with an odcr or capacity-block reservation",
                    "remove `onDemandFallback`, or use a reservation with `provisioner: karpenter`",
                )
            )
        if pool.placement_group and not pool.efa_enabled:
            issues.append(
                ConfigIssue(
                    f"{at}.placementGroup",
                    "true without EFA",
                    "a cluster placement group only for EFA pools",
                    "remove `placementGroup`, or use an EFA instance type",
                )
            )
    issues += cluster_checks(env)
    sys_pool = env.system_pool
    issues += _size_bounds(
        f"{CONFIG_KEY}.systemPool", sys_pool.min_size, sys_pool.max_size, sys_pool.desired_size, floor=1
    )
    issues += zone_issues
    issues += _vpc_cidr_checks(env.network.cidr)
    issues += _remote_write_source_checks(env)
    issues += _cache_checks(env)
    return issues


def _remote_write_source_checks(env: CloudEnvironment) -> list[ConfigIssue]:
    """A remote-write source CIDR outside the VPC: the VPC CNI gives every pod a VPC address, so an ``ipBlock`` over
    the VPC would admit the cluster's own pods to the receiver, which the NetworkPolicy is there to keep out."""
    issues = []
    vpc = env.network.cidr
    for i, source in enumerate(env.observability.remote_write_sources):
        network = ip_network(source.cidr) if source.cidr is not None else None
        if network is not None and network.version == vpc.version and network.overlaps(vpc):
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.observability.remoteWriteSources[{i}].cidr",
                    f"{source.cidr!r} (overlaps the VPC, {vpc}: every pod takes a VPC address with the VPC CNI, so "
                    "the cluster's own pods could write to the receiver)",
                    f"the sites' networks, outside network.cidr ({vpc})",
                    "list the networks the sites write from over the VPN or Direct Connect, or front Prometheus with "
                    "an ingress controller and name its namespace ({namespace: <its namespace>})",
                )
            )
    return issues


PRIVATE_NETWORKS = (IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12"), IPv4Network("192.168.0.0/16"))
"""RFC 1918's private ranges: a VPC's addresses, which its nodes and pods take, belong inside one of them."""


def _vpc_cidr_checks(cidr: IPv4Network) -> list[ConfigIssue]:
    """The VPC's CIDR: private, no wider than AWS allows, and roomy enough for the pods."""
    at = f"{CONFIG_KEY}.network.cidr"
    allowed = "a /16 to /20 inside 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 (RFC 1918)"
    if not any(cidr.subnet_of(private) for private in PRIVATE_NETWORKS):
        return [
            ConfigIssue(
                at,
                f"{cidr} (not in a private RFC 1918 range: the VPC's local route would shadow the outside networks "
                "that use these addresses)",
                allowed,
                "use a private range no other network you reach uses, e.g. 10.0.0.0/16",
            )
        ]
    if cidr.prefixlen < 16:
        # "The allowed block size is between a /16 netmask (65,536 IP addresses) and /28" (Amazon VPC, VPC CIDR blocks)
        return [ConfigIssue(at, f"{cidr} (wider than a VPC may be: AWS refuses it)", allowed, "use a /16")]
    if cidr.prefixlen > 20:
        # subnet_cidrs needs /22 at most (a public /28 per zone); /20 keeps each zone's private quarter a /22's
        # 1,019 addresses, one per pod with the VPC CNI.
        return [
            ConfigIssue(at, str(cidr), allowed, "use a larger CIDR: every pod takes a VPC address with the VPC CNI")
        ]
    return []


_CACHE_KIND_KEYS = {"elasticache": ("node_type", "replicas"), "in-cluster": ("memory_gib", "storage_gib")}
"""The cache keys only one ``cache.kind`` reads."""


def _cache_checks(env: CloudEnvironment) -> list[ConfigIssue]:
    """Keys the chosen cache kind ignores, and an in-cluster Redis bigger than a system node."""
    cache = env.cache
    issues: list[ConfigIssue] = []
    other = "in-cluster" if cache.kind == "elasticache" else "elasticache"
    for field in _CACHE_KIND_KEYS[other]:
        if field in cache.model_fields_set:
            key = to_camel(field)
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.cache.{key}",
                    f"{_show(getattr(cache, field))} with kind {cache.kind!r} (only kind: {other} reads it)",
                    f"{' and '.join(to_camel(f) for f in _CACHE_KIND_KEYS[other])} with kind: {other}",
                    (
                        "remove it: the in-cluster Redis runs one replica on a system node; for a replicated, "
                        "multi-AZ cache set kind: elasticache"
                        if cache.kind == "in-cluster"
                        else "remove it, or size ElastiCache with nodeType and replicas"
                    ),
                )
            )
    node = env.system_pool.spec
    allocatable_gib = node.allocatable_memory_mib / 1024
    if cache.kind == "in-cluster" and cache.memory_gib > allocatable_gib:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.cache.memoryGib",
                f"{cache.memory_gib} (the in-cluster Redis runs on a system node: {node.instance_type} has "
                f"{node.memory_gib} GiB, {allocatable_gib:.1f} GiB of it for pods)",
                f"at most {int(allocatable_gib)} GiB on {node.instance_type}",
                "lower cache.memoryGib, pick a larger systemPool.instanceType (an r family has 8 GiB per vCPU), "
                "or set kind: elasticache",
            )
        )
    return issues


def cluster_checks(env: CloudEnvironment) -> list[ConfigIssue]:
    """The pinned AMI release, and TLS on the gateway's load balancer (issue 12)."""
    issues: list[ConfigIssue] = []
    cluster = env.cluster
    release = cluster.ami_release_version
    example = f"{cluster.kubernetes_version}.5-20251120"
    if release is None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.cluster.amiReleaseVersion",
                "nothing",
                f"an EKS AL2023 AMI release for Kubernetes {cluster.kubernetes_version}, e.g. {example!r}",
                "pin the release (aws ssm get-parameter --name /aws/service/eks/optimized-ami/"
                f"{cluster.kubernetes_version}/amazon-linux-2023/x86_64/nvidia/recommended/release_version)",
            )
        )
    elif not release.startswith(cluster.kubernetes_version + "."):
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.cluster.amiReleaseVersion",
                f"{release!r} (kubernetesVersion is {cluster.kubernetes_version!r})",
                f"a release of Kubernetes {cluster.kubernetes_version}, e.g. {example!r}",
                "pin a release of the cluster's Kubernetes version",
            )
        )
    from components.aws.eks_cluster import ADDON_VERSIONS

    if cluster.kubernetes_version not in ADDON_VERSIONS:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.cluster.kubernetesVersion",
                repr(cluster.kubernetes_version),
                "a version with pinned EKS add-ons: " + ", ".join(ADDON_VERSIONS),
                "use a pinned version, or pin its add-ons in components/aws/eks_cluster.py:ADDON_VERSIONS",
            )
        )
    gateway = env.gateway
    if gateway.enabled and gateway.load_balancer != "none" and gateway.tls_certificate_arn is None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.tlsCertificateArn",
                f"nothing (loadBalancer is {gateway.load_balancer!r})",
                f"an ACM certificate ARN in {env.region}, e.g. arn:aws:acm:{env.region}:111122223333:certificate/…",
                "request or import a certificate in ACM and set its ARN, or set loadBalancer: none",
            )
        )
    elif gateway.tls_certificate_arn and gateway.tls_certificate_arn.split(":")[3] != env.region:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.tlsCertificateArn",
                repr(gateway.tls_certificate_arn),
                f"a certificate in the stack's region ({env.region}): an NLB uses ACM certificates of its own region",
                f"use a certificate issued or imported in {env.region}",
            )
        )
    if gateway.enabled and gateway.load_balancer == "internal" and gateway.hub_url is not None:
        from urllib.parse import urlsplit

        from components.gateway.gateway import TLS_PORT

        hub = urlsplit(gateway.hub_url)
        host = f"[{hub.hostname}]" if ":" in (hub.hostname or "") else hub.hostname  # an IPv6 address keeps its []
        if hub.scheme != "https" or hub.port not in (None, TLS_PORT):
            # The internal NLB's only listener (load_balancer_annotations): the sending side would dial a port nothing
            # answers on, and over http:// its burst key would cross the link in clear.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.gateway.hubUrl",
                    f"{gateway.hub_url!r} (the internal NLB listens only on {TLS_PORT}, with TLS)",
                    f"an https:// URL on port {TLS_PORT}: a private DNS name for the NLB that tlsCertificateArn names",
                    f"write {f'https://{host}{hub.path}'!r}",
                )
            )
    return issues


def repeated_names(names: list[str], key: str, what: str) -> list[ConfigIssue]:
    """A name listed twice, reported once: at the repeat, naming the first (not at both, as two problems)."""
    return [
        ConfigIssue(
            f"{CONFIG_KEY}.{key}[{j}].name",
            f"{name!r}, the name of {key}[{names.index(name)}] too",
            f"a name unique among {key}",
            f"rename one {what}",
        )
        for j, name in enumerate(names)
        if names.index(name) < j
    ]


def model_checks(env: Environment) -> list[ConfigIssue]:
    """Each model's pool exists, its engine runs its precision there, and it fits (with numbers)."""
    from components.serving._placement import PlacementProblem, place

    issues: list[ConfigIssue] = []
    pools = {p.name: p for p in env.gpu_pools}
    # An edge site's pools are its nodes[], and its replicas are fixed: no autoscaling (stacks.tiers, EDGE).
    site = isinstance(env, EdgeEnvironment)
    issues += repeated_names([m.name for m in env.models], "models", "model")
    for i, model in enumerate(env.models):
        at = f"{CONFIG_KEY}.models[{i}]"
        pool = pools.get(model.pool)
        if pool is None:
            issues.append(
                ConfigIssue(
                    f"{at}.pool",
                    repr(model.pool),
                    f"one of {'nodes' if site else 'gpuPools'}[].name: " + ", ".join(pools),
                    f"name an existing {'node' if site else 'pool'}" + did_you_mean(model.pool, list(pools)),
                )
            )
            continue
        scaling = model.autoscaling
        if scaling.max_replicas is not None and scaling.max_replicas < model.replicas:
            issues.append(
                ConfigIssue(
                    f"{at}.autoscaling.maxReplicas",
                    f"{scaling.max_replicas} (replicas is {model.replicas})",
                    f"≥ replicas ({model.replicas})",
                    "raise maxReplicas or lower replicas",
                )
            )
        if scaling.scale_to_zero and scaling.enabled and not env.gateway.enabled:
            issues.append(
                ConfigIssue(
                    f"{at}.autoscaling.scaleToZero",
                    "true with gateway.enabled: false",
                    "scale to zero behind the gateway only: its request count for the model is what wakes it",
                    "enable the gateway, or keep the model warm (scaleToZero: false)",
                )
            )
        if scaling.scale_to_zero and not scaling.enabled:
            # No ScaledObject without autoscaling: the model keeps `replicas`, and at 0 nothing ever starts one.
            issues.append(
                ConfigIssue(
                    f"{at}.autoscaling.scaleToZero",
                    "true with autoscaling.enabled: false (no ScaledObject: nothing takes the model to zero or wakes "
                    "it)",
                    "scaleToZero with autoscaling on: KEDA takes the idle model to zero and the gateway's requests "
                    "wake it",
                    "remove `enabled: false`, or remove scaleToZero and keep a fixed size (replicas ≥ 1)",
                )
            )
        if model.replicas == 0 and site:
            issues.append(
                ConfigIssue(
                    f"{at}.replicas",
                    "0 at a site, whose replicas are fixed (nothing scales a model up from zero)",
                    "≥ 1",
                    "set replicas: 1, or remove the model",
                )
            )
        elif model.replicas == 0 and not scaling.scale_to_zero:
            issues.append(
                ConfigIssue(
                    f"{at}.replicas",
                    "0 without autoscaling.scaleToZero",
                    "≥ 1 for an interactive model (warm capacity)",
                    "set replicas: 1, or opt in with autoscaling.scaleToZero: true"
                    + ("" if scaling.enabled else " and remove autoscaling.enabled: false"),
                )
            )
        if model.speculative is not None and model.engine != "vllm":
            issues.append(
                ConfigIssue(
                    f"{at}.speculative", f"set on a {model.engine} model", "vllm models only", "remove `speculative`"
                )
            )
        elif model.speculative is not None and model.speculative.method == "mtp":
            # vLLM drafts with the target's own MTP layers only for the architectures that carry them (DeepSeek-V3,
            # MiMo, ERNIE 4.5 MoE, Qwen3-Next: vllm/config/speculative.py); for any other it exits at start with
            # "num_speculative_tokens was provided but without speculative model". No catalog model has them.
            issues.append(
                ConfigIssue(
                    f"{at}.speculative.method",
                    f"'mtp' on {model.model}, which has no multi-token-prediction layers",
                    "eagle3 or eagle with a draft head (`model`), or ngram (mtp needs a model with MTP layers, "
                    "and no catalog model has them)",
                    "use method eagle3 with a draft head (`model`), or ngram",
                )
            )
        elif model.speculative is not None and model.speculative.method == "draft_model":
            # The pinned vLLM (components.catalog.images.VLLM, v0.11.0) has no separate-draft-model proposer: for a
            # draft that is not an EAGLE, Medusa, MLP-speculator or MTP checkpoint, SpeculativeConfig.__post_init__
            # (vllm/config/speculative.py) raises "NotImplementedError: Speculative decoding with draft model is not
            # supported yet", so the server exits at start after the node and both checkpoints were paid for (vLLM
            # issue #31883 reports the same on 0.13.0; the V1 proposer came with PR #24322). Left to plan, the fit
            # check would also have to count the draft's weights and KV cache, which that later vLLM loads by rules
            # of its own (the draft's quantization and KV-cache dtype): both wait for the image that runs it.
            issues.append(
                ConfigIssue(
                    f"{at}.speculative.method",
                    f"'draft_model' (draft {model.speculative.model}), which the pinned vLLM v0.11.0 does not run: it "
                    "exits at start with 'Speculative decoding with draft model is not supported yet'",
                    "eagle3 or eagle with a draft head (`model`), or ngram",
                    "use method eagle3 with an EAGLE-3 head trained for the target (e.g. "
                    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B for Llama 3.1 8B), or ngram",
                )
            )
        try:
            place(model, pool)
        except PlacementProblem as problem:
            issues.append(ConfigIssue(f"{at}.{problem.key}", problem.received, problem.allowed, problem.fix))
    return issues


def gateway_checks(env: Environment) -> list[ConfigIssue]:
    """Render the gateway's config with stand-in URLs and let the gateway's own schema judge it."""
    from components.gateway.gateway import gateway_config, keys_file, validate_config

    try:
        from inferstack_gateway.config import ConfigError as GatewayConfigError
    except ModuleNotFoundError:
        return [
            ConfigIssue(
                f"{CONFIG_KEY}.gateway",
                "a gateway to deploy, but the inferstack-gateway package is not installed",
                "a validated gateway config (the gateway's own schema checks it)",
                "pip install -e images/gateway (or set gateway.enabled: false)",
            )
        ]

    from components.gateway.gateway import HUB, HubUpstream, embedder_for

    urls = {m.name: f"http://{m.name}.validation:8000/v1" for m in env.models}
    urls["$embeddings"] = "http://embeddings.validation:8080/v1"
    embedder = next((e for m in env.models if (e := embedder_for(m.model, urls["$embeddings"]))), None)
    hub_spec = getattr(env, "hub", None)
    hub = None
    if hub_spec is not None:
        urls[HUB] = "http://hub.validation/v1"
        hub = HubUpstream(url=urls[HUB], api_key="validation", model=hub_spec.model, fallback=hub_spec.fallback)
    try:
        config = gateway_config(env.gateway, list(env.models), urls, otlp_endpoint=None, embedder=embedder, hub=hub)
        validate_config(config)
        # The keys file too (as the gateway reads auth.keys_file): residency-local keys need a local upstream.
        import yaml

        from inferstack_gateway.config import ApiKeyConfig, check_residency_keys, parse_config

        parsed = parse_config(config, env={"GATEWAY_REDIS_URL": "redis://validation:6379", "HUB_API_KEY": "v"})
        keys = [ApiKeyConfig(**k) for k in yaml.safe_load(keys_file(env.gateway, "validation")) or []]
        check_residency_keys(parsed, keys, "gateway.apiKeys (rendered keys file)")
    except GatewayConfigError as err:
        return [
            ConfigIssue(
                f"{CONFIG_KEY}.gateway",
                "a config the gateway refuses",
                str(err).replace("\n", " "),
                "change the gateway section (see images/gateway/README.md)",
            )
        ]
    return []


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _path(loc: tuple[int | str, ...]) -> str:
    out = CONFIG_KEY
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _model_at(loc: tuple[int | str, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    """The pydantic model that owns the last key of ``loc``, following aliases and list items."""
    model: Any = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        candidates = [annotation, *args]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return None
    return model if isinstance(model, type) else None


def _raw_at(raw: Any, loc: tuple[int | str, ...]) -> Any:
    """The raw value at ``loc`` (keys as the stack file spells them), or ``None``."""
    for part in loc:
        if isinstance(part, int) and isinstance(raw, list | tuple) and part < len(raw):
            raw = raw[part]
        elif isinstance(part, str) and isinstance(raw, dict):
            raw = raw.get(part)
        else:
            return None
    return raw


def _misspelt_keys(errors: list[Any], raw: Any, root: type[BaseModel]) -> dict[tuple[int | str, ...], str]:
    """Unknown keys that are a misspelling of a key their mapping lacks: the unknown key's loc → the key meant."""
    meant = {}
    for error in errors:
        loc = tuple(error["loc"])
        if error["type"] != "extra_forbidden":
            continue
        model, mapping = _model_at(loc, root), _raw_at(raw, loc[:-1])
        if model is None or not isinstance(mapping, dict):
            continue
        absent = [
            f.alias or n for n, f in model.model_fields.items() if (f.alias or n) not in mapping and n not in mapping
        ]
        close = difflib.get_close_matches(str(loc[-1]).casefold(), [k.casefold() for k in absent], n=1)
        if close:
            meant[loc] = next(k for k in absent if k.casefold() == close[0])
    return meant


def _follows_from(error: Any, parent: tuple[int | str, ...], key: str) -> bool:
    """``error`` is about ``parent.key`` being absent: it is at that key (spelt camelCase, or in Python for a default's
    error), or a rule of the section (at it or one of its keys) that names the key."""
    loc = tuple(error["loc"])
    if loc == parent:
        return error["type"] == "inferstack" and key in error["msg"]
    if len(loc) != len(parent) + 1 or loc[:-1] != parent or not isinstance(loc[-1], str):
        return False
    return to_camel(loc[-1]) == key or (error["type"] == "inferstack" and key in error["msg"])


_TYPE_FIXES = {
    "int": ("a whole number", "write it without quotes or decimals, e.g. 2"),
    "float": ("a number", "write it without quotes, e.g. 2.5"),
    "bool": ("true or false", "write true or false without quotes"),
    "string": ("a string", "quote the value"),
    "tuple": ("a list", "write a YAML list, e.g. [a, b]"),
    "list": ("a list", "write a YAML list, e.g. [a, b]"),
    "dict": ("a mapping", "write `key: value` pairs"),
    "model": ("a mapping", "write `key: value` pairs"),
    "ip_v4_network": ("an IPv4 CIDR such as 10.0.0.0/16", "write the network address with its prefix length"),
}


def _issue_from_pydantic(error: Any, root: type[BaseModel], meant: str | None = None) -> ConfigIssue:
    """One pydantic error as a ConfigIssue; ``meant``: for an unknown key, the absent key it misspells."""
    loc = tuple(error["loc"])
    owner = _model_at(loc, root)
    if owner is not None and loc and isinstance(loc[-1], str) and loc[-1] in owner.model_fields:
        # A default that fails its validator (validate_default) is reported under the field's Python name; the
        # stack file spells it camelCase.
        loc = (*loc[:-1], owner.model_fields[loc[-1]].alias or loc[-1])
    kind = error["type"]
    received = _show(error.get("input")) if kind != "missing" else "nothing"
    if loc[-1:] == ("[key]",):
        # A mapping's key (``nodeSelector: {"a b": x}``): pydantic reports it at <mapping>.<key>.[key].
        loc, received = loc[:-2], f"the key {received}"
    path = _path(loc)
    ctx = error.get("ctx") or {}
    if kind == "inferstack":
        return ConfigIssue(path, f"{received} ({error['msg']})", ctx["allowed"], ctx["fix"])
    if kind == "extra_forbidden":
        model = _model_at(loc, root)
        keys = [f.alias or n for n, f in model.model_fields.items()] if model else []
        if meant is not None:
            return ConfigIssue(
                path,
                f"unknown key {str(loc[-1])!r}",
                ", ".join(keys),
                f"rename it to `{meant}`, which this section needs",
            )
        return ConfigIssue(
            path,
            f"unknown key {str(loc[-1])!r}",
            ", ".join(keys) or "no other keys",
            "remove the key" + (did_you_mean(str(loc[-1]), keys).replace(" (", ", or rename it (") if keys else ""),
        )
    if kind == "missing":
        return ConfigIssue(
            path, "nothing", "a value (this key is required)", f"add `{loc[-1]}`; see the README's config reference"
        )
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        return ConfigIssue(path, received, expected, "use one of the allowed values")
    if kind == "string_pattern_mismatch":
        allowed, fix = PATTERN_HELP.get(ctx.get("pattern", ""), (f"a value matching {ctx.get('pattern')}", ""))
        return ConfigIssue(path, received, allowed, fix or "see the README's config reference")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        bound = error["msg"].replace("Input should be ", "")
        return ConfigIssue(path, received, bound, f"use a number {bound}")
    if kind == "finite_number":
        # YAML's .nan and .inf (Spec: allow_inf_nan=False).
        return ConfigIssue(path, received, "a finite number", "write the number itself, e.g. 2")
    if kind in ("too_short", "too_long"):
        least = kind == "too_short"
        count = ctx.get("min_length" if least else "max_length")
        items = "item" if count == 1 else "items"
        return ConfigIssue(
            path,
            received,
            f"{'at least' if least else 'at most'} {count} {items}",
            "add items" if least else "remove items",
        )
    for prefix, (allowed, fix) in _TYPE_FIXES.items():
        if kind.startswith(prefix):
            return ConfigIssue(path, received, allowed, fix)
    return ConfigIssue(path, received, error["msg"], "see the README's config reference")
