"""Section 4: API keys (stored hashed, tenant per key) and per-key rate limits shared through Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from gateway_harness import API_KEY_A, sha256


def hi(client: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "hi"}], temperature=1
    )


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key. Send it as 'Authorization: Bearer <key>'."),
        ({"authorization": "Bearer sk-wrong"}, "Incorrect API key provided."),
        (
            {"authorization": "Basic dXNlcjpwYXNz"},
            "Malformed Authorization header. Send 'Authorization: Bearer <key>'.",
        ),
    ],
    ids=["missing", "wrong", "not-bearer"],
)
def test_a_missing_or_wrong_key_gets_401(gateway: Any, upstreams: Any, headers: dict[str, str], message: str) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    body = b'{"model": "local", "messages": [{"role": "user", "content": "hi"}]}'
    status, response_headers, raw = gw.http("POST", "/v1/chat/completions", body, headers)
    assert status == 401 and response_headers["www-authenticate"] == "Bearer"
    assert yaml.safe_load(raw) == {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}
    }
    assert upstream.requests == []


def test_the_openai_client_sees_authentication_error(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    with pytest.raises(openai.AuthenticationError):
        hi(gw.client("sk-nope"))
    with pytest.raises(openai.AuthenticationError):
        gw.client("sk-nope").models.list()


def test_keys_load_hashed_from_a_keys_file_and_plaintext_from_the_environment(
    gateway: Any, upstreams: Any, tmp_path: Path
) -> None:
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump([{"tenant": "file-tenant", "key_sha256": sha256("sk-from-file")}]))
    gw = gateway(
        upstreams("up"),
        auth={"keys": [{"tenant": "env-tenant", "key": "sk-from-env"}], "keys_file": str(keys_file)},
    )
    assert hi(gw.client("sk-from-file")).http_response.status_code == 200
    assert hi(gw.client("sk-from-env")).http_response.status_code == 200
    with pytest.raises(openai.AuthenticationError):
        hi(gw.client(API_KEY_A))  # replaced by the auth section above
    assert "sk-from-env" not in repr(gw.app.keys.__dict__)


def test_requests_over_the_per_key_limit_get_429_with_retry_after(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"), limits={"requests_per_minute": 2})
    client = gw.client()
    hi(client)
    hi(client)
    with pytest.raises(openai.RateLimitError) as caught:
        hi(client)
    retry_after = int(caught.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert caught.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
    # Another key has its own budget.
    assert hi(gw.client("sk-tenant-b-test-key")).http_response.status_code == 200


def test_the_limit_is_shared_across_replicas_through_redis(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    first = gateway(upstream, limits={"requests_per_minute": 3})
    second = gateway(upstream, limits={"requests_per_minute": 3})
    hi(first.client())
    hi(second.client())
    hi(first.client())
    with pytest.raises(openai.RateLimitError):
        hi(second.client())


def test_tokens_per_minute_are_charged_from_usage_and_enforced(gateway: Any, upstreams: Any) -> None:
    # The stand-in reports 10 completion tokens per answer; "hi" is estimated at 1 prompt token.
    gw = gateway(upstreams("up", tokens=10), limits={"tokens_per_minute": 15})
    client = gw.client()
    hi(client)
    from gateway_harness import wait_for

    prefix = gw.app.config.redis.key_prefix
    assert wait_for(lambda: gw.app.store is not None and _tokens(gw, prefix) >= 11)
    hi(client)  # 11 tokens used before it: still under 15
    assert wait_for(lambda: _tokens(gw, prefix) >= 22)
    with pytest.raises(openai.RateLimitError) as caught:
        hi(client)
    assert "tokens per minute" in caught.value.body["message"]  # type: ignore[index]


def _tokens(gw: Any, prefix: str) -> int:
    import redis

    client = redis.Redis.from_url(gw.app.config.redis.url)
    try:
        keys = client.keys(f"{prefix}rl:key-a:*:t")
        return sum(int(client.get(k) or 0) for k in keys)
    finally:
        client.close()


def test_a_local_limit_applies_while_redis_is_down(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"), redis_url="redis://127.0.0.1:9/0", limits={"requests_per_minute": 2})
    client = gw.client()
    assert hi(client).headers["x-inferstack-cache"] == "bypass"
    hi(client)
    with pytest.raises(openai.RateLimitError):
        hi(client)
