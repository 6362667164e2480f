"""Pure pieces: the deterministic key (with property tests) and SSE assembly/replay."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferstack_gateway import sse
from inferstack_gateway.normalize import cache_keys, parse_chat, parse_completion

SCOPE = {"tenant": "t", "alias": "local", "model_version": "1", "prompt_version": "1", "tier": "small"}


def key(body: dict[str, Any], **scope: str) -> str:
    return cache_keys(parse_chat(orjson.loads(orjson.dumps(body))), **{**SCOPE, **scope}).exact


BASE = {"model": "local", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@given(content=text, pad=st.sampled_from(["", " ", "\n", "\t  "]), zero=st.sampled_from([0, 0.0]))
def test_key_ignores_whitespace_padding_number_spelling_and_key_order(content: str, pad: str, zero: float) -> None:
    plain = {"model": "local", "messages": [{"role": "user", "content": content.strip() or "x"}], "temperature": 0}
    padded = {"temperature": zero, "messages": [{"content": pad + (content.strip() or "x") + pad, "role": "user"}],
              "model": "local", "user": "someone", "stream": True}  # fmt: skip
    assert key(plain) == key(padded)


@given(a=text, b=text)
def test_different_prompts_give_different_keys(a: str, b: str) -> None:
    if a.strip() != b.strip():
        assert key({**BASE, "messages": [{"role": "user", "content": a}]}) != key(
            {**BASE, "messages": [{"role": "user", "content": b}]}
        )


def test_a_completion_prompt_is_keyed_as_it_is_and_a_batch_of_token_id_prompts_is_accepted() -> None:
    # A completion continues its prompt exactly: trailing whitespace changes the answer (it was trimmed for the key).
    def completion_key(prompt: Any) -> str:
        body = {"model": "local", "prompt": prompt, "temperature": 0}
        return cache_keys(parse_completion(body), **SCOPE).exact

    assert completion_key("def f():\n    ") != completion_key("def f():")
    assert completion_key([[1, 2], [3]]) != completion_key([[1, 2]])
    assert parse_completion({"model": "local", "prompt": [[1, 2], [3]]}).prompt_tokens_estimate == 3


def test_only_a_text_only_message_of_role_and_content_is_a_semantic_candidate() -> None:
    def single(message: dict[str, Any]) -> str | None:
        return parse_chat({"model": "local", "messages": [{"role": "user", **message}]}).single_turn_text

    assert single({"content": " What is this? "}) == "What is this?"
    assert single({"content": [{"type": "text", "text": "What is this?"}]}) == "What is this?"
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}
    assert single({"content": [{"type": "text", "text": "What is this?"}, image]}) is None
    assert single({"content": "What is my name?", "name": "alice"}) is None


@pytest.mark.parametrize(
    "event",
    [{"choices": ["oops"]}, {"choices": [{"index": 0, "delta": "str"}]}, {"choices": [{"index": [1], "delta": {}}]},
     {"choices": [{"index": 0, "delta": {"content": 5}}]}, {"choices": [{"index": 0, "delta": {"audio": {}}}]},
     {"choices": [{"index": 0, "delta": {"tool_calls": [
         {"index": 0, "id": "call_1", "type": "custom", "custom": {"name": "run", "input": "ls"}}]}}]}],
    ids=["choice-a-string", "delta-a-string", "index-a-list", "content-a-number", "unknown-object-field",
         "custom-tool-call"],
)  # fmt: skip
def test_a_malformed_or_unrebuildable_stream_is_not_assembled(event: dict[str, Any]) -> None:
    # These raised out of the write-back (a traceback in the log, and no tokens charged).
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    raw = b"data: " + orjson.dumps(event) + b"\n\ndata: " + orjson.dumps(finish) + b"\n\ndata: [DONE]\n\n"
    assert sse.assemble("chat", raw) is None


def test_reasoning_content_is_kept_and_replayed_before_the_answer() -> None:
    raw = stream_of({"role": "assistant", "reasoning_content": "Think"}, {"reasoning_content": "ing."},
                    {"content": "Hi"})  # fmt: skip
    response = sse.assemble("chat", raw)
    assert response is not None and response["choices"][0]["message"]["reasoning_content"] == "Thinking."
    replayed = sse.assemble("chat", sse.replay("chat", response, include_usage=True))
    assert replayed is not None and replayed["choices"][0]["message"] == response["choices"][0]["message"]


def test_a_final_message_the_model_continues_is_keyed_with_its_whitespace() -> None:
    # vLLM's continue_final_message: the model continues the last (assistant) message as it is, as a completion
    # continues its prompt, so "The answer is " and "The answer is" get different answers (" Paris" vs "Paris"...).
    def prefilled(text: str, **extra: Any) -> dict[str, Any]:
        messages = [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": text}]
        return {**BASE, "messages": messages, **extra}

    assert key(prefilled("The answer is ")) == key(prefilled("The answer is"))  # a finished turn: trimmed as usual
    flag = {"continue_final_message": True, "add_generation_prompt": False}
    assert key(prefilled("The answer is ", **flag)) != key(prefilled("The answer is", **flag))
    assert key(prefilled(" The answer is", **flag)) != key(prefilled("The answer is", **flag))


def test_tenant_versions_and_tier_are_in_the_key() -> None:
    base = key(BASE)
    assert len({base, key(BASE, tenant="u"), key(BASE, model_version="2"), key(BASE, prompt_version="2"),
                key(BASE, tier="large")}) == 5  # fmt: skip


def stream_of(*deltas: dict[str, Any], usage: bool = True, done: bool = True) -> bytes:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = b""
    for i, delta in enumerate(deltas):
        finish = "stop" if i == len(deltas) - 1 else None
        out += b"data: " + orjson.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        out += b"\r\n\r\n" if i % 2 else b"\n\n"
    if usage:
        out += b"data: " + orjson.dumps({**base, "choices": [], "usage": {"completion_tokens": 2}}) + b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


def test_assemble_rebuilds_content_tool_calls_and_usage() -> None:
    raw = stream_of(
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                         "function": {"name": "f", "arguments": "{\"a"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": "\": 1}"}}]},
        {"content": "lo"},
    )  # fmt: skip
    response = sse.assemble("chat", raw)
    assert response is not None
    message = response["choices"][0]["message"]
    assert message["content"] == "Hello"
    assert message["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ]
    assert response["usage"] == {"completion_tokens": 2} and response["choices"][0]["finish_reason"] == "stop"


def test_assemble_rejects_truncated_streams() -> None:
    assert sse.assemble("chat", stream_of({"content": "a"}, {"content": "b"}, done=False)) is None
    no_finish = (
        stream_of({"content": "a"})[: -len(b"data: [DONE]\n\n")].replace(b'"stop"', b"null") + b"data: [DONE]\n\n"
    )
    assert sse.assemble("chat", no_finish) is None


def test_replay_of_an_assembled_stream_assembles_to_the_same_response() -> None:
    original = sse.assemble(
        "chat", stream_of({"role": "assistant", "content": ""}, {"content": "Hi"}, {"content": "!"})
    )
    assert original is not None
    replayed = sse.replay("chat", original, include_usage=True)
    assert replayed.endswith(b"data: [DONE]\n\n")
    assert sse.assemble("chat", replayed) == original


@pytest.mark.asyncio
async def test_deferred_work_waits_while_a_request_is_on_its_way_upstream() -> None:
    from inferstack_gateway.app import DEFER_S, POSTPONE_MAX, Gateway
    from inferstack_gateway.config import parse_config

    # GIVEN a gateway with a request that has arrived and not yet gone upstream
    config = parse_config(
        {"upstreams": {"main": {"url": "http://127.0.0.1:9/v1"}}, "tiers": {"small": {"upstreams": ["main"]}},
         "models": {"local": {"tier": "small", "cache": {"policy": "never"}}}, "auth": {"enabled": False}},
        env={},
    )  # fmt: skip
    gateway = Gateway(config)
    ran: list[str] = []
    gateway._arriving = 1
    # WHEN work is deferred
    gateway._defer(lambda: ran.append("access log"))
    await asyncio.sleep(DEFER_S * 4)
    # THEN it waits while the request is arriving, and runs once the request has gone upstream
    assert ran == []
    gateway._arriving = 0
    for _ in range(1000):
        if ran:
            break
        await asyncio.sleep(DEFER_S)
    assert ran == ["access log"]
    # AND under a load where someone is always arriving, it still runs after at most POSTPONE_MAX delays
    gateway._arriving = 1
    gateway._defer(lambda: ran.append("write-back"))
    for _ in range(POSTPONE_MAX * 100):  # timers fire late on a loaded box: poll instead of sleeping a fixed time
        if len(ran) == 2:
            break
        await asyncio.sleep(DEFER_S)
    assert ran == ["access log", "write-back"] and gateway._arriving == 1
