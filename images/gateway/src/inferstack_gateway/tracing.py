"""Optional OTLP tracing: one SERVER span per request, joined to the caller's W3C trace context.

The span starts when the request arrives, takes the client's `traceparent` as its parent, and is handed on to the
upstream as a new `traceparent`, so that a vLLM or Triton server exporting its own traces (vLLM's
--otlp-traces-endpoint) shows up under the gateway's span. OpenTelemetry is imported only when
tracing.otlp_endpoint is set, so the default path pays nothing for it.
"""

from __future__ import annotations

from typing import Any

from inferstack_gateway.config import TracingConfig
from inferstack_gateway.exchange import Exchange


class Tracer:
    def __init__(self, tracer: Any, provider: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._tracer = tracer
        self._provider = provider
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()

    def start(self, method: str, route: str, headers: dict[bytes, bytes]) -> Any:
        """A span for a request that has just arrived, the child of its `traceparent` header if it has one."""
        carrier = {}
        for name in (b"traceparent", b"tracestate"):
            value = headers.get(name)
            if value is not None:
                carrier[name.decode()] = value.decode("latin-1")
        parent = self._propagator.extract(carrier) if carrier else None
        return self._tracer.start_span(
            f"{method} {route}",
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route},
        )

    def upstream_headers(self, span: Any) -> dict[str, str]:
        """`traceparent` (and `tracestate`) naming `span` as the parent of the upstream's own spans."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        return carrier

    def finish(self, span: Any, exchange: Exchange) -> None:
        span.set_attribute("http.response.status_code", exchange.status)
        span.set_attribute("inferstack.request_id", exchange.request_id)
        span.set_attribute("inferstack.cache", exchange.cache)
        for key in ("model", "tier", "upstream", "tenant"):
            value = getattr(exchange, key)
            if value is not None:
                span.set_attribute(f"inferstack.{key}", value)
        span.set_attribute("inferstack.upstream_kind", exchange.upstream_kind)
        if exchange.upstream is not None:
            span.set_attribute("inferstack.spilled", exchange.spilled)
        if exchange.status >= 500:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"HTTP {exchange.status}"))
        span.end()

    def shutdown(self) -> None:
        """Export what is still buffered, then stop."""
        self._provider.shutdown()


def setup_tracing(config: TracingConfig) -> Tracer | None:
    """A Tracer exporting OTLP/gRPC to config.otlp_endpoint in batches, or None when tracing is off."""
    if config.otlp_endpoint is None:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "tracing.otlp_endpoint is set but OpenTelemetry is not installed. "
            "Fix: pip install 'inferstack-gateway[tracing]', or remove tracing.otlp_endpoint"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint)))
    return Tracer(provider.get_tracer("inferstack_gateway"), provider)
