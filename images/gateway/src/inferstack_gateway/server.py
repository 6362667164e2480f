"""The gateway's HTTP/1.1 server protocol: httptools' parser under one ASGI app, run by uvicorn's `Server`.

uvicorn keeps what is around the connections (the listening sockets, signals, the lifespan, the Date header, graceful
shutdown); each connection is this protocol, passed as uvicorn's `http` (`http_protocol`). It replaced a subclass of
uvicorn's own httptools protocol, whose request path (an `asyncio.Event` and a 20-attribute cycle per request, the
scope built field by field, two regular expressions per response header, its flow-control object) ran on every
request's way to its first token (`benchmarks/README.md`, "The gateway's own protocol", for what the change measured).
What it keeps from uvicorn's protocol, to the behaviour: keep-alive and its idle timeout, pipelining
(requests answered in order, reading paused meanwhile), `Expect: 100-continue`, read and write flow control,
HEAD, HTTP/1.0, `limit_concurrency`, graceful shutdown, the ASGI 3 http scope and messages. Of uvicorn's settings it
does not use the access log (the gateway writes its own) or `reset_contextvars`; an Upgrade request (WebSocket, h2c)
is answered as plain HTTP/1.1, as uvicorn does with `ws="none"`.

What it adds:
- A response's head leaves in the same send as its first body bytes (`HeadCoalescingTransport`): a streamed answer
  reaches the client as one packet, one wake-up of the client, before it can read its first token. A stream may
  start from another protocol's callback, synchronously (`start_stream`), and a disconnect may call back into the
  app (`on_lost`): the gateway's first event and its cancellation need no step of the request's task.
- Refusals in OpenAI's error shape, like every other refusal of the gateway: 400 for a request that is not HTTP/1.1,
  408 for a head not complete within `head_timeout_s` of its first byte, 431 for a head over MAX_HEAD_BYTES, 503 over
  `limit_concurrency`. A new connection that sends nothing is closed after the keep-alive timeout, as an idle one is.
- A response that closes the connection before its request's body has all arrived (the app's early errors: 401,
  413, 408 ...) shuts the write side first and drops what still comes in for at most LINGER_S, then closes.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import unquote

import httptools

from inferstack_gateway.config import ServerConfig
from inferstack_gateway.errors import error_body
from inferstack_gateway.logs import logger

STATUS_LINE_PREFIX = b"HTTP/1.1 "
LINGER_S = 2.0
"""How long a connection closed with part of a request's body unread goes on reading (and dropping) it, its write side
already shut, so that the answer reaches the client before the close: closing a socket with unread input sends a TCP
reset, and a reset can destroy an answer the client has not read yet (RFC 9112 §9.6). The client's own close ends it
sooner."""

MAX_HEAD_BYTES = 64 * 1024
"""The most a request's head (request line and header fields) may take: httptools holds a head whole until it ends,
with no bound of its own (a 50 MB header field was read, and held, for a 200). Over it: 431 (RFC 6585 §5). nginx
allows 4 lines of 8 KiB by default, Node.js 16 KiB in all."""

BODY_HIGH_WATER = 64 * 1024
"""Request body bytes buffered and not yet received by the app, beyond which reading from the socket pauses."""

ASGI = {"version": "3.0", "spec_version": "2.3"}
CLOSE = (b"connection", b"close")


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %b\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}
_BAD_NAMES = re.compile(b"[^!#$%&'*+\\-.^_`|~0-9A-Za-z]")
"""Anything but a token's characters (RFC 9110 §5.6.2), in a response header's name."""
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters other than tab, in a response header's value: CR or LF would split the response."""


class _Discard:
    """Stands in for the httptools parser of a lingering connection: whatever arrives is dropped unparsed."""

    __slots__ = ()

    def feed_data(self, data: bytes) -> None:
        pass


class HeadCoalescingTransport:
    """A transport that holds a response head (a write starting with the status line) for the next write.

    `lingers`, when given, is asked at close(): True when it has taken the close over (see `GatewayHttpProtocol`)."""

    __slots__ = ("_held", "_lingers", "_loop", "_transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        lingers: Callable[[], bool] | None = None,
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._lingers = lingers

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.writelines((held, data))
        elif data.startswith(STATUS_LINE_PREFIX):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, parts: Any) -> None:
        """Write now, after any held head: for a caller that sends a head with its first body bytes itself."""
        self.flush()
        self._transport.writelines(parts)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        if self._lingers is not None and self._lingers():
            return
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHttpProtocol(asyncio.Protocol):
    """One client connection: HTTP/1.1 parsed by httptools, each request an ASGI task. Built by uvicorn's `Server`
    (pass `http_protocol(server_config)` as uvicorn's `http`), with uvicorn's config and server state."""

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        head_timeout_s: float = 20.0,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.loop = _loop or asyncio.get_event_loop()
        self.root_path: str = config.root_path
        self.limit_concurrency: int | None = config.limit_concurrency
        self.timeout_keep_alive: float = config.timeout_keep_alive
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks
        self.app_state = app_state
        self.parser: Any = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests that follow a `Connection: close` one, as uvicorn does.
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self._head_timeout_s = head_timeout_s

        self.transport: HeadCoalescingTransport = None  # type: ignore[assignment]  # set by connection_made
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.pipeline: deque[tuple[Cycle, Any]] = deque()
        self.cycle: Cycle | None = None
        """The newest request's (the one whose body is being read)."""
        self._running: Cycle | None = None
        """The request whose app is running: an older one than `cycle` while a pipelined request waits its turn."""
        self.read_paused = False
        self.write_paused = False
        self._drainers: list[asyncio.Future[None]] = []
        # Timers are armed lazily, so that a request that arrives whole touches none (a timer armed and cancelled
        # costs about 10 µs on a cold path, benchmarks/cold_calls.py): the idle timer checks when it fires whether the
        # connection is still idle, and the head timer is armed only for a head that a read left incomplete.
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_head = False
        self._linger_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect_100 = False
        self._task: asyncio.Task[None] | None = None
        """The connection's task, which runs its requests' app calls one after another (`_serve`)."""
        self._next: asyncio.Future[tuple[Cycle, Any] | None] | None = None
        """While the connection's task waits for the next request: what `_start` gives it (None: the connection
        closed)."""
        self._queued: tuple[Cycle, Any] | None = None
        """A request started while the task was still in the previous request's app call (its response complete)."""

    # -- the connection -----------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.connections.add(self)
        # A stream transport (uvloop's is not a subclass of asyncio's classes).
        self.transport = HeadCoalescingTransport(cast(asyncio.Transport, transport), self.loop, self._lingers)
        self.server = _address(transport, "sockname")
        self.client = _address(transport, "peername")
        if transport.get_extra_info("sslcontext"):
            self.scheme = "https"
        # A connection that never sends a byte is closed like an idle one.
        self._idle_since = self.loop.time()
        self._keep_alive_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        waiter, self._next = self._next, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # the connection's task, waiting for a next request, ends
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        self._stop_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        for cycle in dict.fromkeys((self._running, self.cycle)):  # the running request's and a pipelined one's
            if cycle is None:
                continue
            if not cycle.response_complete:
                cycle.disconnected = True
                lost, cycle.on_lost = cycle.on_lost, None
                if lost is not None:
                    lost()
            cycle.wake()
        self.resume_writing()
        if exc is None:
            self.transport.close()
        self.parser = _Discard()

    def eof_received(self) -> None:
        """The client shut its side: the transport closes (the connection is lost, and a request under way with it)."""

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # an Upgrade (WebSocket, h2c) request is served as a plain HTTP/1.1 one; what follows is not read
        except httptools.HttpParserError as exc:
            logger.warning("invalid HTTP request", extra={"client": self.client, "error": str(exc)})
            self._refuse_and_close(
                b"400 Bad Request",
                "Invalid HTTP request received. The request is not valid HTTP/1.1 (for example both Content-Length "
                "and Transfer-Encoding, or a malformed request line or header).",
                "invalid_http_request",
            )
            return
        if self._in_head:  # a head still incomplete after this read: httptools holds all of it
            if self._head_timer is None:  # its first bytes: it must be whole within head_timeout_s
                self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._head_too_large()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drainers, self._drainers = self._drainers, []
        for waiter in drainers:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until the client's socket buffer is below its low-water mark, or the connection is lost."""
        while self.write_paused and not self.transport.is_closing():
            waiter = self.loop.create_future()
            self._drainers.append(waiter)
            await waiter

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: close an idle connection now, and a busy one once its response is complete."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    # -- httptools' callbacks -----------------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect_100 = False
        self._in_head = True
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect_100 = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._stop_head_timer()
        parser = self.parser
        http_version: str = parser.get_http_version()
        url = httptools.parse_url(self._url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        scope = {
            "type": "http",
            "asgi": ASGI,
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": parser.get_method().decode("ascii"),
            "root_path": self.root_path,
            "path": self.root_path + path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "state": self.app_state.copy(),
        }
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) > limit or len(self.tasks) >= limit):  # this one included
            logger.warning("over server.limit_concurrency: 503", extra={"limit": limit})
            app = _service_unavailable
        running = self.cycle
        cycle = self.cycle = Cycle(self, scope, keep_alive, self._expect_100)
        if running is None or running.response_complete:
            self._start(cycle, app)
        else:  # pipelined behind a response under way: answered in order, reading paused meanwhile
            self.pause_reading()
            self.pipeline.appendleft((cycle, app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.body += body
        if len(cycle.body) > BODY_HIGH_WATER:
            self.pause_reading()
        cycle.wake()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.wake()

    # -- requests -----------------------------------------------------------------------------------------------------

    def _start(self, cycle: Cycle, app: Any) -> None:
        """Run the request's app call in the connection's task: created for the connection's first request, and
        handed each later one as it comes. A task created per request (a Task object, its context, its registration
        with asyncio and its first step scheduled) cost about 20 µs on a cold path, on the way to every first token
        (benchmarks/README.md, "The connection's task")."""
        self._running = cycle
        waiter, self._next = self._next, None
        if waiter is not None and not waiter.done():
            waiter.set_result((cycle, app))
        elif self._task is None:
            task = self._task = self.loop.create_task(self._serve(cycle, app))
            task.add_done_callback(self._served)
        else:  # the task is still in the previous request's app call, whose response is complete: it runs this next
            self._queued = (cycle, app)

    async def _serve(self, cycle: Cycle, app: Any) -> None:
        """The connection's task: its requests' app calls in turn, until the connection closes. While a call runs
        the task is in `tasks` (uvicorn's server state, which `limit_concurrency` counts and a graceful shutdown
        waits for), as a request's own task used to be; an idle connection's task waits outside it. The requests
        share the task's context: the gateway sets no context variable (and does not use uvicorn's
        `reset_contextvars`)."""
        task = asyncio.current_task()
        assert task is not None
        request: tuple[Cycle, Any] | None = (cycle, app)
        while request is not None:
            cycle, app = request
            self.tasks.add(task)
            try:
                await cycle.run_asgi(app)
            finally:
                self.tasks.discard(task)
            request, self._queued = self._queued, None
            if request is None:
                if task.cancelling() or self.transport.is_closing():
                    return  # a cancel is for a lost connection (`on_lost`), or uvicorn's forced shutdown
                waiter = self._next = self.loop.create_future()
                request = await waiter

    def _served(self, task: asyncio.Task[None]) -> None:
        self._task = None
        self._next = None
        queued, self._queued = self._queued, None
        if not task.cancelled() and task.exception() is not None:
            logger.error("the connection's task failed", exc_info=task.exception())
        if queued is not None and not self.transport.is_closing():
            self._start(*queued)

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_timed_out)

    # -- timers and refusals ------------------------------------------------------------------------------------------

    def _idle_timed_out(self) -> None:
        """Close the connection if it has been idle for the keep-alive timeout: no request under way (its response
        completing arms this again) and none since."""
        self._keep_alive_timer = None
        cycle = self.cycle
        if self.transport.is_closing() or self._in_head or (cycle is not None and not cycle.response_complete):
            return
        remaining = self._idle_since + self.timeout_keep_alive - self.loop.time()
        if remaining > 0:  # a request came and went meanwhile
            self._keep_alive_timer = self.loop.call_later(remaining, self._idle_timed_out)
        else:
            self.transport.close()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False  # a pipelined request's head is late: close once the response under way ends
            return
        message = f"The request's headers did not arrive within {self._head_timeout_s:g} s."
        self._refuse_and_close(b"408 Request Timeout", message, "request_timeout")

    def _head_too_large(self) -> None:
        self._stop_head_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request's head, behind a response under way: read no more, close once that response ends.
            self.cycle.keep_alive = False
            self.pause_reading()
            return
        message = (
            f"The request's headers are larger than {MAX_HEAD_BYTES // 1024} KiB (request line and header fields "
            "together). Send shorter header fields."
        )
        self._refuse_and_close(b"431 Request Header Fields Too Large", message, "request_header_fields_too_large")

    def _refuse_and_close(self, status: bytes, message: str, code: str) -> None:
        """Answer outside any request cycle (no ASGI app saw the request) in OpenAI's error shape, then close."""
        body = error_body(message, "invalid_request_error", code=code)
        self.transport.write(
            b"HTTP/1.1 %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
            % (status, len(body), body)
        )
        if not self._close_in_stages():  # the rest of what the client sends may still be on its way
            self.transport.close()

    def _lingers(self) -> bool:
        """At a close: with part of the request's body still to come, shut the write side only, drop the rest as it
        arrives, and close for good after LINGER_S (or at the client's own close). True if it did so."""
        cycle = self.cycle
        if self._linger_timer is not None or cycle is None or not cycle.more_body or cycle.disconnected:
            return False
        return self._close_in_stages()

    def _close_in_stages(self) -> bool:
        """Shut the write side, drop whatever arrives, close after LINGER_S. False where it cannot (closing, TLS)."""
        transport = self.transport
        if transport.is_closing() or not transport.can_write_eof():  # TLS: no half-close, a plain close
            return False
        transport.write_eof()
        # No head is read any more: a refused head's deadline and byte count would take the dropped bytes for it.
        self._in_head = False
        self._stop_head_timer()
        self.parser = _Discard()
        self.resume_reading()
        self._linger_timer = self.loop.call_later(LINGER_S, self._linger_over)
        return True

    def _linger_over(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()


class Cycle:
    """One request and its response: the ASGI `receive` and `send` of the request's task."""

    __slots__ = (
        "_app_running",
        "_protocol",
        "_ready",
        "_waiters",
        "body",
        "chunked_encoding",
        "disconnected",
        "expected_content_length",
        "flow",
        "keep_alive",
        "more_body",
        "on_lost",
        "response_complete",
        "response_started",
        "scope",
        "transport",
        "waiting_for_100_continue",
    )

    def __init__(
        self, protocol: GatewayHttpProtocol, scope: dict[str, Any], keep_alive: bool, expect_100: bool
    ) -> None:
        self._protocol = protocol
        self.flow = protocol
        """What ChunkWriter reads the client's write flow control from (`write_paused`, `drain`)."""
        self.transport = protocol.transport
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100
        self.disconnected = False
        self.body = b""
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0
        self._ready = False
        """Something for `receive` (body bytes, the body's end, a disconnect) since it last returned."""
        self._waiters: list[asyncio.Future[None]] | None = None
        self.on_lost: Callable[[], None] | None = None
        """Called once if the connection is lost before the response is complete (`on_lost`)."""
        self._app_running = True
        """Until the app's call returns: a response completed after it (by a task of the app's) starts no next one."""

    def wake(self) -> None:
        self._ready = True
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def run_asgi(self, app: Any) -> None:
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException:
            logger.exception("the ASGI application raised", extra={"path": self.scope["path"]})
            if not self.response_started:
                await self._send_500()
            else:
                self.transport.close()
        else:
            if result is not None:
                logger.error("the ASGI application returned a value, not None")
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                logger.error("the ASGI application returned without starting a response")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                logger.error("the ASGI application returned without completing its response")
                self.transport.close()
        finally:
            self._app_running = False

    async def _send_500(self) -> None:
        await _send_error_and_close(
            self.send, 500, error_body("The gateway failed to handle the request.", "server_error")
        )

    async def receive(self) -> dict[str, Any]:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self._protocol.resume_reading()
            if not self._ready:
                waiter = self._protocol.loop.create_future()
                if self._waiters is None:
                    self._waiters = [waiter]
                else:
                    self._waiters.append(waiter)
                await waiter
            self._ready = False
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body, self.body = self.body, b""
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: dict[str, Any]) -> None:
        protocol = self._protocol
        if protocol.write_paused and not self.disconnected:
            await protocol.drain()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', got {message['type']!r}.")
            self.transport.write(self._head(message["status"], message.get("headers", ())))
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', got {message['type']!r}.")
            self._write_body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"Unexpected ASGI message {message['type']!r} after the response was complete.")

    def start_stream(self, headers: Any, first: bytes) -> bool:
        """Start a chunked 200 with `first` as its first chunk, head and chunk in one write, synchronously (from a
        protocol callback, without a step of the request's task). False, and nothing done, where `send` would not
        write at once: a response already started, a client gone or with a full buffer, a HEAD request."""
        if not first or not self._writes_now():
            return False
        self.transport.writelines((self._stream_head(headers), b"%x\r\n%b\r\n" % (len(first), first)))
        return True

    def open_stream(self, headers: Any) -> bool:
        """Start a chunked 200 now, its head alone, synchronously; the chunks follow through `send` or a ChunkWriter.
        False, and nothing done, where `start_stream` would refuse."""
        if not self._writes_now():
            return False
        self.transport.writelines((self._stream_head(headers),))  # not held for a first chunk: that is the point
        return True

    def _writes_now(self) -> bool:
        return not (
            self.response_started
            or self.disconnected
            or self._protocol.write_paused
            or self.transport.is_closing()
            or self.scope["method"] == "HEAD"
        )

    def _stream_head(self, headers: Any) -> bytes:
        head = self._head(200, headers)
        if not self.chunked_encoding:
            raise RuntimeError("a stream is chunked: its headers must not give the body a length")
        return head

    def _head(self, status: int, headers: Any) -> bytes:
        """The response's head, and the response's state from its headers (framing, keep-alive)."""
        self.response_started = True
        self.waiting_for_100_continue = False
        head = [STATUS_LINES[status]]
        names: list[bytes] = []
        values: list[bytes] = []
        closes = False
        for name, value in (*self._protocol.server_state.default_headers, *headers):
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value)
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [token.strip() for token in value.lower().split(b",")]:
                self.keep_alive = False
                closes = True
            names.append(name)
            values.append(value)
            head += name, b": ", value, b"\r\n"
        # One search over all names and one over all values (joined by a tab, which a value may hold).
        if not all(names) or _BAD_NAMES.search(b"".join(names)):
            raise RuntimeError("Invalid HTTP header name.")
        if _BAD_VALUE.search(b"\t".join(values)):
            raise RuntimeError("Invalid HTTP header value.")
        if not self.keep_alive and not closes:
            head.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked_encoding = True
            head.append(b"transfer-encoding: chunked\r\n")
        head.append(b"\r\n")
        return b"".join(head)

    def _write_body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            if body:
                self.transport.write(
                    b"%x\r\n%b\r\n" % (len(body), body) if more_body else b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
                )
            elif not more_body:
                self.transport.write(b"0\r\n\r\n")
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            if body:
                self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.wake()
            if not self.keep_alive:
                self.transport.close()
            if self._app_running:
                self._protocol.on_response_complete()


def _address(transport: asyncio.BaseTransport, which: str) -> tuple[str, int] | None:
    info = transport.get_extra_info(which)
    if isinstance(info, tuple | list) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    return None


async def _send_error_and_close(send: Any, status: int, body: bytes, *extra: tuple[bytes, bytes]) -> None:
    """An OpenAI-shaped error the protocol answers itself (no app answered), with `connection: close`."""
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)), *extra, CLOSE]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _service_unavailable(scope: dict[str, Any], receive: Any, send: Any) -> None:
    message = "The gateway is at its connection or request limit (limit_concurrency). Retry shortly."
    body = error_body(message, "service_unavailable", code="over_capacity")
    await _send_error_and_close(send, 503, body, (b"retry-after", b"1"))


def http_protocol(server: ServerConfig) -> Callable[..., GatewayHttpProtocol]:
    """The gateway's protocol with the config's deadline for a request's head: uvicorn's `http`."""
    return functools.partial(GatewayHttpProtocol, head_timeout_s=server.request_read_timeout_s)


class ChunkWriter:
    """Writes body bytes of a started chunked response straight to the client's connection, from a protocol callback.

    A relayed stream otherwise costs, per upstream read, a future woken, a task step, and an ASGI message through
    `send`; with this the upstream connection's `data_received` writes the chunk frame itself (see `Response.pipe`).
    `send` still starts the response (its head, with the first chunk) and ends it (the last chunk and the terminating
    frame)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: Cycle) -> None:
        self._cycle = cycle

    def write(self, data: bytes) -> bool:
        """Send `data` as one chunk. False when the client's socket buffer is over its high-water mark."""
        cycle = self._cycle
        # A client gone, or a connection closing: nothing to write to (the disconnect, `on_lost` or the watcher, or the
        # upstream's end finishes the request). An empty chunk frame would end the body.
        if cycle.disconnected or cycle.transport.is_closing() or not data:
            return True
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return not cycle.flow.write_paused

    async def drain(self) -> None:
        """Wait until the client's socket buffer is below its low-water mark (or the client has gone)."""
        cycle = self._cycle
        if cycle.flow.write_paused and not cycle.disconnected and not cycle.transport.is_closing():
            await cycle.flow.drain()


def _cycle_of(send: Any) -> Cycle | None:
    """The request cycle that `send` (an ASGI send callable) is the bound `send` of, if it is this protocol's."""
    cycle = getattr(send, "__self__", None)
    return cycle if type(cycle) is Cycle else None


def on_lost(send: Any, callback: Callable[[], None] | None) -> bool:
    """Have the protocol call `callback` if the client's connection is lost before the response that `send` (an ASGI
    send callable) belongs to is complete; None takes it back. False where `send` is not this protocol's: the caller
    then learns of a disconnect from `receive` (an `http.disconnect` message), as under any ASGI server."""
    cycle = _cycle_of(send)
    if cycle is None:
        return False
    if callback is not None and cycle.disconnected and not cycle.response_complete:
        callback()  # already gone
        return True
    cycle.on_lost = callback
    return True


def start_stream(send: Any, headers: Any, first: bytes) -> bool:
    """Start the response that `send` (an ASGI send callable) belongs to as a chunked 200 with `first` as its first
    chunk, now (`Cycle.start_stream`). False where it cannot, or where `send` is not this protocol's: the caller then
    sends `http.response.start` and the first body itself."""
    cycle = _cycle_of(send)
    return cycle is not None and cycle.start_stream(headers, first)


def open_stream(send: Any, headers: Any) -> bool:
    """Start the response that `send` (an ASGI send callable) belongs to as a chunked 200 now, with its head alone
    (`Cycle.open_stream`). False where it cannot, or where `send` is not this protocol's."""
    cycle = _cycle_of(send)
    return cycle is not None and cycle.open_stream(headers)


def chunk_writer(send: Any) -> ChunkWriter | None:
    """A ChunkWriter for the response that `send` (an ASGI send callable) has started, if it is this protocol's cycle
    with a chunked body under way; None otherwise (another server: the caller sends ASGI messages instead)."""
    cycle = _cycle_of(send)
    if (
        cycle is not None
        and cycle.response_started
        and cycle.chunked_encoding
        and not cycle.response_complete
        and cycle.scope["method"] != "HEAD"
    ):
        return ChunkWriter(cycle)
    return None
