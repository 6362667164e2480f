"""The gateway's configuration: one YAML file, validated into one frozen pydantic model.

This module imports only pydantic and PyYAML so that the Pulumi component can import `GatewayConfig`,
build it from the stack's config and render the ConfigMap with `render_yaml` without pulling in the
server's dependencies.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "ApiKeyConfig",
    "AuthConfig",
    "BudgetsConfig",
    "CacheConfig",
    "CircuitBreakerConfig",
    "ComplexityRule",
    "ConfigError",
    "EmbeddingsConfig",
    "GatewayConfig",
    "LimitsConfig",
    "ModelConfig",
    "RedisConfig",
    "RoutingConfig",
    "SemanticCacheConfig",
    "ServerConfig",
    "SpilloverConfig",
    "TierConfig",
    "TracingConfig",
    "UpstreamConfig",
    "check_residency_keys",
    "interpolate_env",
    "load_config",
    "load_keys_file",
    "parse_config",
    "remote_only_tier",
    "render_yaml",
]

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")]
PositiveMs = Annotated[float, Field(gt=0)]


class ConfigError(Exception):
    """A configuration problem. `str()` is the message a user sees: it names the key path and the fix."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _http_url(value: str, what: str) -> str:
    if not re.match(r"^https?://[^\s/]+", value):
        raise PydanticCustomError(
            "url", "{what} must be an http:// or https:// URL, got {value}", {"what": what, "value": repr(value)}
        )
    return value.rstrip("/")


class ServerConfig(_Frozen):
    """Where and how the gateway listens."""

    host: str = "0.0.0.0"
    """Interface to bind. The pod network decides reachability; the Service is internal by default."""
    port: int = Field(default=8080, ge=1, le=65535)
    """TCP port."""
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Larger request bodies are refused with 413 before they are parsed."""
    upstream_connections: int = Field(default=1024, ge=1)
    """Most connections open at once to one upstream origin (a keep-alive pool each); more requests wait for one."""
    keepalive_s: int = Field(default=75, ge=1, le=3600)
    """How long an idle client connection stays open. It must outlast the idle time of the clients' own connection
    pools (aiohttp's 15 s, httpx's 5 s): when the server closes first, a client can send its next request on a
    connection that is being closed, and that request is lost or hangs until the client's timeout. uvicorn's default
    of 5 s did this to requests that the official openai client (aiohttp transport) sent after about 5 s idle."""
    tls_cert_file: str | None = None
    """PEM certificate chain. With `tls_key_file` the gateway serves HTTPS itself (TLS 1.2 and 1.3), for a load
    balancer that forwards TCP (on-prem, edge): API keys and prompts never cross the network in clear text. Mount both
    from a `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`)."""
    tls_key_file: str | None = None
    """The certificate's PEM private key."""
    request_read_timeout_s: float = Field(default=20, gt=0, le=600)
    """How long a client has to send a request's headers once it has begun, and then again its body: a client that
    trickles them (slowloris) or stops half-way gets 408 and its connection is closed, instead of holding it for good.
    A new connection that sends nothing is closed after `keepalive_s`, like an idle one."""
    access_log: bool = True
    """One structured JSON line per request, with its request id."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Level of the gateway's JSON logs."""

    @model_validator(mode="after")
    def _tls_pair(self) -> Self:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            missing = "tls_key_file" if self.tls_key_file is None else "tls_cert_file"
            raise PydanticCustomError(
                "config",
                "set tls_cert_file and tls_key_file together (HTTPS needs both). Fix: set {missing} too, or neither",
                {"path": missing, "missing": missing},
            )
        return self


class RedisConfig(_Frozen):
    """The cache and the shared rate-limit counters. Standalone Redis 8, Redis Stack, Valkey or ElastiCache."""

    url: str | None = None
    """redis:// or rediss:// URL. Without one, caching is off and rate limits are per replica."""
    key_prefix: str = "inferstack:"
    """Prefix of every key and of the vector index name, so several gateways can share one Redis."""
    timeout_ms: PositiveMs = 50
    """Socket connect/read timeout: a Redis that leaves a command unanswered this long is treated as down (for
    `retry_after_ms`). The stage budgets cut each lookup shorter than this."""
    max_connections: int = Field(default=128, ge=1)
    """Connection pool size per worker."""
    retry_after_ms: PositiveMs = 1000
    """After a Redis error, skip Redis for this long instead of paying a timeout on every request."""
    near_cache_mb: int = Field(default=32, ge=0, le=4096)
    """Exact-cache entries kept in each worker's memory too, up to this many MB (least recently used evicted first),
    so that a repeated hit costs no Redis round trip. Kept true by Redis's client tracking (RESP3 invalidations on
    every write, delete, expiry and flush, Redis 6 or later); a Redis that refuses it leaves this off. An entry is
    re-read at least every 60 s (SWAPDB is not invalidated). 0: off."""
    miss_filter_keys: int = Field(default=1_000_000, ge=0, le=100_000_000)
    """Each worker keeps a Bloom filter of the exact-cache keys Redis holds, sized for this many keys at 1% false
    positives (1.2 MB at 1,000,000), so that a key Redis has never held is a miss with no round trip. Learned by a SCAN
    of the prefix when the lookup connection opens and again every hour, and kept up by Redis's client tracking in
    broadcast mode on that prefix (a push for every exact key written, deleted or expired, Redis 6 or later). Past this
    many keys it still answers truly, with more round trips. At most 100,000,000 (120 MB, twice that during a
    rebuild). SWAPDB is not pushed: the keys it brings in are misses until the next rebuild. 0: off, every exact lookup
    is a round trip."""

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(redis|rediss|unix)://", value):
            raise PydanticCustomError(
                "url", "must start with redis://, rediss:// or unix://, got {value}", {"value": repr(value)}
            )
        return value


class EmbeddingsConfig(_Frozen):
    """An OpenAI-compatible /v1/embeddings endpoint, used only by the semantic cache."""

    url: str | None = None
    """Base URL including /v1, e.g. http://embeddings:8000/v1. Required when any model enables the semantic cache."""
    model: str = "all-MiniLM-L6-v2"
    """Model name sent in the embeddings request."""
    dimensions: int = Field(default=384, ge=2, le=8192)
    """Vector size of that model; part of the index definition."""
    timeout_ms: PositiveMs = 500
    """Deadline of one embeddings call. The lookup waits at most budgets.semantic_cache_ms of it; the write-back
    reuses the same call, so a slow embedding still lands in the cache."""
    api_key: SecretStr | None = None
    """Bearer token for the embeddings endpoint, if it needs one."""
    max_input_tokens: int | None = Field(default=None, ge=1)
    """The longest prompt the model embeds, in tokens (estimated at ~4 characters each, as for routing). A longer
    single-turn prompt skips the semantic cache, lookup and write-back, without calling the endpoint: a server refuses
    input past its window (llama.cpp answers HTTP 500 past its 512-token batch), and a refusal would take the endpoint
    out for every request for 1 s. The estimate undercounts CJK text, digits and code: a refusal of an input that may
    be past the window (more UTF-8 bytes than it) is counted as too long as well, and leaves the endpoint up. Unset:
    every single-turn prompt is embedded."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value, "embeddings.url")


class BudgetsConfig(_Frozen):
    """Latency budget per stage. A cache stage that overruns is skipped; an upstream that overruns fails over."""

    exact_cache_ms: PositiveMs = 5
    """Exact-cache lookup (one Redis round trip, shared with the rate-limit counters)."""
    semantic_cache_ms: PositiveMs = 50
    """Semantic lookup: embedding plus KNN query."""
    upstream_connect_ms: PositiveMs = 500
    """TCP connect to one upstream; past it the next upstream is tried."""
    upstream_ttft_ms: PositiveMs = 10_000
    """Streaming: time to the first event from one upstream, after which the next upstream is tried."""
    request_ms: PositiveMs = 300_000
    """The whole request. Past it the client gets 504 (or the stream ends with an error event)."""


class CircuitBreakerConfig(_Frozen):
    """Per-upstream circuit breaker."""

    failures_to_open: int = Field(default=5, ge=1)
    """Consecutive failures that open the circuit."""
    open_s: float = Field(default=10, gt=0)
    """How long an open circuit skips the upstream before one probe request is let through."""


class UpstreamConfig(_Frozen):
    """One OpenAI-compatible server: vLLM, trtllm-serve, Triton's OpenAI frontend, or another gateway."""

    url: str
    """Base URL including /v1, e.g. http://vllm-small:8000/v1."""
    model: str | None = None
    """Model name the server serves. Default: the alias the client asked for."""
    api_key: SecretStr | None = None
    """Bearer token sent upstream. Give it as ${VAR} (mapped from a Secret), never as text in the config."""
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    """When to stop sending to a failing upstream."""
    kind: Literal["local", "remote"] = "local"
    """local: a server of this tier. remote: the hub, another inferstack gateway in another tier, reached over the
    private link (VPN / Direct Connect to its internal load balancer). Requests marked `residency: local` are never
    sent to a remote upstream, and the metrics count its traffic as burst."""
    api_key_file: str | None = None
    """File holding the bearer token (a mounted Kubernetes Secret), read once at start; relative to the config file.
    The alternative to api_key for a hub's burst key."""
    max_inflight: int | None = Field(default=None, ge=1)
    """At most this many requests in flight to this upstream from one gateway replica; past it the upstream counts as
    saturated and is skipped like an open circuit (the next upstream of the tier is tried). Unset: no cap."""
    ca_file: str | None = None
    """https only: PEM file of the CA certificate(s) the upstream's certificate must chain to, trusted instead of the
    system's store (a hub whose gateway serves a certificate of the site's private CA); relative to the config
    file. Read at start: a missing or unreadable file stops the gateway with one line."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "url")

    @model_validator(mode="after")
    def _remote_key(self) -> Self:
        if self.ca_file is not None and not self.url.startswith("https://"):
            raise PydanticCustomError(
                "config",
                "ca_file is for an https:// upstream, and url is {url}. Fix: use the upstream's https:// URL, or "
                "remove ca_file",
                {"path": "ca_file", "url": repr(self.url)},
            )
        has_key = self.api_key is not None and bool(self.api_key.get_secret_value())
        if has_key and self.api_key_file is not None:
            raise PydanticCustomError(
                "config", "set api_key or api_key_file, not both. Fix: keep one of them", {"path": "api_key_file"}
            )
        if self.kind == "remote" and not has_key and self.api_key_file is None:
            raise PydanticCustomError(
                "config",
                "a remote upstream (the hub) needs the hub's burst API key. Fix: set api_key: ${HUB_API_KEY} with "
                "HUB_API_KEY from a Secret, or api_key_file: <path of the mounted Secret>",
                {"path": "api_key"},
            )
        return self


class SpilloverConfig(_Frozen):
    """Burst: send new requests to the tier's remote upstreams while its local upstreams are loaded, with hysteresis.

    The tier starts spilling when a `spill_above_*` threshold is reached and returns once every configured load
    signal is under its `return_below_*` threshold. Load is counted per gateway replica."""

    spill_above_inflight: int | None = Field(default=None, ge=1)
    """Requests in flight to the tier's local upstreams (from this replica) at which new requests start to spill."""
    return_below_inflight: int | None = Field(default=None, ge=1)
    """In-flight count under which the tier serves locally again. Default: half of spill_above_inflight (at least 1)."""
    spill_above_ttft_ms: PositiveMs | None = None
    """Moving average (EWMA, weight 0.2) of the local upstreams' time to the first streamed event with output (text,
    a tool call; not a role-only opening event), observed as each stream ends, at which the tier starts to spill.
    While spilling, an idle local upstream still gets a request, so the average keeps moving."""
    return_below_ttft_ms: PositiveMs | None = None
    """TTFT average under which the tier serves locally again. Default: half of spill_above_ttft_ms."""

    @model_validator(mode="after")
    def _thresholds(self) -> Self:
        if self.spill_above_inflight is None and self.spill_above_ttft_ms is None:
            raise PydanticCustomError(
                "config",
                "spillover has no threshold. Fix: set spill_above_inflight (e.g. the local server's max_num_seqs) "
                "and/or spill_above_ttft_ms",
                {"path": "spill_above_inflight"},
            )
        for signal in ("inflight", "ttft_ms"):
            above, below = getattr(self, f"spill_above_{signal}"), getattr(self, f"return_below_{signal}")
            if above is None and below is not None:
                raise PydanticCustomError(
                    "config",
                    "return_below_{signal} is set without spill_above_{signal}. Fix: set spill_above_{signal} too",
                    {"signal": signal},
                )
            if above is not None and below is not None and below >= above:
                raise PydanticCustomError(
                    "config",
                    "return_below_{signal} ({below}) must be under spill_above_{signal} ({above}), or the tier flaps. "
                    "Fix: lower return_below_{signal}",
                    {"signal": signal, "below": below, "above": above},
                )
        return self

    @property
    def return_inflight(self) -> int | None:
        """return_below_inflight, or its default: half of spill_above_inflight."""
        if self.spill_above_inflight is None:
            return None
        if self.return_below_inflight is None:
            return max(1, self.spill_above_inflight // 2)
        return self.return_below_inflight

    @property
    def return_ttft_ms(self) -> float | None:
        """return_below_ttft_ms, or its default: half of spill_above_ttft_ms."""
        if self.spill_above_ttft_ms is None:
            return None
        return self.spill_above_ttft_ms / 2 if self.return_below_ttft_ms is None else self.return_below_ttft_ms


class TierConfig(_Frozen):
    """A tier is an ordered failover list of upstreams serving one class of model (small, large)."""

    upstreams: list[Name] = Field(min_length=1)
    """Names under `upstreams:`, tried in order on connect errors, 5xx and timeouts before the first event. A remote
    upstream (the hub) in the list is the fallback when the local ones are down or saturated; a tier with only remote
    upstreams is served by the hub alone."""
    spillover: SpilloverConfig | None = None
    """Burst to the tier's remote upstreams above a load threshold. Unset: remote upstreams are only a fallback."""


class ComplexityRule(_Frozen):
    """Escalate to `tier` when ANY of the given conditions holds."""

    tier: Name
    """Tier to use when the rule matches."""
    min_prompt_tokens: int | None = Field(default=None, ge=1)
    """Estimated prompt tokens (characters / 4) at or above which the rule matches."""
    min_turns: int | None = Field(default=None, ge=1)
    """Number of user messages at or above which the rule matches."""
    keywords: list[str] = []
    """Case-insensitive substrings of the last user message that make the rule match."""

    @model_validator(mode="after")
    def _has_condition(self) -> Self:
        if self.min_prompt_tokens is None and self.min_turns is None and not self.keywords:
            raise PydanticCustomError(
                "config",
                "a complexity rule for tier {tier} has no condition. Fix: set min_prompt_tokens, min_turns or keywords",
                {"tier": repr(self.tier)},
            )
        return self


class SemanticCacheConfig(_Frozen):
    """Vector-similarity cache for single-turn requests, partitioned by tenant, model and prompt version."""

    enabled: bool = False
    """Look up and store single-turn requests by embedding."""
    max_distance: float = Field(default=0.1, ge=0, le=2)
    """Cosine distance at or under which a stored answer is served. 0.2 serves wrong answers with MiniLM
    ("delete" vs "reset my password" is 0.19); keep it strict."""
    ttl_s: int = Field(default=3600, ge=1)
    """Lifetime of a semantic entry."""


class CacheConfig(_Frozen):
    """What is cached for one model alias."""

    policy: Literal["temperature_zero", "always", "never"] = "temperature_zero"
    """temperature_zero: only requests with temperature 0 (or opted in per request). always: every request.
    never: nothing."""
    allow_request_opt_in: bool = True
    """Honour the `x-inferstack-cache-opt-in: true` request header for non-zero temperatures."""
    exact: bool = True
    """Exact cache on the deterministic request key."""
    ttl_s: int = Field(default=3600, ge=1)
    """Lifetime of an exact entry."""
    semantic: SemanticCacheConfig = SemanticCacheConfig()
    """Semantic cache."""


class ModelConfig(_Frozen):
    """A model alias clients send in `model`."""

    tier: Name
    """Default tier."""
    version: str = "1"
    """Model version; part of every cache key. Bump it when the weights change to invalidate the cache."""
    prompt_version: str = "1"
    """Default prompt version (clients may send the routing.prompt_version_header). Part of every cache key."""
    complexity: list[ComplexityRule] = []
    """Escalation rules, first match wins."""
    cache: CacheConfig = CacheConfig()
    """Caching for this alias."""
    residency: Literal["any", "local"] = "any"
    """local: requests for this alias never leave this tier (never sent to a remote upstream); under overload they
    get a 503 with Retry-After instead."""


class RoutingConfig(_Frozen):
    """Request headers that steer routing."""

    tier_header: str = "x-inferstack-tier"
    """A request header naming a tier of the model (its default tier or a complexity tier) overrides the rules."""
    prompt_version_header: str = "x-inferstack-prompt-version"
    """A request header carrying the prompt version."""

    @field_validator("tier_header", "prompt_version_header")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class ApiKeyConfig(_Frozen):
    """One API key. Stored as its SHA-256; a plaintext `key` (from ${ENV}) is hashed at load and dropped."""

    tenant: Name
    """Tenant the key belongs to. Cache entries never cross tenants."""
    name: str | None = None
    """Label for logs and metrics. Default: the first 8 hex digits of the hash."""
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    """Lower-case hex SHA-256 of the key: `printf %s "$KEY" | sha256sum`."""
    key: SecretStr | None = None
    """The key itself, for local use with ${GATEWAY_API_KEY}. Prefer key_sha256 or auth.keys_file."""
    requests_per_minute: int | None = Field(default=None, ge=1)
    """Override of limits.requests_per_minute for this key."""
    tokens_per_minute: int | None = Field(default=None, ge=1)
    """Override of limits.tokens_per_minute for this key."""
    residency: Literal["any", "local"] = "any"
    """local: this key's requests never leave this tier (never sent to a remote upstream), even at saturation."""
    models: list[Name] = []
    """Model aliases this key may use and sees in /v1/models (others get 404 model_not_found). Empty: every alias."""

    @model_validator(mode="after")
    def _exactly_one_secret(self) -> Self:
        if (self.key_sha256 is None) == (self.key is None or not self.key.get_secret_value()):
            raise PydanticCustomError(
                "config",
                "api key of tenant {tenant} needs exactly one of key_sha256 or key (got {got}). Fix: keep key_sha256 "
                "and remove key, or set key to a non-empty value",
                {"tenant": repr(self.tenant), "got": "both" if self.key_sha256 else "neither"},
            )
        return self


class AuthConfig(_Frozen):
    """API-key authentication."""

    enabled: bool = True
    """Require `Authorization: Bearer <key>` on /v1/*. Turn off only behind another authenticating proxy."""
    keys: list[ApiKeyConfig] = []
    """Keys given inline."""
    keys_file: str | None = None
    """YAML list of keys (same fields, hashed), typically a mounted Kubernetes Secret. Relative to the config file."""


class LimitsConfig(_Frozen):
    """Default per-key rate limits, shared across replicas through Redis (per replica while Redis is down)."""

    requests_per_minute: int = Field(default=600, ge=1)
    """Requests per key per minute."""
    tokens_per_minute: int = Field(default=400_000, ge=1)
    """Prompt + completion tokens per key per minute (estimated at admission, corrected from usage)."""


class TracingConfig(_Frozen):
    """Optional OTLP tracing (needs the `tracing` extra)."""

    otlp_endpoint: str | None = None
    """OTLP/gRPC collector, e.g. http://otel-collector:4317. Unset: no tracing, no import cost."""
    service_name: str = "inferstack-gateway"
    """service.name resource attribute."""


class GatewayConfig(_Frozen):
    """The whole gateway configuration."""

    server: ServerConfig = ServerConfig()
    redis: RedisConfig = RedisConfig()
    embeddings: EmbeddingsConfig = EmbeddingsConfig()
    budgets: BudgetsConfig = BudgetsConfig()
    upstreams: dict[Name, UpstreamConfig] = Field(min_length=1)
    tiers: dict[Name, TierConfig] = Field(min_length=1)
    models: dict[Name, ModelConfig] = Field(min_length=1)
    routing: RoutingConfig = RoutingConfig()
    auth: AuthConfig = AuthConfig()
    limits: LimitsConfig = LimitsConfig()
    tracing: TracingConfig = TracingConfig()

    @model_validator(mode="after")
    def _references(self) -> Self:
        for tier_name, tier in self.tiers.items():
            for i, upstream in enumerate(tier.upstreams):
                if upstream not in self.upstreams:
                    _reference_error(f"tiers.{tier_name}.upstreams.{i}", upstream, "upstreams", self.upstreams)
        for alias, model in self.models.items():
            if model.tier not in self.tiers:
                _reference_error(f"models.{alias}.tier", model.tier, "tiers", self.tiers)
            for i, rule in enumerate(model.complexity):
                if rule.tier not in self.tiers:
                    _reference_error(f"models.{alias}.complexity.{i}.tier", rule.tier, "tiers", self.tiers)
            caching = model.cache.policy != "never"
            if caching and (model.cache.exact or model.cache.semantic.enabled) and self.redis.url is None:
                raise PydanticCustomError(
                    "config",
                    "models.{alias}.cache needs a Redis. Fix: set redis.url, or set models.{alias}.cache.policy: never",
                    {"alias": alias, "path": "redis.url"},
                )
            if caching and model.cache.semantic.enabled and self.embeddings.url is None:
                raise PydanticCustomError(
                    "config",
                    "models.{alias}.cache.semantic.enabled is true but embeddings.url is not set. Fix: set "
                    "embeddings.url to an OpenAI-compatible base URL (…/v1), or disable the semantic cache",
                    {"alias": alias, "path": "embeddings.url"},
                )
        _hybrid_checks(self)
        if self.auth.enabled and not self.auth.keys and self.auth.keys_file is None:
            raise PydanticCustomError(
                "config",
                "auth.enabled is true but no key is configured. Fix: add auth.keys or auth.keys_file, or set "
                "auth.enabled: false behind another authenticating proxy",
                {"path": "auth"},
            )
        return self

    def tiers_of(self, alias: str) -> frozenset[str]:
        """Tiers a request for `alias` may land on: its default tier and every complexity tier."""
        model = self.models[alias]
        return frozenset([model.tier, *(rule.tier for rule in model.complexity)])


def _hybrid_checks(config: GatewayConfig) -> None:
    """Spillover needs a local and a remote upstream; residency-local routes and keys need a local upstream."""
    # Runs after the reference checks: every name used here is defined.
    for tier_name, tier in config.tiers.items():
        kinds = {config.upstreams[name].kind for name in tier.upstreams}
        if tier.spillover is not None and kinds != {"local", "remote"}:
            missing = "local" if "local" not in kinds else "remote"
            raise PydanticCustomError(
                "config",
                "tiers.{tier}.spillover needs a {missing} upstream in tiers.{tier}.upstreams (it spills from the local "
                "ones to the remote ones). Fix: add an upstream with kind: {missing}, or remove spillover",
                {"tier": tier_name, "missing": missing},
            )
        spill_ms = None if tier.spillover is None else tier.spillover.spill_above_ttft_ms
        budget_ms = config.budgets.upstream_ttft_ms
        if spill_ms is not None and spill_ms >= budget_ms:
            # The TTFT average is of the streams that got a first event within budgets.upstream_ttft_ms; a slower one
            # fails over and is not averaged, so the average never reaches such a threshold.
            raise PydanticCustomError(
                "config",
                "tiers.{tier}.spillover.spill_above_ttft_ms ({spill}) is not under budgets.upstream_ttft_ms "
                "({budget}): a stream slower than that fails over and is never averaged, so the tier never spills on "
                "latency. Fix: lower spill_above_ttft_ms below {budget}, or raise budgets.upstream_ttft_ms",
                {
                    "tier": tier_name,
                    "spill": f"{spill_ms:g}",
                    "budget": f"{budget_ms:g}",
                    "path": f"tiers.{tier_name}.spillover",
                },
            )
    for alias, model in config.models.items():
        if model.residency == "local":
            _residency_error(config, alias, f"models.{alias}.residency")
        for i, key in enumerate(config.auth.keys):
            if key.residency == "local" and (not key.models or alias in key.models):
                _residency_error(config, alias, f"auth.keys.{i} (tenant {key.tenant!r}) residency")
    for i, key in enumerate(config.auth.keys):
        for alias in key.models:
            if alias not in config.models:
                _reference_error(f"auth.keys.{i}.models", alias, "models", config.models)


def remote_only_tier(config: GatewayConfig, alias: str) -> str | None:
    """A tier that requests for `alias` may land on and that has no local upstream, if there is one."""
    for tier in sorted(config.tiers_of(alias)):
        if all(config.upstreams[name].kind == "remote" for name in config.tiers[tier].upstreams):
            return tier
    return None


def _residency_error(config: GatewayConfig, alias: str, what: str) -> None:
    tier = remote_only_tier(config, alias)
    if tier is None:
        return
    raise PydanticCustomError(
        "config",
        "{what} is local, but model {alias} can route to tier {tier}, which has only remote upstreams ({names}): "
        "such requests could never be served. Fix: add a local upstream to tiers.{tier_key}.upstreams, give "
        "residency-local traffic a model alias whose tiers have a local upstream (and list it in the key's models), "
        "or remove residency: local",
        {
            "what": what,
            "alias": repr(alias),
            "tier": repr(tier),
            "tier_key": tier,
            "names": ", ".join(config.tiers[tier].upstreams),
        },
    )


def check_residency_keys(config: GatewayConfig, keys: list[ApiKeyConfig], source: str) -> None:
    """The residency check for keys read from auth.keys_file (inline keys are checked with the config)."""
    for i, key in enumerate(keys):
        for alias in key.models:
            if alias not in config.models:
                raise ConfigError(
                    f"{source}, item {i}: models: {alias!r} is not defined under `models:`. "
                    f"Fix: use one of {', '.join(sorted(config.models))}"
                )
        if key.residency != "local":
            continue
        for alias in key.models or sorted(config.models):
            tier = remote_only_tier(config, alias)
            if tier is not None:
                raise ConfigError(
                    f"{source}, item {i} (tenant {key.tenant!r}): residency is local, but model {alias!r} can route to "
                    f"tier {tier!r}, which has only remote upstreams. Fix: add a local upstream to tiers.{tier}."
                    "upstreams, list only local model aliases in this key's models, or remove residency: local"
                )


def _reference_error(path: str, value: str, section: str, known: Mapping[str, object]) -> None:
    raise PydanticCustomError(
        "config",
        "{path}: {value} is not defined under `{section}:`. Fix: use one of {known}, or add it under `{section}:`",
        {"path": path, "value": repr(value), "section": section, "known": ", ".join(sorted(known)) or "(none)"},
    )


# ---------------------------------------------------------------------------------------------------------------
# Loading: YAML -> ${VAR} interpolation -> pydantic, with errors that name the key and the fix.

_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})")


def interpolate_env(data: Any, env: Mapping[str, str], path: str = "") -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string scalar; `$$` is a literal `$`."""
    if isinstance(data, dict):
        return {key: interpolate_env(value, env, f"{path}.{key}" if path else str(key)) for key, value in data.items()}
    if isinstance(data, list):
        return [interpolate_env(value, env, f"{path}.{i}") for i, value in enumerate(data)]
    if not isinstance(data, str) or "$" not in data:
        return data

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(
                    f"{path}: environment variable {name} is not set. "
                    f"Fix: export {name}, or write ${{{name}:-<default>}} in the config"
                )
            return default
        return value

    return _VAR.sub(replace, data)


def _format_validation_error(error: ValidationError, source: str) -> ConfigError:
    lines = [f"invalid gateway config ({source}):"]
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        ctx = item.get("ctx") or {}
        kind = item["type"]
        if kind == "config":
            lines.append(f"  {path}: {item['msg']}" if path else f"  {item['msg']}")
            continue
        received = item.get("input")
        if kind == "missing":
            fix = "add this key"
        elif kind == "extra_forbidden":
            fix = "remove it or fix its spelling"
        elif kind == "literal_error":
            fix = f"use one of {ctx.get('expected')}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            fix = "use a value in range"
        else:
            fix = "see images/gateway/config.example.yaml for the expected shape"
        shown = "" if kind in ("missing", "extra_forbidden") and received is None else f" (got {received!r})"
        if isinstance(received, dict | list) or "key" in path.rsplit(".", 1)[-1] or "api_key" in path:
            shown = ""  # never echo secrets or whole sections
        lines.append(f"  {path or '(top level)'}: {item['msg']}{shown}. Fix: {fix}")
    return ConfigError("\n".join(lines))


def parse_config(data: Any, *, env: Mapping[str, str] | None = None, source: str = "<config>") -> GatewayConfig:
    """Validate an already-parsed YAML document (after ${VAR} interpolation from `env`, default os.environ)."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"invalid gateway config ({source}): the top level must be a mapping, got {type(data).__name__}"
        )
    data = interpolate_env(data, os.environ if env is None else env)
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise _format_validation_error(exc, source) from None


def read_utf8(path: str | Path, what: str, fix: str) -> str:
    """A file's text, or a ConfigError in one line: unreadable (`fix` says what to do) or not UTF-8 (where)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc.strerror}. Fix: {fix}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{what}: {path} is not UTF-8 text (line {line}). Fix: save it as UTF-8") from None


def _read_yaml(path: str | Path, what: str, fix: str) -> Any:
    """A YAML file's data, or a ConfigError in one line (``read_utf8``'s, or the syntax error's position)."""
    text = read_utf8(path, what, fix)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "unparsable"
        raise ConfigError(f"{what}: {path} is not valid YAML{where}: {problem}. Fix: correct it there") from None


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """Read, interpolate and validate a config file. Raises ConfigError with a user-facing message."""
    path = Path(path)
    data = _read_yaml(path, "the gateway config", "pass an existing file")
    config = parse_config(data, env=env, source=str(path))
    if config.auth.keys_file is not None and not Path(config.auth.keys_file).is_absolute():
        resolved = (path.parent / config.auth.keys_file).as_posix()
        config = config.model_copy(update={"auth": config.auth.model_copy(update={"keys_file": resolved})})
    relative = {}
    for name, upstream in config.upstreams.items():
        files = {
            field: (path.parent / value).as_posix()
            for field, value in (("api_key_file", upstream.api_key_file), ("ca_file", upstream.ca_file))
            if value is not None and not Path(value).is_absolute()
        }
        if files:
            relative[name] = upstream.model_copy(update=files)
    if relative:
        config = config.model_copy(update={"upstreams": {**config.upstreams, **relative}})
    return config


def load_keys_file(path: str) -> list[ApiKeyConfig]:
    """Read auth.keys_file: a YAML list of ApiKeyConfig mappings (hashed keys)."""
    data = _read_yaml(path, "auth.keys_file", "mount the keys Secret there")
    if not isinstance(data, list):
        raise ConfigError(f"auth.keys_file: {path} must hold a YAML list of keys, got {type(data).__name__}")
    keys = []
    for i, item in enumerate(data):
        try:
            keys.append(ApiKeyConfig.model_validate(item))
        except ValidationError as exc:
            raise _format_validation_error(exc, f"{path}, item {i}") from None
    return keys


def render_yaml(config: GatewayConfig) -> str:
    """Render a config as YAML for a ConfigMap (the inverse of `parse_config`).

    A secret may appear only as an environment reference (`${VAR}`), so the ConfigMap never carries one: the
    Deployment maps VAR from a Kubernetes Secret. API keys belong in key_sha256 or auth.keys_file.
    """

    def reveal(value: Any, path: str) -> Any:
        if isinstance(value, SecretStr):
            secret = value.get_secret_value()
            if not re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", secret):
                raise ConfigError(
                    f"{path}: a plaintext secret cannot be rendered into a ConfigMap. "
                    "Fix: set it to ${VAR} and provide VAR from a Secret (API keys: use key_sha256 or auth.keys_file)"
                )
            return secret
        if isinstance(value, dict):
            return {k: reveal(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [reveal(v, f"{path}.{i}") for i, v in enumerate(value)]
        return value

    data = reveal(config.model_dump(mode="python", exclude_defaults=True), "")
    rendered: str = yaml.safe_dump(data, sort_keys=False)
    return rendered
