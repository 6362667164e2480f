"""uvicorn's httptools protocol, with a response's head sent in the same packet as its first body bytes.

(And malformed HTTP answered in OpenAI's error shape: `GatewayHttpProtocol.send_400_response`.)

uvicorn writes the status line and headers to the socket as soon as the app sends `http.response.start`, and each
body message in a write of its own. uvloop sends every write at once, so a streamed answer reaches the client as two
packets, two wake-ups of the client, before it can read its first token: on loopback each send costs tens of
microseconds of kernel time, a sizeable part of the gateway's whole added TTFT. Here the head is held until the next
write on the connection (the first body message, sent in the same event-loop iteration) or, at the latest, until the
end of that iteration, and both leave in one `writev`. Everything else about the protocol is uvicorn's own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from inferstack_gateway.config import ServerConfig
from inferstack_gateway.errors import error_body

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

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        if self._lingers is not None and self._lingers():
            return
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a HeadCoalescingTransport. Pass as uvicorn's `http`, or
    `functools.partial(GatewayHttpProtocol, head_timeout_s=...)`.

    A request that does not parse as HTTP is answered in OpenAI's error shape, like every other refusal of the
    gateway (uvicorn's own answer is plain text). uvicorn bounds only the idle time after a response: here a new
    connection that sends nothing is closed after the same keep-alive timeout, and a request's head must be complete
    within `head_timeout_s` of its first byte (408 otherwise), so that clients trickling bytes cannot hold connections
    for good. The body's own deadline is the app's (`server.request_read_timeout_s`). A head over MAX_HEAD_BYTES gets
    431.

    A response that closes the connection before its request's body has all arrived (the app's early errors: 401,
    413, 408 ...) shuts the write side first and drops what still comes in for at most LINGER_S, then closes."""

    def __init__(self, *args: Any, head_timeout_s: float = 20.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timeout_s = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn
        wrapped = HeadCoalescingTransport(transport, self.loop, self._lingers)
        super().connection_made(wrapped)  # type: ignore[arg-type]
        # Cancelled by uvicorn at the first byte (data_received), as after a response.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None:  # a head still incomplete after this read: httptools holds all of it
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._head_too_large()

    def _head_too_large(self) -> None:
        self._stop_head_timer()
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request's head, behind a response under way: read no more, close once that response ends.
            self.cycle.keep_alive = False
            self.flow.pause_reading()
            return
        message = (
            f"The request's headers are larger than {MAX_HEAD_BYTES // 1024} KiB (request line and header fields "
            "together). Send shorter header fields."
        )
        self._refuse_and_close(b"431 Request Header Fields Too Large", message, "request_header_fields_too_large")

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
        self._stop_head_timer()
        self.parser = _Discard()  # type: ignore[assignment]
        self.flow.resume_reading()
        self._linger_timer = self.loop.call_later(LINGER_S, self._linger_over)
        return True

    def _linger_over(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._stop_head_timer()
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        super().on_headers_complete()

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

    def send_400_response(self, msg: str) -> None:
        message = (
            f"{msg} The request is not valid HTTP/1.1 (for example both Content-Length and Transfer-Encoding, or a "
            "malformed request line or header)."
        )
        self._refuse_and_close(b"400 Bad Request", message, "invalid_http_request")

    def _refuse_and_close(self, status: bytes, message: str, code: str) -> None:
        """Answer outside any request cycle (no ASGI app saw the request) in OpenAI's error shape, then close."""
        body = error_body(message, "invalid_request_error", code=code)
        self.transport.write(
            b"HTTP/1.1 %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
            % (status, len(body), body)
        )
        if not self._close_in_stages():  # the rest of what the client sends may still be on its way
            self.transport.close()


def http_protocol(server: ServerConfig) -> Callable[..., GatewayHttpProtocol]:
    """The gateway's protocol with the config's deadline for a request's head: uvicorn's `http`."""
    return functools.partial(GatewayHttpProtocol, head_timeout_s=server.request_read_timeout_s)


class ChunkWriter:
    """Writes body bytes of a started chunked response straight to the client's connection, from a protocol callback.

    A relayed stream otherwise costs, per upstream read, a future woken, a task step, and an ASGI message through
    uvicorn's `send`; with this the upstream connection's `data_received` writes the chunk frame itself (see
    `Response.pipe`). Only for uvicorn's httptools cycle, whose framing this repeats; `send` still starts the response
    (its head, with the first chunk) and ends it (the last chunk and the terminating frame)."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    def write(self, data: bytes) -> bool:
        """Send `data` as one chunk. False when the client's socket buffer is over its high-water mark."""
        cycle = self._cycle
        # A client gone, or a connection closing whose loss uvicorn has reported to a later, pipelined request's cycle:
        # nothing to write to (the disconnect watcher or the upstream's end finishes the request). An empty chunk
        # frame would end the body.
        if cycle.disconnected or cycle.transport.is_closing() or not data:
            return True
        cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return not cycle.flow.write_paused

    async def drain(self) -> None:
        """Wait until the client's socket buffer is below its low-water mark (or the client has gone)."""
        cycle = self._cycle
        if cycle.flow.write_paused and not cycle.disconnected and not cycle.transport.is_closing():
            await cycle.flow.drain()


def chunk_writer(send: Any) -> ChunkWriter | None:
    """A ChunkWriter for the response that `send` (an ASGI send callable) has started, if it is uvicorn's httptools
    cycle with a chunked body under way; None otherwise (another server: the caller sends ASGI messages instead)."""
    cycle = getattr(send, "__self__", None)
    if (
        type(cycle) is RequestResponseCycle
        and cycle.response_started
        and cycle.chunked_encoding
        and not cycle.response_complete
        and cycle.scope["method"] != "HEAD"
    ):
        return ChunkWriter(cycle)
    return None
