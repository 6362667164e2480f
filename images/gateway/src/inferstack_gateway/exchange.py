"""What one request did: the record the app fills in and the access log, metrics and tracing read.

It sits below both app.py and tracing.py, so that tracing depends on nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Exchange:
    """What one request did, for the response headers, metrics, the access log and the trace."""

    request_id: str
    route: str
    started: float
    headers: dict[bytes, bytes]
    status: int = 500
    cache: str = "bypass"
    response_started: bool = False
    finished: bool = False
    body_read: bool = False
    """The request's whole body has been read (a response sent before that closes the connection: `_unread_body`)."""
    arriving: bool = False
    """Between arrival and the upstream call (or a cached answer): the gateway defers its background work meanwhile."""
    model: str | None = None
    tier: str | None = None
    upstream: str | None = None
    tenant: str | None = None
    upstream_kind: str = "none"
    """local, remote (burst to the hub), or none (no upstream answered)."""
    spilled: bool = False
    """The tier was spilling to its remote upstreams when this request was routed."""
    span: Any = None
    """The request's OpenTelemetry span, when tracing is on."""
    detail: dict[str, Any] = field(default_factory=dict)
    observations: list[tuple[Callable[[float], None], float]] | None = None
    """(a histogram child's observe or a counter child's inc, value) pairs measured before the answer went out and
    recorded after it (`observe_later`, `count_later`)."""

    def observe_later(self, histogram: Any, value: float) -> None:
        """Record a measurement now and put it in `histogram` once the response has been sent.

        A Prometheus observation takes a lock and walks the buckets: under a microsecond in a hot loop, 9 to 14 µs on
        a cold path such as one request every few tens of milliseconds (benchmarks/cold_calls.py), and none of it
        need be spent before the client has its answer."""
        if self.observations is None:
            self.observations = [(histogram.observe, value)]
        else:
            self.observations.append((histogram.observe, value))

    def count_later(self, counter: Any) -> None:
        """Add one to `counter` (a counter child) once the response has been sent, as `observe_later` does."""
        if self.observations is None:
            self.observations = [(counter.inc, 1)]
        else:
            self.observations.append((counter.inc, 1))
