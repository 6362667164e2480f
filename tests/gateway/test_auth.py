"""The key table: keys checked by SHA-256 digest once, then found by a tag that reveals nothing of them."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from inferstack_gateway import auth
from inferstack_gateway.auth import KeyTable
from inferstack_gateway.config import GatewayConfig
from inferstack_gateway.errors import GatewayError

DIGEST_A = hashlib.sha256(b"sk-tenant-a-secret").hexdigest()
DIGEST_B = hashlib.sha256(b"sk-tenant-b-secret").hexdigest()


def table(monkeypatch: pytest.MonkeyPatch, digests: list[bytes], keyed_hash: bool = True) -> KeyTable:
    monkeypatch.setattr(auth, "_hash_is_keyed", lambda: keyed_hash)
    keys = KeyTable(
        GatewayConfig.model_validate(
            {
                "upstreams": {"vllm": {"url": "http://vllm:8000/v1"}},
                "tiers": {"small": {"upstreams": ["vllm"]}},
                "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
                "auth": {
                    "keys": [
                        {"tenant": "a", "name": "key-a", "key": "sk-tenant-a-secret"},
                        {"tenant": "b", "key_sha256": DIGEST_B},
                    ]
                },
            }
        )
    )

    real = hashlib.sha256

    def counted(data: bytes) -> Any:
        digests.append(data)
        return real(data)

    monkeypatch.setattr(hashlib, "sha256", counted)  # auth.py calls hashlib.sha256 through the module
    return keys


def test_a_key_is_digested_once_and_then_found_without_a_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    digests: list[bytes] = []
    keys = table(monkeypatch, digests)
    for header in (b"Bearer sk-tenant-a-secret", b"bearer  sk-tenant-a-secret ", b"Bearer sk-tenant-a-secret"):
        assert keys.authenticate(header).tenant == "a"
    assert keys.authenticate(b"Bearer sk-tenant-b-secret").tenant == "b"
    assert keys.authenticate(b"Bearer sk-tenant-b-secret").key_id == DIGEST_B[:8]
    assert digests == [b"sk-tenant-a-secret", b"sk-tenant-b-secret"]


def test_a_wrong_key_is_refused_every_time_and_never_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    digests: list[bytes] = []
    keys = table(monkeypatch, digests)
    keys.authenticate(b"Bearer sk-tenant-a-secret")
    for _ in range(2):
        for header in (b"Bearer sk-tenant-a-secreT", b"Bearer sk-tenant-a-secret-and-more", b"Bearer x"):
            with pytest.raises(GatewayError) as caught:
                keys.authenticate(header)
            assert caught.value.status == 401
    assert len(digests) == 1 + 2 * 3
    for header in (b"Basic sk-tenant-a-secret", b"Bearer   ", b""):
        with pytest.raises(GatewayError, match=r"Authorization|API key"):
            keys.authenticate(header)


def test_the_table_keeps_no_key_text_or_digest_of_it_beyond_the_configured_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = table(monkeypatch, [])
    keys.authenticate(b"Bearer sk-tenant-a-secret")
    keys.authenticate(b"Bearer sk-tenant-b-secret")
    state = repr(keys.__dict__)
    assert "sk-tenant" not in state
    assert state.count(DIGEST_A) == 1  # the configured digest only


def test_every_request_is_digested_where_hash_is_not_a_keyed_64_bit_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 32-bit build's hash(), or one that PYTHONHASHSEED fixes, is not a tag to accept a key by."""
    digests: list[bytes] = []
    keys = table(monkeypatch, digests, keyed_hash=False)
    for _ in range(3):
        assert keys.authenticate(b"Bearer sk-tenant-a-secret").tenant == "a"
    assert digests == [b"sk-tenant-a-secret"] * 3
