"""Section 6, tracing: spans reach a real OTLP/gRPC receiver, joined to the caller's and the upstream's traces."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from gateway_harness import API_KEY_A, GatewayHandle, StandIn

# The package's `tracing` extra, which requirements-dev.txt always installs: a missing one fails here, not as a skip.
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN_ID = "00f067aa0ba902b7"


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    """An OTLP/gRPC trace collector that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.resources: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:  # the OTLP service's method name
        with self.lock:
            for resource_spans in request.resource_spans:
                self.resources.append({a.key: _value(a.value) for a in resource_spans.resource.attributes})
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def attributes(span: Any) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def collector() -> Iterator[tuple[str, Receiver]]:
    receiver = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"http://127.0.0.1:{port}", receiver
    server.stop(None)


def test_requests_are_exported_as_spans_joined_to_the_callers_trace(
    gateway: Any, upstreams: Any, collector: tuple[str, Receiver], loop_thread: Any
) -> None:
    # GIVEN a gateway exporting OTLP to a real gRPC collector
    endpoint, receiver = collector
    upstream: StandIn = upstreams("up", tokens=3)
    gw: GatewayHandle = gateway(upstream, tracing={"otlp_endpoint": endpoint, "service_name": "gw-under-test"})
    client = gw.client(default_headers={"traceparent": f"00-{CLIENT_TRACE_ID}-{CLIENT_SPAN_ID}-01"})
    # WHEN a traced client makes one request that reaches the upstream, and one that fails validation
    client.chat.completions.create(model="local", messages=[{"role": "user", "content": "Trace me"}], temperature=0.7)
    key = {"authorization": f"Bearer {API_KEY_A}"}
    status, _, _ = gw.http("POST", "/v1/chat/completions", b"{not json", key)
    assert status == 400
    gw.stop(loop_thread)  # shutting down exports the spans still waiting in the batch

    # THEN the collector holds one SERVER span per request, under the gateway's service name
    spans = sorted(receiver.spans, key=lambda s: s.start_time_unix_nano)
    assert len(spans) == 2
    assert {"service.name": "gw-under-test"}.items() <= receiver.resources[0].items()
    served, refused = spans
    assert served.name == "POST /v1/chat/completions"
    assert served.kind == served.SPAN_KIND_SERVER
    # the first span continues the client's trace, as the child of the client's span
    assert served.trace_id.hex() == CLIENT_TRACE_ID
    assert served.parent_span_id.hex() == CLIENT_SPAN_ID
    assert served.end_time_unix_nano > served.start_time_unix_nano
    assert {
        "http.request.method": "POST",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "inferstack.cache": "bypass",
        "inferstack.model": "local",
        "inferstack.tier": "small",
        "inferstack.upstream": "main",
        "inferstack.tenant": "tenant-a",
    }.items() <= attributes(served).items()
    # the upstream was handed the gateway's span as its parent, so its own spans join the same trace
    traceparent = {k.lower(): v for k, v in upstream.requests[0]["headers"].items()}["traceparent"]
    assert traceparent == f"00-{CLIENT_TRACE_ID}-{served.span_id.hex()}-01"
    # the refused request is a root span of its own, with its 4xx status
    assert refused.parent_span_id == b"" and refused.trace_id.hex() != CLIENT_TRACE_ID
    assert attributes(refused)["http.response.status_code"] == 400


def test_upstream_errors_mark_the_span_as_failed(
    gateway: Any, upstreams: Any, collector: tuple[str, Receiver], loop_thread: Any
) -> None:
    endpoint, receiver = collector
    upstream = upstreams("down", mode="error500")
    gw = gateway(upstream, tracing={"otlp_endpoint": endpoint})
    status, _, _ = gw.http(
        "POST", "/v1/chat/completions", b'{"model":"local","messages":[{"role":"user","content":"hi"}]}',
        {"authorization": f"Bearer {API_KEY_A}", "content-type": "application/json"},
    )  # fmt: skip
    assert status == 503
    gw.stop(loop_thread)  # shutting down exports the spans still waiting in the batch
    (span,) = receiver.spans
    assert attributes(span)["http.response.status_code"] == 503
    assert span.status.code == span.status.STATUS_CODE_ERROR


def test_no_tracing_configured_means_no_trace_headers_upstream(gateway: Any, upstreams: Any) -> None:
    upstream = upstreams("up")
    gw = gateway(upstream)
    gw.client().chat.completions.create(model="local", messages=[{"role": "user", "content": "hi"}], temperature=0.7)
    assert gw.app.tracer is None
    assert "traceparent" not in {k.lower() for k in upstream.requests[0]["headers"]}
