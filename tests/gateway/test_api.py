"""Section 1: the OpenAI-compatible API, driven with the official openai client."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from gateway_harness import API_KEY_A, GatewayHandle, StandIn


def chat(client: Any, content: str = "Say hi", **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": content}], **kwargs
    )


def test_chat_completion_relays_the_upstream_answer_and_reports_a_bypass(gateway: Any, upstreams: Any) -> None:
    # GIVEN a gateway in front of one upstream
    upstream: StandIn = upstreams("up", tokens=3)
    gw: GatewayHandle = gateway(upstream)
    # WHEN the openai client asks a non-deterministic question
    raw = chat(gw.client(), temperature=0.7)
    # THEN the answer is the upstream's, and nothing was cached
    completion = raw.parse()
    assert completion.choices[0].message.content == "up#1 w1 w2"
    assert completion.choices[0].finish_reason == "stop"
    assert raw.headers["x-inferstack-cache"] == "bypass"
    assert raw.headers["x-request-id"]
    assert upstream.requests[0]["body"]["model"] == "local"


def test_the_upstream_gets_prompts_and_messages_as_the_client_wrote_them(gateway: Any, upstreams: Any) -> None:
    # Trimming is for the cache key only: whitespace at either end of a completion prompt changes the continuation
    # (code, prefill), and it was trimmed from the body sent upstream.
    upstream: StandIn = upstreams("up")
    gw = gateway(upstream)
    client = gw.client()
    client.completions.create(model="local", prompt="  def f():\n    ", temperature=0)
    client.chat.completions.create(
        model="local", temperature=0,
        messages=[{"role": "system", "content": " Be terse. "},
                  {"role": "user", "content": [{"type": "text", "text": "\n    indented\n"}]}],
    )  # fmt: skip
    assert upstream.requests[0]["body"]["prompt"] == "  def f():\n    "
    messages = upstream.requests[1]["body"]["messages"]
    assert messages[0]["content"] == " Be terse. " and messages[1]["content"][0]["text"] == "\n    indented\n"


def test_streamed_chat_is_relayed_as_openai_sse_with_done_and_usage(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up", tokens=4)
    gw = gateway(upstream)
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "Stream please"}], stream=True,
        stream_options={"include_usage": True}, temperature=0.5,
    ) as response:  # fmt: skip
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-inferstack-cache"] == "bypass"
        raw = b"".join(response.iter_bytes())
    events = [line[6:] for line in raw.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "up#1 w1 w2 w3"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4


def test_streamed_chat_parses_with_the_openai_client(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up", tokens=3))
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) == "up#1 w1 w2"


@pytest.mark.parametrize("stream", [False, True])
def test_legacy_completions_work_streamed_and_not(gateway: Any, upstreams: Any, stream: bool) -> None:
    gw = gateway(upstreams("up", tokens=2))
    result = gw.client().completions.create(model="local", prompt="Once upon", stream=stream, temperature=0.3)
    text = "".join(c.choices[0].text for c in result) if stream else result.choices[0].text
    assert text == "up#1 w1"


def test_upstream_model_name_is_rewritten_per_upstream(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream, upstreams={"main": {"url": upstream.base, "model": "meta-llama/Llama-3.1-8B-Instruct"}})
    chat(gw.client(), temperature=1)
    assert upstream.requests[0]["body"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_models_lists_the_aliases(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    assert [m.id for m in gw.client().models.list()] == ["local"]


def test_health_readiness_and_metrics_endpoints(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    assert gw.http("GET", "/healthz")[0] == 200
    status, _, body = gw.http("GET", "/readyz")
    state = orjson.loads(body)
    observed_at = state.pop("embeddings_observed_at")  # the startup probe's (test_resilience.py checks its value)
    assert (status, state) == (200, {"status": "ready", "redis": "up", "embeddings": "up"})
    assert isinstance(observed_at, str) and observed_at.endswith("Z")
    chat(gw.client(), temperature=1)
    status, headers, body = gw.http("GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert (
        b'inferstack_gateway_requests_total{cache="bypass",model="local",route="/v1/chat/completions",status="200",'
        b'upstream_kind="local"} 1.0' in body
    )


def test_readyz_is_503_until_startup_has_run(upstreams: Any, gateway: Any) -> None:
    gw = gateway(upstreams("up"))
    gw.app.ready = False  # what a fresh instance reports before its lifespan startup
    status, _, body = gw.http("GET", "/readyz")
    assert status == 503 and orjson.loads(body) == {"status": "starting"}


def test_request_id_from_the_client_is_echoed(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("up"))
    raw = chat(gw.client(), temperature=1, extra_headers={"x-request-id": "req-123"})
    assert raw.headers["x-request-id"] == "req-123"
    assert API_KEY_A  # the default client authenticates as tenant A


def test_a_models_first_request_is_an_increase_from_zero_so_it_can_wake_the_model(gateway: Any) -> None:
    # GIVEN a gateway whose model has no replica (nothing listens at its upstream: a model scaled to zero)
    gw = gateway()
    line = b'inferstack_gateway_model_requests_total{model="local"} '
    # THEN before any request its per-alias counter is already exported, at 0: a first request is then an increase
    # that rate() sees (KEDA's wake trigger), where a series born at 1 shows none until a second request
    assert line + b"0.0\n" in gw.http("GET", "/metrics")[2]
    # WHEN the first request comes and gets an error (no replica yet)
    with pytest.raises(openai.APIError):
        chat(gw.client().with_options(max_retries=0), temperature=1)
    # THEN it is counted under the alias the client asked for
    assert line + b"1.0\n" in gw.http("GET", "/metrics")[2]
