"""Section 5: bad input gets a 4xx in OpenAI's shape (never a 500); Redis, embeddings and upstream faults."""

from __future__ import annotations

import http.client
import logging
import socket
import time
from typing import Any

import orjson
import pytest
from gateway_harness import API_KEY_A, API_KEY_B, sha256, wait_for

AUTH = {"authorization": f"Bearer {API_KEY_A}", "content-type": "application/json"}
GOOD = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}


def with_(**changes: Any) -> bytes:
    body = {**GOOD, **changes}
    return orjson.dumps({k: v for k, v in body.items() if v is not ...})


def nested(depth: int, temperature: float) -> bytes:
    """A valid request with an extra field nested `depth` levels deep (counting the body itself)."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return with_(temperature=temperature)[:-1] + b',"deep":' + inner + b"}"


BAD_INPUT = [
    ("malformed-json", b'{"model": "local", "messages": [', 400, None),
    ("not-an-object", b"[1, 2, 3]", 400, None),
    ("empty-body", b"", 400, None),
    ("not-utf8", b"\xff\xfe\x00", 400, None),
    ("missing-messages", with_(messages=...), 400, "messages"),
    ("empty-messages", with_(messages=[]), 400, "messages"),
    ("messages-not-a-list", with_(messages="hi"), 400, "messages"),
    ("message-not-an-object", with_(messages=["hi"]), 400, "messages"),
    ("unknown-role", with_(messages=[{"role": "wizard", "content": "hi"}]), 400, "messages"),
    # A role that is a list or an object was a 500 (TypeError: unhashable type, in the membership test).
    ("role-a-list", with_(messages=[{"role": ["user"], "content": "hi"}]), 400, "messages"),
    ("role-an-object", with_(messages=[{"role": {"a": 1}, "content": "hi"}]), 400, "messages"),
    ("role-missing", with_(messages=[{"content": "hi"}]), 400, "messages"),
    ("content-wrong-type", with_(messages=[{"role": "user", "content": 42}]), 400, "messages[0].content"),
    ("missing-model", with_(model=...), 400, "model"),
    ("model-wrong-type", with_(model=7), 400, "model"),
    ("unknown-model", with_(model="gpt-17"), 404, "model"),
    ("temperature-string", with_(temperature="hot"), 400, "temperature"),
    ("temperature-out-of-range", with_(temperature=9), 400, "temperature"),
    ("temperature-bool", with_(temperature=True), 400, "temperature"),
    ("top-p-out-of-range", with_(top_p=1.5), 400, "top_p"),
    ("max-tokens-float", with_(max_tokens=1.5), 400, "max_tokens"),
    ("max-tokens-zero", with_(max_tokens=0), 400, "max_tokens"),
    ("n-string", with_(n="2"), 400, "n"),
    ("stream-string", with_(stream="yes"), 400, "stream"),
    ("stream-options-wrong-type", with_(stream_options=[1]), 400, "stream_options"),
    ("stop-wrong-type", with_(stop=[1, 2]), 400, "stop"),
    ("tools-wrong-type", with_(tools={"a": 1}), 400, "tools"),
    ("response-format-wrong-type", with_(response_format="json"), 400, "response_format"),
    ("n-zero", with_(n=0), 400, "n"),
    # OpenAI refuses n above 128; the gateway sent n=1000 upstream.
    ("n-over-128", with_(n=1000), 400, "n"),
    ("n-and-max-tokens-huge", with_(n=100_000_000, max_tokens=100_000_000), 400, "n"),
    ("nul-byte", b'{"model": "local",\x00 "messages": [{"role": "user", "content": "hi"}]}', 400, None),
    ("10000-messages", with_(messages=[{"role": "user", "content": "a"}] * 10_000), 400, "messages"),
    # orjson parses 1024 levels but writes 254: deeper bodies failed with a 500 in the cache key (temperature 0)
    # or in the upstream body (otherwise).
    ("nested-300-keyed", nested(300, 0), 400, None),
    ("nested-300-relayed", nested(300, 1), 400, None),
    ("nested-1000-relayed", nested(1000, 1), 400, None),
    ("nested-10000", nested(10_000, 1), 400, None),
]


@pytest.mark.parametrize(("body", "status", "param"), [c[1:] for c in BAD_INPUT], ids=[c[0] for c in BAD_INPUT])
def test_bad_chat_input_gets_a_4xx_in_openai_shape(
    gateway: Any, upstreams: Any, body: bytes, status: int, param: str | None
) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    got, _, raw = gw.http("POST", "/v1/chat/completions", body, AUTH)
    assert got == status
    error = orjson.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param and error["message"]
    assert "Traceback" not in error["message"]
    assert upstream.requests == []


def test_nesting_that_can_be_re_encoded_is_relayed(gateway: Any, upstreams: Any) -> None:
    # GIVEN a request with an extra field as deep as the gateway accepts (128 levels, counting the body)
    upstream = upstreams("up")
    gw = gateway(upstream)
    # WHEN it is sent, keyed for the cache (temperature 0)
    status, _, _ = gw.http("POST", "/v1/chat/completions", nested(128, 0), AUTH)
    # THEN it reaches the upstream intact
    assert status == 200
    assert _depth_of(upstream.requests[0]["body"]["deep"]) == 127


def _depth_of(value: Any) -> int:
    depth = 0
    while isinstance(value, list):
        depth, value = depth + 1, value[0] if value else None
    return depth


def test_a_request_that_may_use_more_tokens_than_its_key_allows_gets_429(gateway: Any, upstreams: Any) -> None:
    # GIVEN a key allowed 10,000 tokens a minute
    upstream = upstreams("up")
    gw = gateway(upstream, limits={"tokens_per_minute": 10_000})
    # WHEN a request asks for 100 choices of up to 1,000 tokens each (n is within OpenAI's 128)
    status, headers, raw = gw.http("POST", "/v1/chat/completions", with_(n=100, max_tokens=1000), AUTH)
    # THEN it is refused before it reaches the upstream: token admission counts every choice
    assert status == 429 and "retry-after" not in headers
    error = orjson.loads(raw)["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["message"].startswith("Request too large: with its n and max_tokens it may use 100001 tokens")
    assert upstream.requests == []
    # AND the same request with n=1 fits
    assert gw.http("POST", "/v1/chat/completions", with_(n=1, max_tokens=1000), AUTH)[0] == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_body_that_is_not_declared_json_gets_415(gateway: Any, upstreams: Any, content_type: str) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    status, _, raw = gw.http("POST", "/v1/chat/completions", with_(), {**AUTH, "content-type": content_type})
    assert status == 415
    assert orjson.loads(raw)["error"]["code"] == "unsupported_media_type"
    assert upstream.requests == []


def test_json_with_a_charset_parameter_is_accepted(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    headers = {**AUTH, "content-type": "Application/JSON; charset=utf-8"}
    assert gw.http("POST", "/v1/chat/completions", with_(), headers)[0] == 200


@pytest.mark.parametrize(
    "body",
    [b'{"model": "local"}', b'{"model": "local", "prompt": 3}', b'{"model": "local", "prompt": [true]}',
     b'{"model": "local", "prompt": []}'],
    ids=["missing", "number", "bools", "empty-list"],
)  # fmt: skip
def test_bad_completion_prompt_gets_400(gateway: Any, upstreams: Any, body: bytes) -> None:
    gw = gateway(upstreams("up"))
    status, _, raw = gw.http("POST", "/v1/completions", body, AUTH)
    assert status == 400 and orjson.loads(raw)["error"]["param"] == "prompt"


def test_a_prompt_of_token_id_lists_is_relayed(gateway: Any, upstreams: Any) -> None:
    # OpenAI's completions take a batch of token-id prompts; it was refused with a 400.
    upstream = upstreams("up")
    gw = gateway(upstream)
    body = b'{"model": "local", "prompt": [[1, 2], [3]], "temperature": 1}'
    assert gw.http("POST", "/v1/completions", body, AUTH)[0] == 200
    assert upstream.requests[0]["body"]["prompt"] == [[1, 2], [3]]


def test_more_than_one_authorization_header_gets_401(gateway: Any, upstreams: Any) -> None:
    # A proxy in front that reads the first header and the gateway, which read the last, disagreed on who asks.
    upstream = upstreams("up")
    gw = gateway(upstream)
    host, port = gw.url.removeprefix("http://").split(":")
    for second in (API_KEY_B, API_KEY_A):
        connection = http.client.HTTPConnection(host, int(port), timeout=20)
        try:
            connection.putrequest("POST", "/v1/chat/completions")
            connection.putheader("authorization", "Bearer sk-not-a-key")
            connection.putheader("authorization", f"Bearer {second}")
            connection.putheader("content-type", "application/json")
            body = with_()
            connection.putheader("content-length", str(len(body)))
            connection.endheaders(body)
            response = connection.getresponse()
            status, raw = response.status, response.read()
        finally:
            connection.close()
        assert status == 401 and orjson.loads(raw)["error"]["code"] == "invalid_api_key"
    assert upstream.requests == []


@pytest.mark.parametrize(
    "request_bytes",
    [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     b"GARBAGE\r\n\r\n", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n"],
    ids=["length-and-chunked", "garbage", "negative-length"],
)  # fmt: skip
def test_a_request_that_is_not_http_gets_400_in_openai_shape(
    gateway: Any, upstreams: Any, request_bytes: bytes
) -> None:
    gw = gateway(upstreams("up"))
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(request_bytes)
        response = b""
        while chunk := sock.recv(65536):  # the gateway closes the connection after its answer
            response += chunk
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower()
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == "invalid_http_request"


def _read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the gateway sends until it closes the connection, and how long that took."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received, time.monotonic() - started


def test_slow_clients_cannot_hold_connections(gateway: Any, upstreams: Any) -> None:
    # uvicorn bounded only the idle time after a response: a connection that sent nothing, a head trickled a byte
    # at a time, or a body that stopped half-way each held a connection (and its request slot) for good.
    upstream = upstreams("up")
    gw = gateway(upstream, server={"access_log": False, "keepalive_s": 1, "request_read_timeout_s": 0.5})
    host, port = gw.url.removeprefix("http://").split(":")
    # A new connection that sends nothing is closed after keepalive_s, like an idle one.
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        received, took = _read_until_closed(sock, 10)
    assert received == b"" and 0.8 < took < 5
    # A head trickled a byte at a time gets 408 within request_read_timeout_s of its first byte.
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
        started = time.monotonic()
        with pytest.raises(OSError):  # the gateway answers and closes while the client is still trickling
            for byte in b"Host: x\r\nX-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        received, _ = _read_until_closed(sock, 10)
    assert time.monotonic() - started < 5
    assert received.startswith(b"HTTP/1.1 408 ")
    assert orjson.loads(received.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    # A body that stops half-way gets 408 within request_read_timeout_s, and the connection is closed.
    body = with_()
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %b\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
            % (API_KEY_A.encode(), len(body), body[:10])
        )
        received, took = _read_until_closed(sock, 10)
    assert received.startswith(b"HTTP/1.1 408 ") and took < 5
    assert orjson.loads(received.partition(b"\r\n\r\n")[2])["error"]["code"] == "request_timeout"
    assert gw.app._arriving == 0  # the deferred work is not held back by it any longer
    # AND well-behaved requests are served throughout
    assert gw.http("POST", "/v1/chat/completions", with_(), AUTH)[0] == 200
    assert upstream.requests and all(r["body"]["messages"] for r in upstream.requests)


def test_a_stream_over_http_1_0_gets_400_and_a_plain_request_is_answered(gateway: Any, upstreams: Any) -> None:
    # A stream was sent with chunked framing, which an HTTP/1.0 client cannot read.
    upstream = upstreams("up")
    gw = gateway(upstream)
    host, port = gw.url.removeprefix("http://").split(":")
    for stream, status in ((True, b"400"), (False, b"200")):
        body = with_(stream=stream)
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer %b\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (API_KEY_A.encode(), len(body), body)
            )
            received, _ = _read_until_closed(sock, 10)
        head, _, payload = received.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == status and b"transfer-encoding" not in head.lower()
        if stream:
            assert orjson.loads(payload)["error"]["param"] == "stream"
    assert len(upstream.requests) == 1


def test_a_body_over_the_limit_gets_413_before_it_is_read(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"), server={"access_log": False, "max_body_bytes": 2048})
    big = with_(messages=[{"role": "user", "content": "x" * 4096}])
    status, _, raw = gw.http("POST", "/v1/chat/completions", big, AUTH)
    assert status == 413 and orjson.loads(raw)["error"]["code"] == "request_too_large"


def test_a_chunked_body_over_the_limit_gets_413(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"), server={"access_log": False, "max_body_bytes": 2048})
    big = with_(messages=[{"role": "user", "content": "x" * 4096}])
    status, _, _ = gw.http("POST", "/v1/chat/completions", iter([big[:1000], big[1000:]]), AUTH)  # type: ignore[arg-type]
    assert status == 413


@pytest.mark.parametrize(
    ("method", "path", "status"), [("GET", "/v1/nope", 404), ("GET", "/v1/chat/completions", 405),
                                   ("POST", "/healthz", 405)],
)  # fmt: skip
def test_unknown_paths_and_methods_get_openai_errors(
    gateway: Any, upstreams: Any, method: str, path: str, status: int
) -> None:
    gw = gateway(upstreams("up"))
    got, _, raw = gw.http(method, path, None, AUTH)
    assert got == status and set(orjson.loads(raw)["error"]) == {"message", "type", "param", "code"}


def test_redis_down_serves_without_cache_counts_it_and_logs_once(
    gateway: Any, upstreams: Any, own_redis: Any, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream, redis_url=own_redis.url, redis={"url": own_redis.url, "retry_after_ms": 50})
    client = gw.client()

    def ask() -> tuple[str, str]:
        raw = client.chat.completions.with_raw_response.create(
            model="local", messages=[{"role": "user", "content": "Say hi"}], temperature=0
        )
        return raw.parse().choices[0].message.content, raw.headers["x-inferstack-cache"]

    cached, _ = ask()
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="exact", outcome="stored") == 1)
    own_redis.stop()
    with caplog.at_level(logging.WARNING, logger="inferstack_gateway"):
        for _ in range(4):
            answer, result = ask()
            assert result == "bypass" and answer != cached
            wait_for(lambda: False, timeout=0.06)  # let the retry window pass so Redis is tried again
    assert gw.metric("inferstack_gateway_redis_up") == 0
    assert gw.metric("inferstack_gateway_redis_errors_total", op="admit") >= 2
    assert [r.getMessage() for r in caplog.records].count(
        "redis unavailable, serving without cache and with per-replica rate limits"
    ) == 1
    # Redis comes back (empty): the gateway uses it again.
    own_redis.start()
    assert wait_for(lambda: ask()[1] == "miss", timeout=5)
    assert gw.metric("inferstack_gateway_redis_up") == 1


@pytest.mark.parametrize("fault", ["down", "slow"])
def test_embeddings_down_or_slow_skips_the_semantic_cache(
    gateway: Any, upstreams: Any, embeddings_server: Any, fault: str
) -> None:
    gw = gateway(upstreams("up"), budgets={"semantic_cache_ms": 100}, embeddings={"timeout_ms": 5000})
    if fault == "down":
        embeddings_server.control.fail = True
    else:
        embeddings_server.control.delay_s = 0.5
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "What is the capital of France?"}], temperature=0
    )
    assert raw.http_response.status_code == 200 and raw.headers["x-inferstack-cache"] == "miss"
    reason = "embeddings" if fault == "down" else "budget"
    assert wait_for(lambda: gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason=reason) == 1)
    if fault == "slow":
        # The embedding finished after the budget; the write-back still files the answer in the semantic index.
        assert wait_for(lambda: gw.metric("inferstack_gateway_cache_writes_total", kind="semantic", outcome="stored"))


def test_a_prompt_longer_than_the_embedding_window_skips_the_semantic_cache_without_taking_it_down(
    gateway: Any, upstreams: Any, embeddings_server: Any
) -> None:
    # GIVEN an embedding model that reads at most 16 tokens (llama.cpp refuses longer input with a 500, which would
    # take the endpoint out for every request for a second)
    gw = gateway(upstreams("up"), embeddings={"timeout_ms": 5000, "max_input_tokens": 16})

    def ask(content: str) -> str:
        raw = gw.client().chat.completions.with_raw_response.create(
            model="local", messages=[{"role": "user", "content": content}], temperature=0
        )
        assert raw.http_response.status_code == 200
        return str(raw.headers["x-inferstack-cache"])

    # WHEN a single-turn prompt of about 40 tokens arrives
    assert ask("Summarize the following store inventory report for the weekly meeting, please: " * 2) == "miss"
    # THEN it is answered without an embeddings call, and counted as skipped for its length
    assert embeddings_server.control.calls == 0
    assert wait_for(
        lambda: gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason="too_long") == 1
    )
    # AND the next short prompt still gets a semantic lookup (the endpoint was not marked down)
    assert ask("What is the capital of France?") == "miss"
    assert embeddings_server.control.calls >= 1
    assert gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason="embeddings") == 0


def test_an_input_the_estimate_let_through_but_the_model_refuses_does_not_take_the_endpoint_down(
    gateway: Any, upstreams: Any, embeddings_server: Any, embedding_model: Any
) -> None:
    # GIVEN an embedding model that reads at most 64 tokens and refuses longer input with a 500, as llama.cpp does
    gw = gateway(upstreams("up"), embeddings={"timeout_ms": 5000, "max_input_tokens": 64})
    embeddings_server.control.max_tokens = 64

    def ask(content: str) -> str:
        raw = gw.client().chat.completions.with_raw_response.create(
            model="local", messages=[{"role": "user", "content": content}], temperature=0
        )
        assert raw.http_response.status_code == 200
        return str(raw.headers["x-inferstack-cache"])

    # WHEN a Chinese prompt of 80 characters arrives: ~20 tokens at 4 characters each, so the gateway embeds it,
    # but MiniLM reads one token per character, past the window
    chinese = ("请总结以下商店库存报告供每周会议使用北通道缺少面粉和糖" * 3)[:80]
    assert len(embedding_model.tokenizer(chinese)["input_ids"]) > 64 > len(chinese) // 4
    assert ask(chinese) == "miss"
    assert embeddings_server.control.calls == 1
    # THEN the refusal is counted as the input's length, not as an outage
    assert wait_for(
        lambda: gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason="too_long") == 1
    )
    # AND the next short prompt still gets its semantic lookup
    assert ask("What is the capital of Italy?") == "miss"
    assert embeddings_server.control.calls == 2
    assert gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason="embeddings") == 0
    # BUT a short input the endpoint fails is an outage: the endpoint is skipped for the next request
    embeddings_server.control.fail = True
    assert ask("What is the capital of Spain?") == "miss"
    assert ask("What is the capital of Greece?") == "miss"
    assert embeddings_server.control.calls == 3
    assert wait_for(
        lambda: gw.metric("inferstack_gateway_cache_skipped_total", kind="semantic", reason="embeddings") == 2
    )


def test_a_slow_semantic_lookup_does_not_block_other_requests(
    gateway: Any, upstreams: Any, embeddings_server: Any
) -> None:
    import threading

    gw = gateway(upstreams("up"), budgets={"semantic_cache_ms": 5000})
    embeddings_server.control.delay_s = 1.0
    slow = threading.Thread(
        target=lambda: gw.client().chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Tell me about Paris"}], temperature=0
        )
    )
    slow.start()
    assert wait_for(lambda: embeddings_server.control.calls == 1)
    # While that lookup waits on the embeddings endpoint, the gateway keeps serving.
    assert gw.http("GET", "/healthz")[0] == 200
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "hi"}], temperature=1
    )
    assert raw.headers["x-inferstack-cache"] == "bypass"
    assert slow.is_alive()
    slow.join(10)


def test_a_key_of_a_tenant_this_gateway_does_not_serve_gets_401(gateway: Any, upstreams: Any) -> None:
    # GIVEN a gateway that serves tenant A only, and a valid key of tenant B (served elsewhere)
    upstream = upstreams("up")
    gw = gateway(upstream, auth={"keys": [{"tenant": "tenant-a", "name": "key-a", "key_sha256": sha256(API_KEY_A)}]})
    # WHEN tenant B's key is used here
    status, headers, raw = gw.http(
        "POST", "/v1/chat/completions", with_(), {**AUTH, "authorization": f"Bearer {API_KEY_B}"}
    )
    # THEN it is refused like any unknown key, before anything reaches the upstream
    assert status == 401 and headers["www-authenticate"] == "Bearer"
    assert orjson.loads(raw)["error"]["code"] == "invalid_api_key"
    assert upstream.requests == []


def test_an_error_before_the_body_is_read_closes_the_connection_and_the_client_still_gets_it(
    gateway: Any, upstreams: Any
) -> None:
    # A 413 (or 401, 415 ...) answered before the body was read kept the connection open, and the gateway went on
    # reading and dropping the body for as long as the client sent it: a chunked body past the limit held its
    # connection for good (neither request_read_timeout_s nor keepalive_s applied any more), and a client that had
    # sent Expect: 100-continue, and so never sent the body, had its next request taken for that body and never
    # answered (RFC 9110 §10.1.1, §15.5.14: the server SHOULD say it closes).
    upstream = upstreams("up")
    gw = gateway(
        upstream, server={"access_log": False, "max_body_bytes": 2048, "request_read_timeout_s": 1, "keepalive_s": 1}
    )
    host, port = gw.url.removeprefix("http://").split(":")
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %b\r\n" % API_KEY_A.encode()
    head += b"Content-Type: application/json\r\n"
    # A chunked body past the limit that the client goes on trickling.
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n1000\r\n" + b"x" * 4096 + b"\r\n")
        started = time.monotonic()
        with pytest.raises(OSError):  # the gateway closes while the client is still sending
            while time.monotonic() - started < 10:
                sock.sendall(b"10\r\n" + b"y" * 16 + b"\r\n")
                time.sleep(0.1)
        assert time.monotonic() - started < 5
    # Expect: 100-continue with a declared body over the limit: 413 and no 100 Continue, then the connection ends
    # (the client's next request is not read as the body it never sent).
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head + b"Content-Length: 10000\r\nExpect: 100-continue\r\n\r\n")
        answer = sock.recv(65536)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        rest, _ = _read_until_closed(sock, 10)
    status_line, _, rest_of_head = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 413 ") and b"\r\nconnection: close\r\n" in rest_of_head.lower() + b"\r\n"
    assert rest == b""
    # A 401 before the body: the same.
    status, headers, _ = gw.http("POST", "/v1/chat/completions", with_(), {"content-type": "application/json"})
    assert status == 401 and headers["connection"] == "close"
    # A client that sends its whole body before it reads (http.client) still gets the 413, body and all: the
    # gateway shuts its side and drops the rest, rather than closing at once (a reset that destroys the answer).
    big = with_(messages=[{"role": "user", "content": "x" * 3_000_000}])
    status, headers, raw = gw.http("POST", "/v1/chat/completions", big, AUTH)
    assert status == 413 and headers["connection"] == "close"
    assert orjson.loads(raw)["error"]["code"] == "request_too_large"
    # AND a request whose body was read keeps its connection (an error after it included), and the gateway serves.
    status, headers, _ = gw.http("POST", "/v1/chat/completions", with_(model="nope"), AUTH)
    assert status == 404 and "connection" not in headers
    assert gw.http("POST", "/v1/chat/completions", with_(), AUTH)[0] == 200
    assert len(upstream.requests) == 1


@pytest.mark.parametrize(
    "fields", [b"X-Big: " + b"a" * 200_000 + b"\r\n", b"".join(b"X-H%d: v\r\n" % i for i in range(20_000))],
    ids=["one-long-line", "many-fields"],
)  # fmt: skip
def test_a_head_over_64_kib_gets_431_in_openai_shape(gateway: Any, upstreams: Any, fields: bytes) -> None:
    # httptools holds a head whole until it ends, with no bound: a 50 MB header field was read into memory (within
    # request_read_timeout_s, per connection) and answered 200.
    gw = gateway(upstreams("up"))
    host, port = gw.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n")
        received, _ = _read_until_closed(sock, 10)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ") and b"\r\nconnection: close" in head.lower()
    assert orjson.loads(body)["error"]["code"] == "request_header_fields_too_large"
    # AND a head of 32 KiB is served
    status, _, _ = gw.http("GET", "/healthz", None, {"x-big": "a" * 32_000})
    assert status == 200


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/models"])
def test_head_is_answered_as_get_without_the_body(gateway: Any, upstreams: Any, path: str) -> None:
    # RFC 9110 §9.1: all general-purpose servers MUST support GET and HEAD; HEAD got 405 (allow: GET).
    gw = gateway(upstreams("up"))
    status, headers, body = gw.http("GET", path, None, AUTH)
    head_status, head_headers, head_body = gw.http("HEAD", path, None, AUTH)
    assert status == head_status == 200 and body and head_body == b""
    assert head_headers["content-type"] == headers["content-type"] and int(head_headers["content-length"]) > 0
    assert "x-request-id" in head_headers
    # AND a GET-only path says so to other methods, HEAD included in its Allow
    status, headers, _ = gw.http("POST", path, b"{}", AUTH)
    assert status == 405 and headers["allow"] == "GET, HEAD"


def test_what_a_refused_head_is_followed_by_is_dropped_while_the_connection_lingers(
    gateway: Any, upstreams: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A head refused as malformed (400) left its head deadline and byte count armed while the connection lingered:
    # the body the client went on sending counted as head bytes, and past 64 KiB the gateway tried to answer 431
    # after its write side was shut (RuntimeError in data_received: asyncio logged a fatal error and reset the
    # connection).
    gw = gateway(upstreams("up"))
    host, port = gw.url.removeprefix("http://").split(":")
    with caplog.at_level(logging.WARNING), socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        time.sleep(0.2)
        for _ in range(20):
            sock.sendall(b"x" * 8192)
        received, _ = _read_until_closed(sock, 10)
        time.sleep(0.2)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and orjson.loads(body)["error"]["code"] == "invalid_http_request"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
