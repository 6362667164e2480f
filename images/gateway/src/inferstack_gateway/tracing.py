"""Optional OTLP tracing: one span per request, created after the fact from what the request did.

OpenTelemetry is imported only when tracing.otlp_endpoint is set, so the default path pays nothing for it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from inferstack_gateway.config import TracingConfig

if TYPE_CHECKING:
    from inferstack_gateway.app import Exchange


class Tracer:
    def __init__(self, tracer: Any, provider: Any) -> None:
        self._tracer = tracer
        self._provider = provider

    def record(self, exchange: Exchange, elapsed_s: float) -> None:
        end = time.time_ns()
        attributes = {
            "http.route": exchange.route,
            "http.response.status_code": exchange.status,
            "inferstack.request_id": exchange.request_id,
            "inferstack.cache": exchange.cache,
        }
        for key in ("model", "tier", "upstream", "tenant"):
            value = getattr(exchange, key)
            if value is not None:
                attributes[f"inferstack.{key}"] = value
        span = self._tracer.start_span(
            f"POST {exchange.route}", start_time=end - int(elapsed_s * 1e9), attributes=attributes
        )
        span.end(end_time=end)

    def shutdown(self) -> None:
        self._provider.shutdown()


def setup_tracing(config: TracingConfig, exporter: Any = None) -> Tracer | None:
    """A Tracer exporting to config.otlp_endpoint (or to `exporter`, for tests), or None when tracing is off."""
    if config.otlp_endpoint is None and exporter is None:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "tracing.otlp_endpoint is set but OpenTelemetry is not installed. "
            "Fix: pip install 'inferstack-gateway[tracing]', or remove tracing.otlp_endpoint"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint)))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracer(provider.get_tracer("inferstack_gateway"), provider)
