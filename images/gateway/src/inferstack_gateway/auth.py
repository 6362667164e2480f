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

    def authenticate(self, authorization: bytes | None) -> Principal:
        if not self.enabled:
            return self._anonymous
        if not authorization:
            raise _unauthorized("Missing API key. Send it as 'Authorization: Bearer <key>'.")
        scheme, _, token = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or not token.strip():
            raise _unauthorized("Malformed Authorization header. Send 'Authorization: Bearer <key>'.")
        # The lookup is by digest, so timing reveals nothing about the key itself.
        principal = self._by_digest.get(hashlib.sha256(token.strip()).hexdigest())
        if principal is None:
            raise _unauthorized("Incorrect API key provided.")
        return principal


def _unauthorized(message: str) -> GatewayError:
    return GatewayError(
        401, message, type="invalid_request_error", code="invalid_api_key", headers=[(b"www-authenticate", b"Bearer")]
    )
