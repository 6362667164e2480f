"""Section 3: complexity routing, failover, circuit breakers, cancellation; section 4's latency budgets."""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from gateway_harness import StandIn, wait_for


def two_tier(small: StandIn, large: StandIn, **rule: Any) -> dict[str, Any]:
    return {
        "upstreams": {"small": {"url": small.base}, "large": {"url": large.base}},
        "tiers": {"small": {"upstreams": ["small"]}, "large": {"upstreams": ["large"]}},
        "models": {"local": {"tier": "small", "complexity": [{"tier": "large", **rule}]}},
    }


def say(gw: Any, content: str | list[dict[str, str]], **kwargs: Any) -> str:
    messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
    result = gw.client().chat.completions.create(model="local", messages=messages, temperature=1, **kwargs)
    return str(result.choices[0].message.content)


@pytest.mark.parametrize(
    ("rule", "simple", "complex_"),
    [
        ({"min_prompt_tokens": 50}, "short question", "long question " * 20),
        ({"keywords": ["Prove"]}, "add 2 and 2", "please prove that sqrt(2) is irrational"),
        (
            {"min_turns": 2},
            "one turn",
            [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
        ),
    ],
    ids=["prompt-tokens", "keywords", "turns"],
)
def test_complexity_rules_send_hard_requests_to_the_large_tier(
    gateway: Any, upstreams: Any, rule: dict[str, Any], simple: Any, complex_: Any
) -> None:
    small, large = upstreams("small"), upstreams("large")
    gw = gateway(None, **two_tier(small, large, **rule))
    assert say(gw, simple).startswith("small#")
    assert say(gw, complex_).startswith("large#")


def test_an_explicit_tier_header_overrides_the_rules_and_is_validated(gateway: Any, upstreams: Any) -> None:
    small, large = upstreams("small"), upstreams("large")
    gw = gateway(None, **two_tier(small, large, min_turns=10))
    assert say(gw, "hi", extra_headers={"x-inferstack-tier": "large"}).startswith("large#")
    with pytest.raises(openai.BadRequestError) as caught:
        say(gw, "hi", extra_headers={"x-inferstack-tier": "huge"})
    assert "Allowed: large, small" in caught.value.message


@pytest.mark.parametrize("fault", ["error500", "connect", "hang"])
def test_a_failing_upstream_fails_over_to_the_next_one(gateway: Any, upstreams: Any, fault: str) -> None:
    # GIVEN a tier whose first upstream is down (5xx / refuses connections / never answers)
    first = upstreams("first", mode=fault if fault != "connect" else "ok")
    backup = upstreams("backup")
    first_url = "http://127.0.0.1:9/v1" if fault == "connect" else first.base
    gw = gateway(
        None,
        upstreams={"first": {"url": first_url}, "backup": {"url": backup.base}},
        tiers={"small": {"upstreams": ["first", "backup"]}},
        budgets={"upstream_ttft_ms": 300},
    )
    # WHEN a streamed request comes in THEN the backup answers it
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).startswith("backup#1")
    reason = {"error500": "http_500", "connect": "connect", "hang": "timeout"}[fault]
    assert gw.metric("inferstack_gateway_upstream_errors_total", upstream="first", reason=reason) == 1


def test_the_circuit_breaker_stops_sending_to_a_failing_upstream(gateway: Any, upstreams: Any) -> None:
    broken, backup = upstreams("broken", mode="error500"), upstreams("backup")
    gw = gateway(
        None,
        upstreams={
            "broken": {"url": broken.base, "circuit_breaker": {"failures_to_open": 2, "open_s": 60}},
            "backup": {"url": backup.base},
        },
        tiers={"small": {"upstreams": ["broken", "backup"]}},
    )
    for _ in range(5):
        assert say(gw, "hi").startswith("backup#")
    assert len(broken.requests) == 2
    assert gw.metric("inferstack_gateway_circuit_open", upstream="broken") == 1


def test_every_upstream_down_is_a_503_with_a_clear_message(gateway: Any, upstreams: Any) -> None:
    a, b = upstreams("a", mode="error500"), upstreams("b", mode="error500")
    gw = gateway(
        None,
        upstreams={"a": {"url": a.base}, "b": {"url": b.base}},
        tiers={"small": {"upstreams": ["a", "b"]}},
    )
    with pytest.raises(openai.InternalServerError) as caught:
        say(gw, "hi")
    assert caught.value.status_code == 503
    assert caught.value.body["message"] == (  # type: ignore[index]
        "Every upstream of tier 'small' is unavailable (a: HTTP 500; b: HTTP 500)."
    )
    assert caught.value.body["code"] == "upstreams_unavailable"  # type: ignore[index]


def test_an_upstream_over_its_ttft_budget_after_its_head_ends_the_stream_with_the_timeout(
    gateway: Any, upstreams: Any
) -> None:
    # GIVEN an upstream that sends a stream's head at once and then nothing: the gateway passes the head on when it
    # comes, so the status line (200) is out by the time the TTFT budget runs out
    gw = gateway(upstreams("slow", mode="stall"), budgets={"upstream_ttft_ms": 200})
    started = time.perf_counter()
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    # WHEN the budget runs out, THEN the stream ends with the timeout as an error event, which the client raises
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert not isinstance(caught.value, openai.APIStatusError)  # an error event, not a status
    assert caught.value.message == (
        "Every upstream of tier 'small' timed out (main: timeout before the first event (200 ms))."
    )
    assert time.perf_counter() - started < 0.2 + 0.4


def stream_text(gw: Any) -> str:
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_a_streams_head_reaches_the_client_when_the_upstreams_does(gateway: Any, upstreams: Any) -> None:
    # GIVEN an upstream that sends a stream's head at once and its first event 400 ms later, as vLLM does
    gw = gateway(upstreams("main", head_first=True, ttft_s=0.4))
    started = time.perf_counter()
    # WHEN the client asks for a stream
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    head_after = time.perf_counter() - started
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    # THEN it has the head while the upstream computes the first event (the client sets up its stream meanwhile,
    # off the path to the first token), and the whole answer after it
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert head_after < 0.2, head_after
    assert time.perf_counter() - started >= 0.4
    assert text == "main#1 w1 w2 w3 w4"


def two_upstreams(gateway: Any, a: StandIn, b: StandIn) -> Any:
    return gateway(
        None,
        upstreams={"a": {"url": a.base}, "b": {"url": b.base}},
        tiers={"small": {"upstreams": ["a", "b"]}},
        budgets={"upstream_ttft_ms": 200},
    )


def requests_counted(gw: Any, status: str) -> float:
    return float(gw.metric(
        "inferstack_gateway_requests_total", route="/v1/chat/completions", status=status, cache="bypass",
        model="local", upstream_kind="none",
    ))  # fmt: skip


def test_a_stream_fails_over_behind_a_head_already_sent(gateway: Any, upstreams: Any) -> None:
    # GIVEN a tier whose first upstream sends its head and then nothing, and a second upstream that answers
    a, b = upstreams("a", mode="stall"), upstreams("b")
    gw = two_upstreams(gateway, a, b)
    started = time.perf_counter()
    # WHEN a stream is asked for
    raw = gw.client().chat.completions.with_raw_response.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1
    )
    head_after = time.perf_counter() - started
    text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    # THEN the client has a's head at once, and then b's answer, whole, in the response that head opened (b is asked
    # once a's TTFT budget of 200 ms has run out)
    assert head_after < 0.15, head_after
    assert text == "b#1 w1 w2 w3 w4"
    assert len(a.requests) == 1 and len(b.requests) == 1


@pytest.mark.parametrize("head_first", [True, False], ids=["head-first", "head-with-the-event"])
def test_a_stream_whose_first_event_is_an_error_fails_over(gateway: Any, upstreams: Any, head_first: bool) -> None:
    # GIVEN a tier whose first upstream's stream begins with an error event (vLLM's, for a request its engine failed;
    # or a hub gateway's whose own upstreams failed behind its head), and a second upstream that answers
    a, b = upstreams("a", mode="error-event", head_first=head_first), upstreams("b")
    gw = two_upstreams(gateway, a, b)
    # WHEN a stream is asked for, THEN the client gets b's answer and never a's error
    assert stream_text(gw) == "b#1 w1 w2 w3 w4"
    assert len(a.requests) == 1 and len(b.requests) == 1


def test_a_stream_that_no_upstream_answers_behind_a_head_is_counted_as_the_failure(
    gateway: Any, upstreams: Any
) -> None:
    # GIVEN a tier whose upstreams both send a stream's head and then an error event
    a, b = upstreams("a", mode="error-event", head_first=True), upstreams("b", mode="error-event", head_first=True)
    gw = two_upstreams(gateway, a, b)
    # WHEN a stream is asked for, THEN it ends with the gateway's error event, naming both failures
    with pytest.raises(openai.APIError) as caught:
        stream_text(gw)
    assert not isinstance(caught.value, openai.APIStatusError)
    assert caught.value.message == (
        "Every upstream of tier 'small' is unavailable (a: StreamBroken an error event before any output: the engine "
        "died; b: StreamBroken an error event before any output: the engine died)."
    )
    # AND the request is counted as the 503 it is (the error rate and its alert see it), not as the 200 status line
    assert wait_for(lambda: requests_counted(gw, "503") == 1)
    assert requests_counted(gw, "200") == 0


@pytest.mark.parametrize("mode", ["error400", "error400-pretty"])
def test_an_upstream_refusal_behind_a_head_already_sent_ends_the_stream_with_it(
    gateway: Any, upstreams: Any, mode: str
) -> None:
    # GIVEN a tier whose first upstream sends its head and then nothing, and a second that refuses the request (4xx),
    # in a compact body or in OpenAI's shape, indented (as api.openai.com sends it)
    a, b = upstreams("a", mode="stall"), upstreams("b", mode=mode)
    gw = two_upstreams(gateway, a, b)
    # WHEN a stream is asked for, THEN the refusal ends the stream as one error event (the status line has gone out),
    # which the client reads as the refusal, and the request is counted as the 400 it is
    with pytest.raises(openai.APIError) as caught:
        stream_text(gw)
    assert not isinstance(caught.value, openai.APIStatusError)
    assert "max_tokens is too large" in caught.value.message
    assert wait_for(lambda: gw.metric(
        "inferstack_gateway_requests_total", route="/v1/chat/completions", status="400", cache="bypass",
        model="local", upstream_kind="local",
    ) == 1)  # fmt: skip


def test_the_request_budget_ends_a_non_streamed_request_with_504(gateway: Any, upstreams: Any) -> None:
    gw = gateway(upstreams("slow", ttft_s=2), budgets={"request_ms": 300})
    with pytest.raises(openai.APIStatusError) as caught:
        say(gw, "hi")
    assert caught.value.status_code == 504 and caught.value.body["type"] == "timeout"  # type: ignore[index]


def test_an_upstream_4xx_is_passed_on_in_openai_shape_without_failover(gateway: Any, upstreams: Any) -> None:
    refusing, backup = upstreams("refusing", mode="error400"), upstreams("backup")
    gw = gateway(
        None,
        upstreams={"refusing": {"url": refusing.base}, "backup": {"url": backup.base}},
        tiers={"small": {"upstreams": ["refusing", "backup"]}},
    )
    with pytest.raises(openai.BadRequestError) as caught:
        say(gw, "hi")
    assert "max_tokens is too large" in caught.value.message
    assert backup.requests == []


def test_a_client_disconnect_mid_stream_cancels_the_upstream_request(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up", tokens=200, itl_s=0.02)
    gw = gateway(upstream)
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "long"}], stream=True, temperature=1
    ) as response:
        next(response.iter_bytes())
    assert wait_for(lambda: upstream.aborted == 1)
    assert upstream.completed == 0
    assert wait_for(lambda: gw.metric("inferstack_gateway_client_disconnects_total") == 1)


def test_keep_alive_connections_are_opened_at_startup(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    # The upstream's warm-up connection waits in its pool (beside it, the embeddings probe's own connection)
    pools = {origin[2]: len(pool.idle) for origin, pool in gw.app.http._pools.items()}
    assert pools[int(upstream.url.rsplit(":", 1)[1].split("/")[0])] == 1
