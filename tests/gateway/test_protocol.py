"""The gateway's HTTP/1.1 protocol (server.py) over real sockets, serving small ASGI apps of the tests' own.

Each server is uvicorn's `Server` with `GatewayHttpProtocol` as its `http`, on the shared loop thread, with no Date or
Server header, so that every byte a client gets can be checked exactly.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import uvicorn
from gateway_harness import LoopThread, free_port, start_uvicorn, wait_for

from inferstack_gateway.server import GatewayHttpProtocol

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


# -- servers and clients ------------------------------------------------------------------------------------------


@dataclass
class Served:
    port: int
    server: uvicorn.Server
    task: asyncio.Task[None]
    loop: asyncio.AbstractEventLoop

    def connect(self, **options: Any) -> Wire:
        return Wire(self.port, **options)


async def _finish(task: asyncio.Task[None]) -> None:
    await task


@pytest.fixture
def serve(loop_thread: LoopThread) -> Iterator[Callable[..., Served]]:
    """Factory: serve(app, **uvicorn config) → the app served by GatewayHttpProtocol on a free port."""
    started: list[Served] = []

    def make(app: App, **options: Any) -> Served:
        port = free_port()
        protocol = functools.partial(GatewayHttpProtocol, head_timeout_s=5)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, loop="none", http=protocol, lifespan="off", log_config=None,
            access_log=False, server_header=False, date_header=False,
            **{"timeout_keep_alive": 5, "timeout_graceful_shutdown": 5, **options},
        )  # fmt: skip
        server = uvicorn.Server(config)
        served = Served(port, server, loop_thread.run(start_uvicorn(server)), loop_thread.loop)
        started.append(served)
        return served

    yield make
    for served in started:
        served.server.should_exit = True
        loop_thread.run(_finish(served.task), timeout=15)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes
    raw: bytes = field(repr=False)


class Wire:
    """A raw client connection that reads responses off a buffer, so pipelined ones can be told apart."""

    def __init__(self, port: int, timeout: float = 5, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect: fixes the window, no autotuning
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buffer = bytearray()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError(f"the server closed the connection; unread: {self.buffer[:200]!r}")
        self.buffer += chunk

    def read_until(self, marker: bytes) -> bytes:
        while (end := self.buffer.find(marker)) < 0:
            self._fill()
        end += len(marker)
        data = bytes(self.buffer[:end])
        del self.buffer[:end]
        return data

    def read_exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def read_until_closed(self, limit_s: float = 3) -> bytes:
        """Everything until the server closes; socket.timeout if it has not within limit_s."""
        self.sock.settimeout(limit_s)
        while chunk := self.sock.recv(1 << 20):
            self.buffer += chunk
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def is_closed_within(self, limit_s: float) -> bool:
        """True if the server closes within limit_s with nothing more sent (leftover bytes are an error)."""
        assert not self.buffer, f"unexpected bytes after the response: {bytes(self.buffer[:200])!r}"
        self.sock.settimeout(limit_s)
        try:
            extra = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        assert extra == b"", f"unexpected bytes after the response: {extra[:200]!r}"
        return True

    def response(self) -> Response:
        head = self.read_until(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.decode().lower()] = value.strip().decode()
        raw = head
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif "content-length" in headers:
            body = self.read_exact(int(headers["content-length"]))
            raw += body
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line = self.read_until(b"\r\n")
                size = int(size_line.strip(), 16)
                data = self.read_exact(size + 2)
                raw += size_line + data
                assert data.endswith(b"\r\n"), f"a chunk not ended by CRLF: {data[-10:]!r}"
                if size == 0:
                    break
                body += data[:-2]
        else:
            body = self.read_until_closed()
            raw += body
        return Response(status, headers, body, raw)


def request(method: str, path: str, *, headers: bytes = b"", body: bytes = b"", version: bytes = b"1.1") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    start = b"%s %s HTTP/%s\r\nHost: test\r\n" % (method.encode(), path.encode(), version)
    return start + length + headers + b"\r\n" + body


def get(path: str, headers: bytes = b"") -> bytes:
    return request("GET", path, headers=headers)


def expected(body: bytes, extra: bytes = b"") -> bytes:
    """The exact response of `respond` with this body (and `extra` header lines after its own)."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


async def respond(send: Any, body: bytes, status: int = 200, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    head = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body)), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += message["body"]
        if not message.get("more_body", False):
            return body


async def echo_path(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await respond(send, scope["path"].encode())


def openai_error(body: bytes) -> dict[str, Any]:
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return dict(error)


# -- 1. pipelining ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("first_sleeps_s", [0.0, 0.3], ids=["same-speed", "first-slower"])
def test_pipelined_requests_sent_together_are_answered_in_order_on_the_same_connection(
    serve: Callable[..., Served], first_sleeps_s: float
) -> None:
    # GIVEN an app whose answer to /one may take longer than its answer to /two
    events: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        events.append(f"start {scope['path']}")
        if scope["path"] == "/one":
            await asyncio.sleep(first_sleeps_s)
        await respond(send, b"answer to " + scope["path"].encode())
        events.append(f"end {scope['path']}")

    served = serve(app)
    with served.connect() as wire:
        # WHEN both requests leave in one send
        wire.send(get("/one") + get("/two"))
        # THEN the first one's whole response comes first, then the second's
        assert wire.read_exact(len(expected(b"answer to /one")) + len(expected(b"answer to /two"))) == (
            expected(b"answer to /one") + expected(b"answer to /two")
        )
        # AND the second request reached the app only once the first was answered
        assert wait_for(lambda: len(events) == 4, timeout=3)
        assert events == ["start /one", "end /one", "start /two", "end /two"]
        # AND the connection goes on serving
        wire.send(get("/three"))
        assert wire.response().raw == expected(b"answer to /three")


# -- 2. Expect: 100-continue --------------------------------------------------------------------------------------


def test_100_continue_is_sent_when_the_app_first_receives_and_the_body_sent_after_it_is_answered(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app that calls receive() only once the test lets it
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await gate.wait()
        await respond(send, b"got " + await read_body(receive))

    served = serve(app)
    with served.connect() as wire:
        # WHEN a client sends a head with Expect: 100-continue and holds its body back
        wire.send(b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        # THEN nothing is written while the app has not asked for the body
        wire.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            wire.sock.recv(1024)
        wire.sock.settimeout(5)
        # AND once it does, 100 Continue (exactly), then after the body the final response
        served.loop.call_soon_threadsafe(gate.set)
        assert wire.read_exact(len(b"HTTP/1.1 100 Continue\r\n\r\n")) == b"HTTP/1.1 100 Continue\r\n\r\n"
        wire.send(b"hello")
        assert wire.response().raw == expected(b"got hello")


# -- 3. keep-alive ------------------------------------------------------------------------------------------------


def test_three_sequential_requests_on_one_connection_are_all_answered(serve: Callable[..., Served]) -> None:
    # GIVEN a server and one client connection
    clients: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        clients.append(scope["client"])
        await echo_path(scope, receive, send)

    served = serve(app)
    with served.connect() as wire:
        # WHEN three requests go one after the other, each once the previous is answered
        for path in ("/a", "/b", "/c"):
            wire.send(get(path))
            # THEN each is answered, without connection: close
            assert wire.response().raw == expected(path.encode())
    # AND all three came on the same connection
    assert len(clients) == 3 and len(set(clients)) == 1


def test_a_connections_requests_run_in_its_one_task_and_a_closed_connection_leaves_no_task_behind(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app that notes the task each request runs in
    tasks: list[tuple[str, asyncio.Task[Any]]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append((scope["path"], task))
        await echo_path(scope, receive, send)

    served = serve(app)
    with served.connect() as one, served.connect() as two:
        # WHEN three requests go on one connection and two on another, each once the previous is answered
        for wire, paths in ((one, ("/1a", "/1b", "/1c")), (two, ("/2a", "/2b"))):
            for path in paths:
                wire.send(get(path))
                assert wire.response().raw == expected(path.encode())
        # THEN each connection's requests ran in one task of its own (none was created per request)
        by_path = dict(tasks)
        assert by_path["/1a"] is by_path["/1b"] is by_path["/1c"]
        assert by_path["/2a"] is by_path["/2b"] and by_path["/2a"] is not by_path["/1a"]
        # AND an idle connection's task waits for its next request
        assert not by_path["/1a"].done() and not by_path["/2a"].done()
    # AND once the connections close, their tasks end
    assert wait_for(lambda: all(task.done() for _, task in tasks), timeout=3)
    assert not any(task.cancelled() or task.exception() for _, task in tasks)


def test_an_app_call_that_goes_on_after_its_response_holds_the_connections_next_request_until_it_returns(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app whose call for /tail goes on for 0.3 s after its response is complete
    events: list[tuple[str, float]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        events.append((f"start {scope['path']}", time.monotonic()))
        await echo_path(scope, receive, send)
        if scope["path"] == "/tail":
            await asyncio.sleep(0.3)
        events.append((f"end {scope['path']}", time.monotonic()))

    served = serve(app)
    with served.connect() as wire:
        # WHEN the client sends its next request as soon as it has the first answer
        wire.send(get("/tail"))
        assert wire.response().raw == expected(b"/tail")
        wire.send(get("/next"))
        # THEN the next request is answered, its app call started once the first had returned, on this connection
        assert wire.response().raw == expected(b"/next")
        assert wait_for(lambda: len(events) == 4, timeout=3)
        assert [name for name, _ in events] == ["start /tail", "end /tail", "start /next", "end /next"]
        # AND the connection goes on serving
        wire.send(get("/third"))
        assert wire.response().raw == expected(b"/third")


def test_an_http_1_0_request_without_keep_alive_is_answered_and_the_connection_closed(
    serve: Callable[..., Served],
) -> None:
    # GIVEN a server whose idle connections would stay open 5 s
    served = serve(echo_path)
    with served.connect() as wire:
        # WHEN an HTTP/1.0 request without keep-alive arrives
        wire.send(request("GET", "/old", version=b"1.0"))
        # THEN it gets its answer
        response = wire.response()
        assert response.status == 200 and response.body == b"/old"
        # AND the server closes the connection right after
        assert wire.is_closed_within(1.5)


def test_a_request_with_connection_close_gets_connection_close_and_the_socket_is_closed(
    serve: Callable[..., Served],
) -> None:
    # GIVEN a server whose idle connections would stay open 5 s
    served = serve(echo_path)
    with served.connect() as wire:
        # WHEN a request says Connection: close
        wire.send(get("/last", b"Connection: close\r\n"))
        # THEN its response says so too
        assert wire.response().raw == expected(b"/last", extra=b"connection: close\r\n")
        # AND the server closes the connection after it
        assert wire.is_closed_within(1.5)


# -- 4. HEAD ------------------------------------------------------------------------------------------------------


def test_head_gets_the_head_only_with_the_apps_content_length(serve: Callable[..., Served]) -> None:
    # GIVEN an app that always sends its 11-byte body
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await respond(send, b"hello world")

    served = serve(app)
    with served.connect() as wire:
        # WHEN a HEAD request and then a GET go on one connection
        wire.send(request("HEAD", "/"))
        head = wire.read_until(b"\r\n\r\n")
        wire.send(get("/"))
        # THEN the HEAD's answer is the head alone, content-length: 11 kept, and the next bytes are the GET's answer
        assert head == b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\n"
        assert wire.read_exact(len(expected(b"hello world"))) == expected(b"hello world")
        assert wire.buffer == b""


# -- 5. chunked responses -----------------------------------------------------------------------------------------


def test_a_response_without_content_length_is_sent_chunked_and_204_is_not(serve: Callable[..., Served]) -> None:
    # GIVEN an app that streams its body in pieces with no content-length (and answers /empty with 204)
    alphabet = b"abcdefghijklmnopqrstuvwxyz"  # 26 bytes: 0x1a, a size that decimal would get wrong

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/empty":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        if scope["path"] == "/ends-empty":
            for piece in (b"hello", b"", alphabet):
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        else:  # the last piece carries data
            await send({"type": "http.response.body", "body": b"abc", "more_body": True})
            await send({"type": "http.response.body", "body": b"de", "more_body": False})

    served = serve(app)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
    with served.connect() as wire:
        # WHEN the streamed responses and the 204 are asked for on one connection
        # THEN each piece is one chunk (size in hex, CRLF after it and after the data; an empty piece none), and the
        # body ends with the zero-size chunk
        wire.send(get("/ends-empty"))
        assert wire.response().raw == head + b"5\r\nhello\r\n1a\r\n" + alphabet + b"\r\n0\r\n\r\n"
        wire.send(get("/ends-with-data"))
        assert wire.response().raw == head + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        # AND the 204 has neither transfer-encoding nor a chunk: the next response follows its head at once
        wire.send(get("/empty") + get("/ends-with-data"))
        assert wire.read_until(b"\r\n\r\n") == b"HTTP/1.1 204 No Content\r\n\r\n"
        assert wire.response().raw == head + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"


# -- 6. invalid response headers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        (b"x-note", b"ok\r\nx-injected: yes"),
        (b"x-note", b"ok\nx-injected: yes"),
        (b"x-note: ok\r\nx-injected", b"yes"),
        (b"x bad", b"x-injected"),
    ],
    ids=["crlf-in-value", "lf-in-value", "crlf-in-name", "space-in-name"],
)
def test_a_response_header_that_would_split_the_response_never_reaches_the_wire(
    serve: Callable[..., Served], header: tuple[bytes, bytes]
) -> None:
    # GIVEN an app that sends a header with CR/LF in it, or a name that is not a token
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await respond(send, b"body", headers=(header,))

    served = serve(app)
    with served.connect() as wire:
        # WHEN a client asks (and says it closes, so that a response that did go out is read whole)
        wire.send(get("/", b"Connection: close\r\n"))
        received = wire.read_until_closed()
    # THEN it gets either nothing (the connection closed) or a 500, never the injected line or the app's header
    assert b"x-injected" not in received.lower() and b"x-note" not in received.lower()
    assert received == b"" or received.startswith(b"HTTP/1.1 500 ")


# -- 7. app errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["raises", "returns-without-a-response"])
def test_an_app_that_fails_before_its_response_gets_a_500_in_openai_shape_and_the_connection_closed(
    serve: Callable[..., Served], fault: str
) -> None:
    # GIVEN an app that raises, or returns, before it starts a response
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if fault == "raises":
            raise ValueError("the app broke")

    served = serve(app)
    with served.connect() as wire:
        # WHEN a client asks
        wire.send(get("/"))
        response = wire.response()
        # THEN it gets a 500 in OpenAI's error shape that says the connection closes, and the connection closes
        assert response.status == 500
        assert response.headers["content-type"] == "application/json" and response.headers["connection"] == "close"
        error = openai_error(response.body)
        assert error["type"] == "server_error" and "the app broke" not in error["message"]
        assert wire.is_closed_within(1.5)


# -- 8. limit_concurrency -----------------------------------------------------------------------------------------


def _held_app(entered: threading.Event, gate: asyncio.Event) -> App:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        entered.set()
        await gate.wait()
        await respond(send, b"served")

    return app


def test_a_connection_over_limit_concurrency_gets_503_in_openai_shape(serve: Callable[..., Served]) -> None:
    # GIVEN limit_concurrency=1 and an app that holds its first request until the test lets it go
    gate, entered = asyncio.Event(), threading.Event()
    served = serve(_held_app(entered, gate), limit_concurrency=1)
    with served.connect() as first:
        first.send(get("/first"))
        # (uvicorn's own protocols count the asking connection against the limit: 1 refused every request)
        assert entered.wait(3), "the only connection's request did not reach the app"
        # WHEN a second connection asks while the first request is in flight
        with served.connect() as second:
            second.send(get("/second"))
            refused = second.response()
            # THEN it gets 503 in OpenAI's error shape, to retry in a second, and its connection closes
            assert refused.status == 503
            assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
            assert openai_error(refused.body)["code"] == "over_capacity"
            assert second.is_closed_within(1.5)
        # AND the first request is still answered
        served.loop.call_soon_threadsafe(gate.set)
        assert first.response().raw == expected(b"served")


# -- 9. graceful shutdown -----------------------------------------------------------------------------------------


def test_graceful_shutdown_finishes_a_streaming_response_and_closes_an_idle_connection_at_once(
    serve: Callable[..., Served], loop_thread: LoopThread
) -> None:
    # GIVEN a server with a response streaming 8 chunks 0.1 s apart and an idle keep-alive connection
    finished: list[float] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] != "/stream":
            await echo_path(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for i in range(8):
            await send({"type": "http.response.body", "body": b"chunk %d;" % i, "more_body": True})
            await asyncio.sleep(0.1)
        finished.append(time.monotonic())
        await send({"type": "http.response.body", "body": b""})

    served = serve(app)
    with served.connect() as idle, served.connect() as busy:
        idle.send(get("/idle"))
        assert idle.response().raw == expected(b"/idle")
        busy.send(get("/stream"))
        head = busy.read_until(b"chunk 0;\r\n")
        # WHEN the server is told to exit while the stream is under way
        served.server.should_exit = True
        # THEN the idle connection is closed at once, while the stream still goes on
        asked = time.monotonic()
        assert idle.is_closed_within(2)
        closed = time.monotonic()
        assert closed - asked < 1 and not finished
        # AND the stream's response finishes whole, every chunk and the terminator, and then its connection closes
        rest = busy.read_until_closed(5)
        assert finished and head + rest == (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"8\r\nchunk %d;\r\n" % i for i in range(8))
            + b"0\r\n\r\n"
        )
    # AND the server exits
    loop_thread.run(_finish(served.task), timeout=5)


# -- 10. client disconnects ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["mid-body", "after-the-body"])
def test_a_client_that_disconnects_mid_request_wakes_the_apps_receive_with_http_disconnect(
    serve: Callable[..., Served], when: str
) -> None:
    # GIVEN an app that keeps calling receive() and never answers
    messages: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] == "http.disconnect":
                return

    served = serve(app)
    with served.connect() as wire:
        # WHEN a client sends part of its body (or all of it), waits until the app has it, and disconnects
        sent = b"hel" if when == "mid-body" else b"hello"
        wire.send(b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n" + sent)
        assert wait_for(lambda: b"".join(m.get("body", b"") for m in messages) == sent, timeout=3)
        time.sleep(0.1)  # the app is waiting in receive() again
    # THEN the app's waiting receive() returns http.disconnect
    assert wait_for(lambda: bool(messages) and messages[-1]["type"] == "http.disconnect", timeout=3), messages
    *bodies, disconnect = messages
    assert disconnect == {"type": "http.disconnect"}
    assert all(m["type"] == "http.request" for m in bodies)
    assert [m["more_body"] for m in bodies][-1] is (when == "mid-body")


def test_a_client_that_disconnects_with_a_pipelined_request_queued_wakes_the_running_requests_receive(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app whose first request waits in receive() after its body, and a second request pipelined behind it
    messages: list[tuple[str, dict[str, Any]]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            messages.append((scope["path"], message))
            if message["type"] == "http.disconnect":
                return

    served = serve(app)
    with served.connect() as wire:
        wire.send(
            b"POST /first HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nhi"
            b"POST /second HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\nho"
        )
        assert wait_for(lambda: bool(messages), timeout=3)
        time.sleep(0.1)  # the first request's app waits in receive() again; the second one is queued
        # WHEN the client disconnects
    # THEN the running request's receive() returns http.disconnect (the newest, queued request is not the only one
    # told), and the queued request never starts
    assert wait_for(lambda: ("/first", {"type": "http.disconnect"}) in messages, timeout=3), messages
    time.sleep(0.1)
    assert [path for path, _ in messages] == ["/first", "/first"]


# -- 11. write back-pressure --------------------------------------------------------------------------------------


def test_a_client_that_does_not_read_holds_the_app_back_and_then_gets_every_byte_in_order(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app that sends 20 MB in 64 KiB chunks, each chunk distinct
    chunk_size, chunks = 64 * 1024, 320
    sent: list[int] = []

    def piece(i: int) -> bytes:
        return i.to_bytes(4, "big") * (chunk_size // 4)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = b"%d" % (chunk_size * chunks)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]})
        for i in range(chunks):
            await send({"type": "http.response.body", "body": piece(i), "more_body": i < chunks - 1})
            sent.append(i)

    served = serve(app)
    # WHEN a client with a small receive window asks, and reads nothing for 1 s
    with served.connect(timeout=10, rcvbuf=64 * 1024) as wire:
        wire.send(get("/big"))
        time.sleep(1)
        # THEN the app is held back meanwhile (by its send) once the socket buffers are full: far less than 20 MB out
        held_at = len(sent)
        assert 0 < held_at < chunks // 2, f"{held_at} of {chunks} chunks sent to a client that read nothing"
        # AND once the client reads, it gets every byte, in order
        response = wire.response()
    assert response.status == 200 and len(response.body) == chunk_size * chunks
    assert response.body == b"".join(piece(i) for i in range(chunks))
    assert len(sent) == chunks


# -- 12. request body flow control --------------------------------------------------------------------------------


def test_a_1_mb_body_sent_in_pieces_reaches_a_slow_app_whole_with_reading_paused_meanwhile(
    serve: Callable[..., Served],
) -> None:
    # GIVEN an app that starts receiving only after 0.3 s, and then takes 10 ms before each receive()
    sizes: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        digest = hashlib.sha256()
        await asyncio.sleep(0.3)
        while True:
            message = await receive()
            sizes.append(len(message["body"]))
            digest.update(message["body"])
            if not message["more_body"]:
                break
            await asyncio.sleep(0.01)
        await respond(send, b"%d %s" % (sum(sizes), digest.hexdigest().encode()))

    served = serve(app)
    body = b"".join(i.to_bytes(4, "big") for i in range(256 * 1024))  # 1 MiB, every 4 bytes distinct
    with served.connect(timeout=10) as wire:
        # WHEN a client sends a 1 MiB body in 64 pieces of 16 KiB, 2 ms apart (most of it before the app receives)
        wire.send(b"POST /upload HTTP/1.1\r\nHost: test\r\nContent-Length: %d\r\n\r\n" % len(body))
        for start in range(0, len(body), 16 * 1024):
            wire.send(body[start : start + 16 * 1024])
            time.sleep(0.002)
        # THEN the app gets it whole and in order, pieces that arrived between its receive() calls included
        response = wire.response()
    assert response.body == b"%d %s" % (len(body), hashlib.sha256(body).hexdigest().encode())
    # AND no receive() got more than the protocol buffers before it pauses reading (64 KiB and one socket read)
    assert max(sizes) <= 64 * 1024 + 256 * 1024, sizes


# -- 13. the lazy idle timer ----------------------------------------------------------------------------------------


def test_a_connection_in_use_outlives_the_keep_alive_timeout_and_is_closed_once_idle_for_it(
    serve: Callable[..., Served],
) -> None:
    # GIVEN a server whose idle connections close after 1 s (its idle timer armed when the connection is made)
    served = serve(echo_path, timeout_keep_alive=1)
    with served.connect() as wire:
        # WHEN a client sends a request every 0.6 s for 1.8 s: past the timer's first firing (1 s after the connection
        # was made) and its re-armings; the last response comes while a re-armed timer is pending, which must arm
        # itself once more when it fires (an odd count of requests would hide a timer that does not: the next response
        # would arm a fresh one)
        began = time.monotonic()
        for i in range(4):
            time.sleep(max(0.0, began + 0.6 * i - time.monotonic()))
            wire.send(get(f"/{i}"))
            # THEN each is answered on the same connection: it was never closed for being idle
            assert wire.response().raw == expected(f"/{i}".encode())
        answered = time.monotonic()
        # AND once idle it is closed after the keep-alive timeout from its last response (1 s; the server's clock
        # starts a moment before this client's read), not sooner and not much later
        assert wire.is_closed_within(2.5)
        idle_s = time.monotonic() - answered
    assert 0.9 <= idle_s < 2, idle_s


def test_a_request_that_takes_longer_than_the_keep_alive_timeout_is_answered(serve: Callable[..., Served]) -> None:
    # GIVEN a server whose idle connections close after 1 s, and an app that takes 1.5 s over /slow
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await asyncio.sleep(1.5)
        await echo_path(scope, receive, send)

    served = serve(app, timeout_keep_alive=1)
    with served.connect() as wire:
        # WHEN a client asks for /slow on a fresh connection (the idle timer fires while the app works)
        wire.send(get("/slow"))
        # THEN the answer comes whole: the idle timer does not cut a request under way
        assert wire.response().raw == expected(b"/slow")
        # AND the connection serves the next request at once: idle time counts from the last response
        wire.send(get("/next"))
        assert wire.response().raw == expected(b"/next")
        # AND the timer is armed again after it: the connection, idle now, is closed after the timeout
        answered = time.monotonic()
        assert wire.is_closed_within(2.5)
        assert 0.9 <= time.monotonic() - answered < 2
