"""uvicorn's httptools protocol, with a response's head sent in the same packet as its first body bytes.

uvicorn writes the status line and headers to the socket as soon as the app sends `http.response.start`, and each
body message in a write of its own. uvloop sends every write at once, so a streamed answer reaches the client as two
packets, two wake-ups of the client, before it can read its first token: on loopback each send costs tens of
microseconds of kernel time, a sizeable part of the gateway's whole added TTFT. Here the head is held until the next
write on the connection (the first body message, sent in the same event-loop iteration) or, at the latest, until the
end of that iteration, and both leave in one `writev`. Everything else about the protocol is uvicorn's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

STATUS_LINE_PREFIX = b"HTTP/1.1 "


class HeadCoalescingTransport:
    """A transport that holds a response head (a write starting with the status line) for the next write."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

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

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a HeadCoalescingTransport. Pass as uvicorn's `http`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # as uvicorn
        super().connection_made(HeadCoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
