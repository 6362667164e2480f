"""Prometheus instruments, on a registry per gateway instance (so several can live in one process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

# Sub-millisecond buckets for cache lookups; TTFT up to the 100 ms p99 target and beyond for cold paths.
_FAST = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25)
_TTFT = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ITL = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25)


class NearCache(Protocol):
    """What the near-cache metrics read (resp.FastReads): plain counts, kept without a lock on the request path."""

    near_hits: int
    near_invalidations: int

    def near_bytes(self) -> int: ...
    def near_entries(self) -> int: ...


class _NearCacheCollector(Collector):
    def __init__(self, near: NearCache) -> None:
        self._near = near

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        near = self._near
        yield CounterMetricFamily(
            "inferstack_gateway_near_cache_hits",
            "Exact-cache hits answered from this worker's memory, with no Redis round trip",
            value=near.near_hits,
        )
        yield CounterMetricFamily(
            "inferstack_gateway_near_cache_invalidations",
            "Invalidation messages from Redis's client tracking (keys written, deleted, expired or flushed)",
            value=near.near_invalidations,
        )
        yield GaugeMetricFamily(
            "inferstack_gateway_near_cache_bytes", "Bytes held by the near cache", value=near.near_bytes()
        )
        yield GaugeMetricFamily(
            "inferstack_gateway_near_cache_entries", "Entries held by the near cache", value=near.near_entries()
        )


class MissFilter(Protocol):
    """What the miss filter's metrics read (resp.FastReads)."""

    known_skips: int
    known_builds: int

    def known_ready(self) -> bool: ...


class _MissFilterCollector(Collector):
    def __init__(self, reads: MissFilter) -> None:
        self._reads = reads

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        reads = self._reads
        yield CounterMetricFamily(
            "inferstack_gateway_miss_filter_skips",
            "Exact lookups answered as misses by this worker's filter of the keys Redis holds, with no round trip",
            value=reads.known_skips,
        )
        yield CounterMetricFamily(
            "inferstack_gateway_miss_filter_builds",
            "SCANs of the exact keys completed into a new miss filter (one per connection, then one an hour)",
            value=reads.known_builds,
        )
        yield GaugeMetricFamily(
            "inferstack_gateway_miss_filter_ready",
            "1 while the miss filter is built on the lookup connection and answers, 0 while every lookup is a round "
            "trip",
            value=1 if reads.known_ready() else 0,
        )


class EmbeddingsState(Protocol):
    state: Literal["unknown", "up", "down"]


class _EmbeddingsCollector(Collector):
    def __init__(self, embedder: EmbeddingsState) -> None:
        self._embedder = embedder

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._embedder.state
        if state != "unknown":  # no series before the first call ended: neither up nor down is known
            yield GaugeMetricFamily(
                "inferstack_gateway_embeddings_up",
                "1 while the embeddings endpoint answers, 0 while it is down and the semantic stage is skipped "
                "(what /readyz reports as embeddings)",
                value=1 if state == "up" else 0,
            )


class Metrics:
    def watch_near_cache(self, near: NearCache) -> None:
        """Export the near cache's counts, read at scrape time."""
        self.registry.register(_NearCacheCollector(near))

    def watch_miss_filter(self, reads: MissFilter) -> None:
        """Export the miss filter's counts, read at scrape time."""
        self.registry.register(_MissFilterCollector(reads))

    def watch_embeddings(self, embedder: EmbeddingsState) -> None:
        """Export the embeddings endpoint's state, read at scrape time."""
        self.registry.register(_EmbeddingsCollector(embedder))

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # upstream_kind: local (this tier), remote (burst to the hub) or none (answered by the gateway: cache hits,
        # refusals). Three values, so the label adds no cardinality to speak of.
        self.requests = Counter(
            "inferstack_gateway_requests",
            "Requests by route, status, cache result, model alias and upstream kind (local, remote, none)",
            ["route", "status", "cache", "model", "upstream_kind"],
            registry=r,
        )
        # The wake-up signal of a scaled-to-zero model. Its series are created at 0 for every configured alias when
        # the gateway starts, so a first request moves one from 0 to 1 and rate() sees it: on a series born at 1 (the
        # requests counter's, whose labels carry the status) rate() sees no increase until the second request.
        self.model_requests = Counter(
            "inferstack_gateway_model_requests",
            "Requests per model alias the client asked for, whatever their answer; every configured alias from 0",
            ["model"],
            registry=r,
        )
        self.ttft = Histogram(
            "inferstack_gateway_ttft_seconds",
            "Time to the answer's first token (streams: the first event with output), per model and upstream kind "
            "(local, remote, none)",
            ["model", "upstream_kind"],
            buckets=_TTFT,
            registry=r,
        )
        # The model's own TTFT where its engine exports none (Triton behind its OpenAI frontend, llama.cpp): the
        # first event that carries output, not the first byte (Triton's frontend sends a role-only event before it
        # runs the model), on streams an upstream answered, from the request to that upstream.
        self.upstream_ttft = Histogram(
            "inferstack_gateway_upstream_ttft_seconds",
            "Streams only: time from the request to an upstream (failover included) to its first event with output",
            ["upstream"],
            buckets=_TTFT,
            registry=r,
        )
        self.itl = Histogram(
            "inferstack_gateway_itl_seconds",
            "Time between streamed chunks, per model",
            ["model"],
            buckets=_ITL,
            registry=r,
        )
        self.cache_lookup = Histogram(
            "inferstack_gateway_cache_lookup_seconds",
            "Cache lookup latency by kind (exact, semantic)",
            ["kind"],
            buckets=_FAST,
            registry=r,
        )
        self.cache_skipped = Counter(
            "inferstack_gateway_cache_skipped",
            "Cache stages skipped, by kind and reason",
            ["kind", "reason"],
            registry=r,
        )
        self.cache_writes = Counter(
            "inferstack_gateway_cache_writes", "Cache write-backs by kind and outcome", ["kind", "outcome"], registry=r
        )
        self.upstream_latency = Histogram(
            "inferstack_gateway_upstream_latency_seconds",
            "Upstream time to response headers",
            ["upstream"],
            buckets=_TTFT,
            registry=r,
        )
        self.upstream_errors = Counter(
            "inferstack_gateway_upstream_errors", "Upstream failures by reason", ["upstream", "reason"], registry=r
        )
        self.in_flight = Gauge("inferstack_gateway_in_flight_requests", "Requests in progress", registry=r)
        self.circuit_open = Gauge(
            "inferstack_gateway_circuit_open",
            "1 while an upstream's circuit breaker is open",
            ["upstream"],
            registry=r,
        )
        self.redis_errors = Counter(
            "inferstack_gateway_redis_errors", "Redis operations that failed or overran", ["op"], registry=r
        )
        self.redis_up = Gauge("inferstack_gateway_redis_up", "0 while Redis is considered down", registry=r)
        self.rate_limited = Counter(
            "inferstack_gateway_rate_limited", "Requests refused with 429, by limit", ["limit"], registry=r
        )
        self.spilling = Gauge(
            "inferstack_gateway_spilling",
            "1 while a tier sends new requests to its remote upstreams (burst to the hub)",
            ["tier"],
            registry=r,
        )
        self.spill_changes = Counter(
            "inferstack_gateway_spill_changes",
            "Spillover state changes per tier, by direction (to: remote, local)",
            ["tier", "to"],
            registry=r,
        )
        self.upstream_in_flight = Gauge(
            "inferstack_gateway_upstream_in_flight_requests",
            "Requests in flight to an upstream from this replica (read at scrape time)",
            ["upstream", "upstream_kind"],
            registry=r,
        )
        self.client_disconnects = Counter(
            "inferstack_gateway_client_disconnects", "Requests whose client went away before the end", registry=r
        )
