"""The gateway's HTTP/1.1 client: keep-alive connection pools over asyncio protocols, parsed by httptools.

This is the relay path's client, to the upstreams and the embeddings service. It replaced aiohttp's client, which
cost about 0.5 ms of added time to first token per request on a 2-core machine (`benchmarks/README.md`, "Where the
time went"): a request body written from a task of its own one loop turn after the headers, a response object with
cookie, charset and multidict handling, and a stream reader woken per chunk. Here a request leaves in one write, a
response is one small object, and each chunk is handed over as it is parsed (or, piped, handed to
a callback from the read itself, with no task woken per chunk). HTTP parsing is httptools' (llhttp),
TLS is asyncio's; what this module adds is only the pool and the bookkeeping of one request per connection.

What it does not do, because no upstream needs it: redirects, cookies, compression, proxies, HTTP/2, request
pipelining. Each connection carries one request at a time and returns to its pool only after a complete response
that allows keep-alive.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

import httptools

from inferstack_gateway.logs import logger

PAUSE_BYTES = 1 << 20
"""An unread response body beyond this pauses reading from the socket (TCP back-pressure to the upstream)."""


class HttpClientError(ConnectionError):
    """The exchange failed below HTTP: no connection, a reset, or a response that ended early or did not parse."""


class ConnectFailed(HttpClientError):
    """No connection could be opened (refused, unreachable, or the connect timeout ran out)."""


class StreamBroken(HttpClientError):
    """The connection closed, or the response stopped parsing, before the response was complete."""


@dataclass(frozen=True, slots=True)
class Target:
    """A URL parsed once: where to connect and what to put on the request line."""

    scheme: str
    host: str
    port: int
    path: bytes
    host_header: bytes
    tls: ssl.SSLContext | None = None
    """https only: the context the server's certificate is verified with; None: the client's (the system's trust
    store). A private CA's upstream gets its own (`upstreams.<name>.ca_file`)."""

    @classmethod
    def parse(cls, url: str, tls: ssl.SSLContext | None = None) -> Target:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL with a host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        default = (parts.scheme == "https" and port == 443) or (parts.scheme == "http" and port == 80)
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        host_header = (host if default else f"{host}:{port}").encode()
        return cls(
            parts.scheme, parts.hostname, port, path.encode(), host_header, tls if parts.scheme == "https" else None
        )

    @property
    def origin(self) -> tuple[str, str, int, ssl.SSLContext | None]:
        """The pool's key: one server, reached with one trust setting."""
        return self.scheme, self.host, self.port, self.tls


class Response:
    """One response: status and headers on arrival, then the body as it is parsed. `close()` exactly once after use."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_complete",
        "_connection",
        "_error",
        "_expiry",
        "_framed",
        "_keep_alive",
        "_on_first",
        "_on_head",
        "_sink",
        "_waiter",
        "headers",
        "sent_early",
        "status",
    )

    def __init__(self, connection: _Connection) -> None:
        self._connection: _Connection | None = connection
        self.status = 0
        self.headers: dict[bytes, bytes] = {}
        """Lower-cased names; a repeated header keeps its last value."""
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._complete = False
        self._keep_alive = False
        self._framed = False  # a content-length or chunked body: its end is known without the connection closing
        self._error: Exception | None = None
        """HttpClientError, or the builtin TimeoutError once the request's deadline passed (see `disarm`)."""
        self._waiter: asyncio.Future[None] | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._sink: Callable[[bytes], bool] | None = None
        self._on_first: Callable[[bytes], bool] | None = None
        self._on_head: Callable[[Response], None] | None = None
        self.sent_early = 0
        """How many of the body's first bytes `on_first` (see `HttpClient.request`) has taken and sent on already; they
        are still returned by `readany`."""

    # -- the reading side --------------------------------------------------------------------------------------------

    def at_eof(self) -> bool:
        """The whole body has arrived and been read."""
        return self._complete and not self._chunks

    async def readany(self) -> bytes:
        """Every body byte that has arrived and not been read yet, waiting for some; b"" at the end of the body.

        Raises StreamBroken if the response cannot be completed."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self._complete:
                return b""
            await self._wait()
        data = self._take()
        connection = self._connection
        if connection is not None and connection.paused:
            connection.resume()
        return data

    def pipe(self, sink: Callable[[bytes], bool]) -> None:
        """Hand the body to `sink` from now on, as each read from the socket is parsed, instead of keeping it for
        `readany`: no task wakes per chunk. `sink` returns False when its receiver cannot take more for now, which
        pauses reading from the upstream until `piped()` returns "paused" and the caller calls `resume()`.

        The bytes of the read that completes the body are kept for `readany`, so that the caller can send them with
        the end of its own response; call `readany` only once `piped()` has returned "end". Bytes that arrived before
        this call are handed over at once. An exception raised by `sink` is raised by `piped()` (it never escapes
        the connection's callback)."""
        self._sink = sink
        if self._chunks and not self._complete:
            self._deliver()

    async def piped(self) -> str:
        """Wait, while piping, until the body is complete ("end": read the rest with `readany`) or the sink has asked
        for a pause ("paused"). Raises StreamBroken (or TimeoutError, see `disarm`) if the body cannot complete."""
        while True:
            if self._error is not None:
                raise self._error
            if self._complete:
                return "end"
            connection = self._connection
            if connection is not None and connection.paused:
                return "paused"
            await self._wait()

    def resume(self) -> None:
        """Read from the upstream again after a pause."""
        connection = self._connection
        if connection is not None:
            connection.resume()

    async def read(self) -> bytes:
        """The whole body."""
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    def disarm(self) -> None:
        """Lift the deadline given to `HttpClient.request`: the caller times the rest itself, if at all. (And the
        `on_head` and `on_first` callbacks, if they have not been called.)"""
        self._on_first = None
        self._on_head = None
        expiry = self._expiry
        if expiry is not None:
            self._expiry = None
            expiry.cancel()

    def close(self) -> None:
        """Give the connection back to its pool after a complete response, or close it (which aborts the request)."""
        self.disarm()
        connection = self._connection
        if connection is None:
            return
        self._connection = None
        connection.finished(reusable=self._complete and self._keep_alive and self._error is None)

    async def _wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the parsing side (called by the connection) -----------------------------------------------------------------

    def _body(self, data: bytes) -> None:
        self._chunks.append(data)
        if self._sink is not None:
            return  # handed over once the whole read is parsed (`_deliver`)
        self._buffered += len(data)
        if self._buffered > PAUSE_BYTES and self._connection is not None:
            self._connection.pause()
        self._wake()

    def _take(self) -> bytes:
        """Every buffered body byte, in one piece; the buffer is left empty."""
        data = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered = 0
        return data

    def _head_out(self) -> None:
        """Offer a 200's head to `on_head`, once, from the read that parsed it."""
        on_head, self._on_head = self._on_head, None
        assert on_head is not None
        try:
            on_head(self)
        except Exception:  # the caller's own path still has the response
            logger.exception("on_head failed")

    def _first_out(self) -> None:
        """Offer a 200's first body bytes, parsed from one read, to `on_first`; they stay buffered for `readany`."""
        on_first, self._on_first = self._on_first, None
        assert on_first is not None
        data = self._take()
        self._chunks.append(data)  # back in the buffer, in one piece
        self._buffered = len(data)
        try:
            if on_first(data):
                self.sent_early = len(data)
        except Exception:  # the caller's own path (readany) still has the bytes
            logger.exception("on_first failed")

    def _deliver(self) -> None:
        assert self._sink is not None
        data = self._take()
        try:
            more = self._sink(data)
        except Exception as exc:
            self._error = exc
            more = False
        if not more and self._connection is not None:
            self._connection.pause()
            self._wake()

    def _end(self, keep_alive: bool) -> None:
        self._complete = True
        self._keep_alive = keep_alive
        self._wake()

    def _expire(self) -> None:
        self._expiry = None
        connection = self._connection
        if connection is not None and not self._complete:
            connection._fail(TimeoutError("the request's deadline passed"))

    def _broken(self, error: Exception) -> None:
        if not self._complete:
            self._error = error
        self._wake()


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection, one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: Response | None = None
        self.headers_arrived: asyncio.Future[None] | None = None
        self.received = False  # any byte of the current response
        self.lost = False
        self.paused = False
        self.idle_since = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's subclasses

    def data_received(self, data: bytes) -> None:
        if self.response is None or self.response._complete:
            self.close()  # bytes nobody asked for: the connection cannot be trusted with the next request
            return
        self.received = True
        error = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            error = exc
        # Piping: what this read parsed goes to the sink (before an error too, as `readany` would have returned it),
        # except the read that completes the body, which stays for `readany`.
        response = self.response
        if response is not None:
            body_goes_on = bool(response._chunks) and not response._complete
            if response._on_head is not None and response.status == 200:
                if body_goes_on and response._on_first is not None:
                    response._on_head = None  # the first event came with the head: `on_first` sends both, in one write
                else:
                    response._head_out()
            if body_goes_on:
                if response._sink is not None:
                    response._deliver()
                elif response._on_first is not None and response.status == 200:
                    response._first_out()
        if error is not None:
            self._fail(StreamBroken(f"unparseable response: {error}"))
            self.close()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.pool.forget(self)
        response = self.response
        if response is None:
            return
        if response.status and not response._framed and not response._complete:
            response._end(keep_alive=False)  # a body delimited by the end of the connection (no length, not chunked)
        self._fail(StreamBroken("the upstream closed the connection" + (f": {exc}" if exc else "")))

    # -- httptools callbacks ------------------------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        self.response.headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        response = self.response
        assert response is not None
        status = self.parser.get_status_code()
        if status < 200:  # 1xx: an interim answer; the real head follows
            response.headers.clear()
            return
        response.status = status
        headers = response.headers
        response._framed = b"content-length" in headers or b"chunked" in headers.get(b"transfer-encoding", b"")
        waiter = self.headers_arrived
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        assert self.response is not None
        self.response._body(body)

    def on_message_complete(self) -> None:
        response = self.response
        assert response is not None
        if response.status:
            response._end(self.parser.should_keep_alive())

    # -- used by the pool and the response ----------------------------------------------------------------------------

    def send(self, data: bytes) -> Response:
        assert self.transport is not None
        self.response = Response(self)
        self.received = False
        self.headers_arrived = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.response

    def _fail(self, error: Exception) -> None:
        if self.response is not None:
            self.response._broken(error)
        waiter = self.headers_arrived
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
            waiter.exception()  # retrieved: a caller that already left must not log "never retrieved"

    def pause(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def finished(self, reusable: bool) -> None:
        self.response = None
        self.headers_arrived = None
        if reusable and not self.lost:
            self.resume()
            self.pool.put(self)
        else:
            self.close()
            self.pool.forget(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """The connections to one origin: idle ones last-in first-out (the warmest first), at most `limit` in all."""

    def __init__(self, target: Target, limit: int, keepalive_s: float, tls: ssl.SSLContext | None) -> None:
        self.target = target
        self.keepalive_s = keepalive_s
        self.idle: list[_Connection] = []
        self.busy: set[_Connection] = set()
        self.slots = asyncio.Semaphore(limit)
        self.ssl = tls

    async def acquire(self, connect_timeout_s: float, deadline: float | None = None) -> tuple[_Connection, bool]:
        """A connection for one request, and whether it was reused (it may have been closed by the server since).

        With a `deadline` (event-loop time), waiting for a free slot or a new connection past it raises TimeoutError;
        taking an idle connection does not wait, and arms no timer."""
        if self.slots.locked():
            async with asyncio.timeout_at(deadline):  # None: no deadline
                await self.slots.acquire()
        else:
            await self.slots.acquire()
        now = time.monotonic()
        while self.idle:
            connection = self.idle.pop()
            if connection.lost or now - connection.idle_since > self.keepalive_s:
                connection.close()
                continue
            self.busy.add(connection)
            return connection, True
        try:
            async with asyncio.timeout_at(deadline):
                connection = await self.connect(connect_timeout_s)
        except BaseException:
            self.slots.release()
            raise
        self.busy.add(connection)
        return connection, False

    async def connect(self, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        target = self.target
        try:
            async with asyncio.timeout(timeout_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(self),
                    target.host,
                    target.port,
                    ssl=self.ssl,
                    server_hostname=target.host if self.ssl else None,
                )
        except TimeoutError:
            where = f"{target.host}:{target.port}"
            raise ConnectFailed(f"connect to {where} timed out ({timeout_s * 1000:.0f} ms)") from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {target.host}:{target.port}: {exc.strerror or exc}") from None
        return connection

    def put(self, connection: _Connection) -> None:
        self._release(connection)
        connection.idle_since = time.monotonic()
        self.idle.append(connection)

    def forget(self, connection: _Connection) -> None:
        if not self._release(connection) and connection in self.idle:
            self.idle.remove(connection)

    def _release(self, connection: _Connection) -> bool:
        """Free a busy connection's slot (once). False if it was not busy."""
        if connection not in self.busy:
            return False
        self.busy.discard(connection)
        self.slots.release()
        return True

    def close(self) -> None:
        for connection in [*self.idle, *self.busy]:
            connection.close()
        self.idle.clear()


class HttpClient:
    """Keep-alive pools, one per origin (scheme, host, port, and the target's TLS context).

    https origins verify the server's certificate and host name against the target's own context (a private CA's) or
    else `tls`, by default the system's trust store (`ssl.create_default_context()`, which also reads
    `SSL_CERT_FILE`)."""

    def __init__(
        self,
        *,
        limit_per_origin: int,
        keepalive_s: float,
        connect_timeout_s: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._tls = tls
        self._limit = limit_per_origin
        self._keepalive_s = keepalive_s
        self._connect_timeout_s = connect_timeout_s
        self._pools: dict[tuple[str, str, int, ssl.SSLContext | None], _Pool] = {}

    async def request(
        self,
        method: bytes,
        target: Target,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        deadline: float | None = None,
        on_head: Callable[[Response], None] | None = None,
        on_first: Callable[[bytes], bool] | None = None,
    ) -> Response:
        """Send one request and return once the response's status and headers have arrived.

        `deadline` (event-loop time) bounds the wait for a connection, for the headers and for every read of the
        body until the caller lifts it with `Response.disarm()` (or closes the response): past it they raise the
        builtin TimeoutError. One timer handle does it, where `asyncio.timeout()` around the calls would cost three
        times as much on a cold path (`benchmarks/cold_calls.py`): this is on the way to every first token.

        A pooled connection that turns out to have been closed by the server while it sat idle (no byte of an answer
        came back) is replaced once by a new connection. Cancelling the call closes the connection, which is how an
        upstream learns that the request was abandoned. Raises ConnectFailed or StreamBroken.

        `on_first`, for a 200 whose body does not end in the read that brings its first bytes, is called with those
        bytes from that read (the connection's callback, before any task wakes) and returns whether it sent them on:
        a stream's first event can reach the client without waiting for the request's task. `Response.sent_early`
        then counts them; `readany` still returns them. `on_head`, for a 200, is called with the response from the read
        that parsed its head, before `on_first` and before this returns: a stream's head can go on to the client while
        the upstream computes its first event. `disarm()` drops both."""
        pool = self._pools.get(target.origin)
        if pool is None:
            tls = None
            if target.scheme == "https":
                if target.tls is None and self._tls is None:
                    self._tls = ssl.create_default_context()
                tls = target.tls or self._tls
            pool = self._pools[target.origin] = _Pool(target, self._limit, self._keepalive_s, tls)
        data = _encode(method, target, headers, body)
        for attempt in (1, 2):
            connection, reused = await pool.acquire(self._connect_timeout_s, deadline)
            response = connection.send(data)
            response._on_first = on_first
            response._on_head = on_head
            if deadline is not None:
                response._expiry = asyncio.get_running_loop().call_at(deadline, response._expire)
            waiter = connection.headers_arrived
            assert waiter is not None
            try:
                await waiter
            except StreamBroken:
                response.close()
                if reused and not connection.received and attempt == 1:
                    continue
                raise
            except BaseException:
                response.close()
                raise
            return response
        raise AssertionError("unreachable")

    def idle_connections(self) -> int:
        return sum(len(pool.idle) for pool in self._pools.values())

    def busy_connections(self) -> int:
        return sum(len(pool.busy) for pool in self._pools.values())

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def _encode(method: bytes, target: Target, headers: Mapping[str, str], body: bytes) -> bytes:
    lines = [method, b" ", target.path, b" HTTP/1.1\r\nhost: ", target.host_header, b"\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
    lines += (b"content-length: %d\r\n\r\n" % len(body), body)
    return b"".join(lines)
