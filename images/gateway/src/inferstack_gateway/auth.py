"""API keys, stored as SHA-256 digests, each bound to a tenant and its rate limits."""

from __future__ import annotations

import hashlib
import sys
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
        self._verified: dict[int, Principal] | None = {} if _hash_is_keyed() else None
        """Keys already checked against their SHA-256 digest, by the built-in `hash()` of their text.

        A request's SHA-256 costs about 0.04 ms of its time to first token at concurrency 1 (`benchmarks/README.md`):
        OpenSSL's digest on a cold path, once per request. `hash()` of bytes is SipHash-1-3 under a secret drawn at
        random when the process starts: 64 bits from which the key's text cannot be recovered. A key seen before is
        then accepted by a 64-bit equality: another token with the same value would pass as that key, but each guess
        has one chance in 2**64 per key in the table, and the values never leave the process. Only keys that passed
        the digest check are entered, so the table holds at most one entry per configured key. None (every request
        digested) where `hash()` is narrower than 64 bits (a 32-bit build) or not randomized (PYTHONHASHSEED set)."""

    def authenticate(self, authorization: bytes | None) -> Principal:
        if not self.enabled:
            return self._anonymous
        if not authorization:
            raise _unauthorized("Missing API key. Send it as 'Authorization: Bearer <key>'.")
        scheme, _, token = authorization.partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            raise _unauthorized("Malformed Authorization header. Send 'Authorization: Bearer <key>'.")
        verified = self._verified
        if verified is not None:
            principal = verified.get(hash(token))
            if principal is not None:
                return principal
        # The lookup is by digest, so its timing reveals nothing about the key itself.
        principal = self._by_digest.get(hashlib.sha256(token).hexdigest())
        if principal is None:
            raise _unauthorized("Incorrect API key provided.")
        if verified is not None:
            verified[hash(token)] = principal
        return principal


def _hash_is_keyed() -> bool:
    """Whether `hash()` of bytes is 64 bits wide and keyed by a secret drawn at random when the process started."""
    return sys.hash_info.width >= 64 and bool(sys.flags.hash_randomization)


def _unauthorized(message: str) -> GatewayError:
    return GatewayError(
        401, message, type="invalid_request_error", code="invalid_api_key", headers=[(b"www-authenticate", b"Bearer")]
    )
