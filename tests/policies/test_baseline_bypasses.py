"""The security baseline cannot be dodged by another resource type or another spelling of a field.

Each case builds the violation the way a stack could write it without touching the field the
first rule looked at, and checks the pack still names it.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy_builders import res, violations

CACHE = "aws:elasticache/replicationGroup:ReplicationGroup"
SECURE_CACHE: dict[str, Any] = {
    "atRestEncryptionEnabled": True,
    "transitEncryptionEnabled": True,
    "userGroupIds": ["inferstack-prod-cache"],
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"transitEncryptionEnabled": False}, "TLS"),
        ({"transitEncryptionMode": "preferred"}, "plaintext"),
        ({"userGroupIds": []}, "authenticate"),
    ],
)
def test_a_cache_without_tls_or_auth_is_caught(change: dict[str, Any], says: str) -> None:
    # GIVEN a replication group that drops one in-transit protection
    plan = [res(CACHE, "cache", {**SECURE_CACHE, **change})]
    # WHEN the pack runs THEN the cache rule names what is missing
    (found,) = violations(plan, "elasticache-encrypted-authenticated")
    assert says in found["message"]


def test_a_cache_with_an_auth_token_instead_of_users_passes() -> None:
    plan = [res(CACHE, "cache", {**SECURE_CACHE, "userGroupIds": [], "authToken": "[secret]"})]
    assert violations(plan, "elasticache-encrypted-authenticated") == []


def test_a_standalone_cache_cluster_is_caught() -> None:
    # GIVEN a single-node cluster, which has no at-rest encryption or AUTH token at all
    plan = [res("aws:elasticache/cluster:Cluster", "cache", {"engine": "valkey", "transitEncryptionEnabled": True})]
    # THEN it is refused in favour of a replication group
    (found,) = violations(plan, "elasticache-encrypted-authenticated")
    assert "ReplicationGroup" in found["message"]


@pytest.mark.parametrize(
    "auth",
    [{"noPasswordRequired": True}, {"authenticationMode": {"type": "no-password-required"}}],
)
def test_an_enabled_cache_user_without_a_password_is_caught(auth: dict[str, Any]) -> None:
    user = {"userName": "default", "engine": "valkey", "accessString": "on ~* +@all", **auth}
    (found,) = violations(
        [res("aws:elasticache/user:User", "cache-default", user)], "elasticache-encrypted-authenticated"
    )
    assert "'default'" in found["message"]


def test_a_switched_off_user_needs_no_password() -> None:
    user = {"userName": "default", "accessString": "off ~* -@all", "noPasswordRequired": True}
    assert violations([res("aws:elasticache/user:User", "d", user)], "elasticache-encrypted-authenticated") == []
