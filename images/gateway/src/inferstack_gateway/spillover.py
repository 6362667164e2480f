"""Hybrid burst: which upstreams of a tier a request may use, local first or spilled to the hub.

A tier's upstreams are local (this tier's servers) or remote (the hub: another inferstack gateway). Per request,
`TierRoute.pick` returns one of three lists built once at start, so the decision is a few integer comparisons,
with no await and no allocation:

- the configured order (local first, a remote one as the fallback when the local ones are down or saturated);
- while the tier spills, the remote upstreams first, the local ones as their fallback;
- for a request that must stay in this tier (`residency: local` on its key or its model), the local ones only.

Spilling follows the local upstreams' load with hysteresis (like a thermostat): it starts when the requests in flight
to them reach `spill_above_inflight` (or their TTFT average reaches `spill_above_ttft_ms`) and stops once load is
under every `return_below_*` threshold, so a tier at the threshold does not flip on every request. This is the
"fallbacks + max_parallel_requests" pattern of LiteLLM's router, decided in-process (facts-tiers.md section 9).
"""

from __future__ import annotations

from collections.abc import Callable

from inferstack_gateway.config import GatewayConfig, SpilloverConfig
from inferstack_gateway.logs import logger
from inferstack_gateway.metrics import Metrics
from inferstack_gateway.upstream import Upstream

__all__ = ["Spill", "TierRoute", "build_routes"]


class Spill:
    """The hysteresis state of one tier: `decide()` says whether a new request spills to the remote upstreams."""

    __slots__ = ("_above_n", "_above_s", "_below_n", "_below_s", "_local", "_on_change", "spilling")

    def __init__(
        self, config: SpilloverConfig, local: list[Upstream], on_change: Callable[[bool], None] | None = None
    ) -> None:
        self._local = local
        self._above_n = config.spill_above_inflight
        self._below_n = config.return_inflight
        self._above_s = None if config.spill_above_ttft_ms is None else config.spill_above_ttft_ms / 1000
        return_ms = config.return_ttft_ms
        self._below_s = None if return_ms is None else return_ms / 1000
        self._on_change = on_change
        self.spilling = False

    def decide(self) -> bool:
        load = 0
        ttft = 0.0
        for upstream in self._local:
            load += upstream.inflight
            if upstream.ttft_ewma_s > ttft:
                ttft = upstream.ttft_ewma_s
        if self.spilling:
            if (self._below_n is None or load < self._below_n) and (self._below_s is None or ttft < self._below_s):
                self._set(False)
            elif load == 0:
                # Spilling on TTFT alone: an idle local upstream still gets this request, so that its average keeps
                # moving and the tier can come back when the local server has recovered.
                return False
        elif (self._above_n is not None and load >= self._above_n) or (
            self._above_s is not None and ttft >= self._above_s
        ):
            self._set(True)
        return self.spilling

    def _set(self, spilling: bool) -> None:
        self.spilling = spilling
        if self._on_change is not None:
            self._on_change(spilling)


class TierRoute:
    """The upstream lists of one tier, built once; `pick` chooses among them per request."""

    __slots__ = ("configured", "local", "name", "remote", "spill", "spilled")

    def __init__(self, name: str, upstreams: list[Upstream], spill: Spill | None = None) -> None:
        self.name = name
        self.configured = upstreams
        """The configured failover order: local first, a remote upstream as the fallback."""
        self.local = [u for u in upstreams if u.kind == "local"]
        """What a residency-local request may use."""
        self.remote = [u for u in upstreams if u.kind == "remote"]
        self.spilled = self.remote + self.local
        """While spilling: the hub first, the local upstreams if the hub fails."""
        self.spill = spill

    def pick(self, resident: bool) -> list[Upstream]:
        """The upstreams to try, in order. `resident`: the request must not leave this tier."""
        if resident:
            return self.local
        if self.spill is not None and self.spill.decide():
            return self.spilled
        return self.configured


def build_routes(config: GatewayConfig, upstreams: dict[str, Upstream], metrics: Metrics) -> dict[str, TierRoute]:
    """A TierRoute per tier, with its Spill (and its metrics) where the tier has spillover configured."""
    for upstream in upstreams.values():
        # Read at scrape time: nothing on the request path.
        gauge = metrics.upstream_in_flight.labels(upstream.name, upstream.kind)
        gauge.set_function(_in_flight_of(upstream))
    routes: dict[str, TierRoute] = {}
    for name, tier in config.tiers.items():
        members = [upstreams[u] for u in tier.upstreams]
        spill = None
        if tier.spillover is not None:
            spill = Spill(tier.spillover, [u for u in members if u.kind == "local"], _on_change(name, metrics))
            metrics.spilling.labels(name).set(0)
        routes[name] = TierRoute(name, members, spill)
    return routes


def _in_flight_of(upstream: Upstream) -> Callable[[], float]:
    return lambda: upstream.inflight


def _on_change(tier: str, metrics: Metrics) -> Callable[[bool], None]:
    gauge = metrics.spilling.labels(tier)
    to_remote, to_local = metrics.spill_changes.labels(tier, "remote"), metrics.spill_changes.labels(tier, "local")

    def changed(spilling: bool) -> None:
        # A state change, not a request: rare by design (hysteresis), so the log line and the metrics cost nothing.
        gauge.set(1 if spilling else 0)
        (to_remote if spilling else to_local).inc()
        logger.debug("spillover %s", "started" if spilling else "ended", extra={"tier": tier})

    return changed
