"""API keys, stored as SHA-256 digests, each bound to a tenant and its rate limits."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from inferstack_gateway.config import ApiKeyConfig, GatewayConfig, check_residency_keys, load_keys_file
from inferstack_gateway.errors import GatewayError


@dataclass(frozen=True, slots=True)
class Principal:
    tenant: str
    key_id: str
    """Short, non-secret id of the key (hash prefix or its name): rate-limit counters and logs."""
    requests_per_minute: int
    tokens_per_minute: int
    resident: bool = False
    """residency: local. The key's requests are never sent to a remote upstream."""
    models: frozenset[str] = frozenset()
    """Model aliases the key may use; empty: all."""


ANONYMOUS_KEY = "anonymous"


class KeyTable:
    def __init__(self, config: GatewayConfig) -> None:
        self.enabled = config.auth.enabled
        keys: list[ApiKeyConfig] = list(config.auth.keys)
        if config.auth.keys_file is not None:
            from_file = load_keys_file(config.auth.keys_file)
            check_residency_keys(config, from_file, f"auth.keys_file ({config.auth.keys_file})")
            keys.extend(from_file)
        limits = config.limits
        self._by_digest: dict[str, Principal] = {}
        for key in keys:
            digest = key.key_sha256 or hashlib.sha256(key.key.get_secret_value().encode()).hexdigest()  # type: ignore[union-attr]
            self._by_digest[digest] = Principal(
                tenant=key.tenant,
                key_id=key.name or digest[:8],
                requests_per_minute=key.requests_per_minute or limits.requests_per_minute,
                tokens_per_minute=key.tokens_per_minute or limits.tokens_per_minute,
                resident=key.residency == "local",
                models=frozenset(key.models),
            )
        self._anonymous = Principal("default", ANONYMOUS_KEY, limits.requests_per_minute, limits.tokens_per_minute)
        self._verified: dict[int, Principal] = {}
        """Keys already checked against their SHA-256 digest, by the built-in `hash()` of their text.

        A request's SHA-256 costs about 0.04 ms of its time to first token at concurrency 1 (`benchmarks/README.md`):
        OpenSSL's digest on a cold path, once per request. `hash()` of bytes is SipHash-1-3 under a key drawn at
        random when the process starts (unless PYTHONHASHSEED fixes it): 64 bits from which the key's text cannot be
        recovered. Another token with the same value would pass as the key, but each guess has one chance in 2**64,
        and searching offline needs the value, which never leaves the process. Only keys that passed the digest
        check are entered, so the table holds at most one entry per configured key."""

    def authenticate(self, authorization: bytes | None) -> Principal:
        if not self.enabled:
            return self._anonymous
        if not authorization:
            raise _unauthorized("Missing API key. Send it as 'Authorization: Bearer <key>'.")
        scheme, _, token = authorization.partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            raise _unauthorized("Malformed Authorization header. Send 'Authorization: Bearer <key>'.")
        tag = hash(token)
        principal = self._verified.get(tag)
        if principal is not None:
            return principal
        # The lookup is by digest, so timing reveals nothing about the key itself.
        principal = self._by_digest.get(hashlib.sha256(token).hexdigest())
        if principal is None:
            raise _unauthorized("Incorrect API key provided.")
        self._verified[tag] = principal
        return principal


def _unauthorized(message: str) -> GatewayError:
    return GatewayError(
        401, message, type="invalid_request_error", code="invalid_api_key", headers=[(b"www-authenticate", b"Bearer")]
    )
