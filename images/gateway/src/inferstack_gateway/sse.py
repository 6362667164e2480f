"""Server-sent events as OpenAI sends them: parse a finished stream into one response, and replay a response.

Both run off the critical path (write-back) or on a cache hit, never per relayed chunk: a miss is relayed byte
for byte.
"""

from __future__ import annotations

from typing import Any

import orjson

from inferstack_gateway.normalize import Kind

DONE = b"data: [DONE]\n\n"

_REBUILT = frozenset({"role", "content", "tool_calls"})
"""Message (and delta) fields rebuilt by name; any other string field of a delta is concatenated as it is, and
replayed in a delta of its own."""


_TOOL_CALL = frozenset({"index", "id", "type", "function"})
"""The fields of a function tool call's delta, all rebuilt; a call with any other is not cached."""


def parse_events(raw: bytes) -> tuple[list[dict[str, Any]], bool]:
    """Split an SSE body into its JSON `data:` payloads. Returns (events, saw [DONE])."""
    events: list[dict[str, Any]] = []
    done = False
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:"))
        if not data:
            continue
        if data == b"[DONE]":
            done = True
            break
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return events, False
        if isinstance(event, dict):
            events.append(event)
    return events, done


def first_output(chunks: list[bytes]) -> int | None:
    """Index of the chunk that completes the stream's first event with output (text, a tool call, reasoning): a
    role-only or empty opening event is not a token. None if no such event arrived."""
    pending = b""
    for index, chunk in enumerate(chunks):
        pending += chunk
        *blocks, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")
        events, _ = parse_events(b"\n\n".join(blocks))
        if any(_has_output(event) for event in events):
            return index
    return None


def _has_output(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(value for key, value in delta.items() if key != "role"):
            return True
    return False


def assemble(kind: Kind, raw: bytes) -> dict[str, Any] | None:
    """Rebuild the non-streamed response from a complete stream; None if it was truncated, carried an error, or holds
    what this cannot rebuild faithfully (a field of a type OpenAI's streams do not send): never a partial answer."""
    events, done = parse_events(raw)
    if not done or not events or any("error" in e for e in events):
        return None
    try:
        return _assemble(kind, events)
    except (TypeError, AttributeError, ValueError):
        return None  # a malformed event (e.g. `choices: ["x"]`, `delta: "x"`, a non-string content)


def _assemble(kind: Kind, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    first = events[0]
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for event in events:
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices") or ():
            index = choice.get("index", 0)
            if not isinstance(index, int):
                raise TypeError(f"choice index {index!r}")
            slot = choices.setdefault(
                index, {"text": [], "role": "assistant", "tools": {}, "extra": {}, "finish_reason": None}
            )
            if kind == "chat":
                delta = choice.get("delta") or {}
                for name, value in delta.items():
                    if name in _REBUILT or value is None:
                        continue
                    if not isinstance(value, str):
                        raise TypeError(f"delta field {name!r}")  # e.g. audio: not rebuilt, so not cached
                    # reasoning_content (vLLM's reasoning parsers), refusal, ...: text that streams in pieces
                    slot["extra"][name] = slot["extra"].get(name, "") + value
                if delta.get("role"):
                    slot["role"] = delta["role"]
                if delta.get("content"):
                    slot["text"].append(_string(delta["content"]))
                for call in delta.get("tool_calls") or ():
                    if call.get("type", "function") != "function" or not call.keys() <= _TOOL_CALL:
                        # e.g. a custom tool's call ("custom": {"name", "input"}): rebuilt as a function, it lost both
                        raise TypeError(f"tool call {call!r}")
                    merged = slot["tools"].setdefault(
                        call.get("index", 0),
                        {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if call.get("id"):
                        merged["id"] = call["id"]
                    function = call.get("function") or {}
                    merged["function"]["name"] += function.get("name") or ""
                    merged["function"]["arguments"] += function.get("arguments") or ""
            elif choice.get("text"):
                slot["text"].append(_string(choice["text"]))
            if choice.get("finish_reason"):
                slot["finish_reason"] = choice["finish_reason"]
    if not choices or any(slot["finish_reason"] is None for slot in choices.values()):
        return None
    out_choices = []
    for index in sorted(choices):
        slot = choices[index]
        text = "".join(slot["text"])
        if kind == "chat":
            message: dict[str, Any] = {"role": slot["role"], "content": text if text or not slot["tools"] else None}
            message.update(slot["extra"])
            if slot["tools"]:
                message["tool_calls"] = [slot["tools"][i] for i in sorted(slot["tools"])]
            out_choices.append(
                {"index": index, "message": message, "logprobs": None, "finish_reason": slot["finish_reason"]}
            )
        else:
            out_choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": slot["finish_reason"]})
    response: dict[str, Any] = {
        "id": first.get("id"),
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": first.get("created"),
        "model": first.get("model"),
        "choices": out_choices,
    }
    if first.get("system_fingerprint"):
        response["system_fingerprint"] = first["system_fingerprint"]
    if usage is not None:
        response["usage"] = usage
    return response


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"text {value!r}")
    return value


def replay(kind: Kind, response: dict[str, Any], include_usage: bool) -> bytes:
    """Render a stored non-streamed response as the SSE stream OpenAI would have sent for it."""
    base: dict[str, Any] = {
        "id": response.get("id"),
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": response.get("created"),
        "model": response.get("model"),
    }
    if response.get("system_fingerprint"):
        base["system_fingerprint"] = response["system_fingerprint"]
    if include_usage:
        base["usage"] = None
    out = bytearray()

    def emit(choices: list[dict[str, Any]], **extra: Any) -> None:
        out.extend(b"data: ")
        out.extend(orjson.dumps({**base, "choices": choices, **extra}))
        out.extend(b"\n\n")

    for choice in response.get("choices") or ():
        index = choice.get("index", 0)
        finish = {"finish_reason": choice.get("finish_reason"), "logprobs": None}
        if kind == "chat":
            message = choice.get("message") or {}
            emit([{"index": index, "delta": {"role": message.get("role", "assistant"), "content": ""}, **_open()}])
            extra = {k: v for k, v in message.items() if k not in _REBUILT and isinstance(v, str) and v}
            if extra:  # reasoning_content and the like come before the answer, as a reasoning model streams them
                emit([{"index": index, "delta": extra, **_open()}])
            if message.get("content"):
                emit([{"index": index, "delta": {"content": message["content"]}, **_open()}])
            if message.get("tool_calls"):
                calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
                emit([{"index": index, "delta": {"tool_calls": calls}, **_open()}])
            emit([{"index": index, "delta": {}, **finish}])
        else:
            emit([{"index": index, "text": choice.get("text", ""), **finish}])
    if include_usage and response.get("usage") is not None:
        emit([], usage=response["usage"])
    out.extend(DONE)
    return bytes(out)


def _open() -> dict[str, Any]:
    return {"logprobs": None, "finish_reason": None}


def completion_tokens(kind: Kind, raw: bytes, streamed: bool) -> int | None:
    """Total tokens of a finished response from its `usage`, if the upstream reported it."""
    if streamed:
        events, _ = parse_events(raw)
        usage = next((e["usage"] for e in reversed(events) if e.get("usage")), None)
    else:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        usage = body.get("usage") if isinstance(body, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    return None


def reported_completion_tokens(raw: bytes) -> int | None:
    """`usage.completion_tokens` of a complete stream's last event that carries `usage`, parsing that event only.

    None when it cannot be read that way (no usage, an error event, anything unusual): use assemble() then.
    """
    at = raw.rfind(b'"usage"')
    if at < 0 or b'"error"' in raw:
        return None
    start = raw.rfind(b"data:", 0, at)
    end = raw.find(b"\n\n", at)
    if start < 0 or end < 0 or b"\r" in raw:
        return None
    try:
        event = orjson.loads(raw[start + 5 : end])
    except orjson.JSONDecodeError:
        return None
    usage = event.get("usage") if isinstance(event, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
