"""The HTTP protocol: a response's head leaves in the same send as its first body bytes."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from gateway_harness import API_KEY_A, sha256, wait_for

import inferstack_gateway.app
from inferstack_gateway.app import Gateway
from inferstack_gateway.config import parse_config
from inferstack_gateway.server import ChunkWriter, Cycle, HeadCoalescingTransport, chunk_writer, on_lost

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class RecordingTransport:
    """Stands in for uvloop's transport: records each send (write or writelines) as one entry."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.sends.append(data)

    def writelines(self, parts: Any) -> None:
        self.sends.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def coalescing() -> tuple[HeadCoalescingTransport, RecordingTransport]:
    inner = RecordingTransport()
    return HeadCoalescingTransport(inner, asyncio.get_running_loop()), inner  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_head_and_first_body_bytes_leave_in_one_send_and_later_chunks_go_straight_out() -> None:
    transport, inner = coalescing()
    transport.write(HEAD)
    assert inner.sends == []  # held
    transport.write(b'10\r\ndata: {"a":1}\n\n\r\n')
    assert inner.sends == [HEAD + b'10\r\ndata: {"a":1}\n\n\r\n']
    transport.write(b"0\r\n\r\n")
    assert inner.sends[-1] == b"0\r\n\r\n" and len(inner.sends) == 2
    await asyncio.sleep(0)
    assert len(inner.sends) == 2  # nothing left behind to flush


@pytest.mark.asyncio
async def test_a_head_with_no_body_in_the_same_iteration_is_sent_by_the_end_of_it() -> None:
    transport, inner = coalescing()
    transport.write(HEAD)
    await asyncio.sleep(0)
    assert inner.sends == [HEAD]


@pytest.mark.asyncio
async def test_close_sends_a_held_head_first_and_a_closed_transport_gets_no_late_write() -> None:
    transport, inner = coalescing()
    transport.write(HEAD)
    transport.close()
    assert inner.sends == [HEAD] and inner.closed

    transport, inner = coalescing()
    transport.write(HEAD)
    inner.closed = True  # the peer went away before the end of the iteration
    await asyncio.sleep(0)
    assert inner.sends == []


@pytest.mark.asyncio
async def test_everything_else_is_the_wrapped_transports() -> None:
    transport, inner = coalescing()
    transport.write(b"not a head")
    assert inner.sends == [b"not a head"]
    assert transport.get_extra_info("peername") == "info:peername"
    assert transport.is_closing() is False


@pytest.mark.asyncio
async def test_under_another_asgi_server_a_stream_is_relayed_as_one_message_per_read(upstreams: Any) -> None:
    """The direct chunk writer is uvicorn's httptools cycle only; any other server gets ASGI messages."""
    upstream = upstreams("plain", tokens=6, itl_s=0.02)
    config = {
        "upstreams": {"main": {"url": upstream.base}},
        "tiers": {"small": {"upstreams": ["main"]}},
        "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
        "auth": {"keys": [{"tenant": "t", "name": "k", "key_sha256": sha256(API_KEY_A)}]},
        "server": {"access_log": False},
    }
    app = Gateway(parse_config(config, env={}))
    body = orjson.dumps({"model": "local", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    requests = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    assert chunk_writer(send) is None
    scope = {
        "type": "http", "method": "POST", "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {API_KEY_A}".encode()), (b"content-type", b"application/json")],
    }  # fmt: skip
    await app.startup()
    try:
        await app(scope, receive, send)
    finally:
        await app.shutdown()
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [message["body"] for message in sent[1:]]
    assert len(bodies) >= 6  # the tokens came 20 ms apart: each went out as it arrived
    text = b"".join(bodies)
    assert text.endswith(b"data: [DONE]\n\n") and all(b" w%d" % i in text for i in range(1, 6))
    assert sent[-1].get("more_body", False) is False


@pytest.mark.asyncio
async def test_the_chunk_writer_frames_each_write_and_writes_nothing_to_a_closing_or_gone_client() -> None:
    transport = RecordingTransport()
    cycle = SimpleNamespace(transport=transport, disconnected=False, flow=SimpleNamespace(write_paused=False))
    writer = ChunkWriter(cycle)  # type: ignore[arg-type]  # the attributes of uvicorn's cycle that it uses
    assert writer.write(b"data: 1\n\n") is True
    assert writer.write(b"") is True  # an empty frame would end the body: nothing is written
    cycle.flow.write_paused = True
    assert writer.write(b"data: 2\n\n") is False  # the client's buffer is full: the caller pauses the upstream
    assert transport.sends == [b"9\r\ndata: 1\n\n\r\n", b"9\r\ndata: 2\n\n\r\n"]
    transport.closed = True
    assert writer.write(b"data: 3\n\n") is True
    cycle.disconnected = True
    assert writer.write(b"data: 4\n\n") is True
    await writer.drain()  # returns at once for a gone client, though its buffer was full
    assert len(transport.sends) == 2


def test_under_uvicorn_a_stream_after_its_first_read_goes_through_the_chunk_writer(
    gateway: Any, upstreams: Any, loop_thread: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    write = ChunkWriter.write
    monkeypatch.setattr(ChunkWriter, "write", lambda self, data: writes.append(data) or write(self, data))
    upstream = upstreams("paced", tokens=6, itl_s=0.02)
    gw = gateway(upstream)
    stream = gw.client().chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1.0
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "paced#1" + "".join(f" w{i}" for i in range(1, 6))
    assert len(writes) >= 4 and all(data.startswith(b"data: ") for data in writes)  # the tokens 20 ms apart
    gw.stop(loop_thread)


def test_a_streams_first_event_reaches_the_client_while_the_requests_task_is_held_back(
    gateway: Any, upstreams: Any, loop_thread: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an upstream with a short TTFT, and a gateway whose request task wakes only 0.6 s after the upstream's
    # first event is in hand (open_upstream held back): only the upstream connection's read can send that event
    hold_s = 0.6
    open_upstream = inferstack_gateway.app.open_upstream

    async def held_back(*args: Any, **kwargs: Any) -> Any:
        opened = await open_upstream(*args, **kwargs)
        await asyncio.sleep(hold_s)
        return opened

    monkeypatch.setattr(inferstack_gateway.app, "open_upstream", held_back)
    # (The stand-in writes its role event and first token in one step of the loop that the gateway shares: the
    # gateway's upstream connection reads both, with the head, in one read.)
    upstream = upstreams("paced", tokens=6, ttft_s=0.05, itl_s=0.02)
    gw = gateway(upstream)
    client = gw.client()  # (the first client in a process takes about 0.5 s to build: not timed)
    # WHEN the official client streams a completion
    asked = time.monotonic()
    stream = client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True, temperature=1.0
    )
    chunks = []
    first_content_s = None
    for chunk in stream:
        chunks.append(chunk)
        if first_content_s is None and chunk.choices and chunk.choices[0].delta.content:
            first_content_s = time.monotonic() - asked
    ended_s = time.monotonic() - asked
    # THEN the first content event arrived well before the request's task woke
    assert first_content_s is not None and first_content_s < hold_s / 2, (first_content_s, ended_s)
    assert ended_s >= hold_s  # (the task was held back indeed: the rest came after it woke)
    # AND the stream is whole and in order, its first events sent once: one role event, each token once, one finish
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    assert len(choices) == 1 + 6 + 1, [choice.delta for choice in choices]
    assert [choice.delta.role for choice in choices].count("assistant") == 1
    assert "".join(choice.delta.content or "" for choice in choices) == "paced#1" + "".join(
        f" w{i}" for i in range(1, 6)
    )
    assert [choice.finish_reason for choice in choices] == [None] * 7 + ["stop"]
    assert upstream.completed == 1
    gw.stop(loop_thread)


def test_a_client_that_leaves_after_a_streams_first_event_cancels_the_upstream_request_through_on_lost(
    gateway: Any, upstreams: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a gateway on its own server (no watcher task waits for http.disconnect) and an upstream streaming 3 s
    watchers: list[Any] = []
    cancel_on_disconnect = inferstack_gateway.app._cancel_on_disconnect

    async def watcher(*args: Any) -> bool:
        watchers.append(args)
        return await cancel_on_disconnect(*args)

    monkeypatch.setattr(inferstack_gateway.app, "_cancel_on_disconnect", watcher)
    upstream = upstreams("slow", tokens=60, itl_s=0.05)
    gw = gateway(upstream)
    # WHEN a client reads the stream's first event and closes its connection
    with gw.client().chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "long"}], stream=True, temperature=1
    ) as response:
        assert next(response.iter_bytes()).startswith(b"data: ")
    left = time.monotonic()
    # THEN the upstream request is dropped at once (the upstream sees its connection closed), long before its end
    assert wait_for(lambda: upstream.aborted == 1, timeout=1.5)
    assert time.monotonic() - left < 1.5 and upstream.completed == 0
    # AND the gateway counts it as a disconnect and holds nothing for it: in-flight count 0, no upstream connection
    assert wait_for(lambda: gw.metric("inferstack_gateway_client_disconnects_total") == 1, timeout=1)
    assert wait_for(lambda: gw.app.upstreams["main"].inflight == 0, timeout=1)
    assert wait_for(lambda: gw.app.http.busy_connections() == 0, timeout=1)
    assert watchers == []  # the protocol's on_lost did it


@pytest.mark.asyncio
async def test_on_lost_calls_back_at_once_for_a_client_already_gone_and_takes_a_callback_back() -> None:
    # GIVEN a request cycle of the gateway's protocol, its client still there
    protocol = SimpleNamespace(transport=RecordingTransport())
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions"}
    cycle = Cycle(protocol, scope, keep_alive=True, expect_100=False)  # type: ignore[arg-type]
    calls: list[str] = []
    # WHEN a callback is registered THEN it is kept for the protocol, not called; None takes it back
    assert on_lost(cycle.send, lambda: calls.append("early")) is True
    assert calls == [] and cycle.on_lost is not None
    assert on_lost(cycle.send, None) is True and cycle.on_lost is None
    # WHEN the client is gone before the callback is registered THEN it is called at once, once
    cycle.disconnected = True
    assert on_lost(cycle.send, lambda: calls.append("gone")) is True
    assert calls == ["gone"]

    # AND a send that is not the protocol's is refused (the caller watches receive() instead), its callback unused
    async def other_send(message: dict[str, Any]) -> None:
        pass

    assert on_lost(other_send, lambda: calls.append("other")) is False
    # AND a response already complete is not cut short: no call
    cycle.response_complete = True
    assert on_lost(cycle.send, lambda: calls.append("complete")) is True
    assert calls == ["gone"]
