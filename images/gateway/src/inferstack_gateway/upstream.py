"""Upstreams: circuit breakers and ordered failover over the gateway's keep-alive HTTP client."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import math
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from inferstack_gateway.config import BudgetsConfig, ConfigError, UpstreamConfig, read_utf8
from inferstack_gateway.errors import GatewayError
from inferstack_gateway.http_client import HttpClient, HttpClientError, Response, StreamBroken, Target
from inferstack_gateway.logs import logger
from inferstack_gateway.metrics import Metrics


class CircuitBreaker:
    """Closed → open after N consecutive failures → one probe after `open_s` → closed on success."""

    def __init__(self, failures_to_open: int, open_s: float, on_change: Callable[[bool], None]) -> None:
        self._threshold = failures_to_open
        self._open_s = open_s
        self._failures = 0
        self._open_until: float | None = None
        self._probing = False
        self._on_change = on_change

    @property
    def is_open(self) -> bool:
        return self._open_until is not None

    def retry_after_s(self) -> float:
        """Seconds until an open circuit lets a probe through (0 when closed)."""
        return 0.0 if self._open_until is None else max(0.0, self._open_until - time.monotonic())

    def allow(self) -> bool:
        if self._open_until is None:
            return True
        if self._probing or time.monotonic() < self._open_until:
            return False
        self._probing = True  # half-open: exactly one request probes the upstream
        return True

    def success(self) -> None:
        self._failures = 0
        self._probing = False
        if self._open_until is not None:
            self._open_until = None
            self._on_change(False)

    def abandon(self) -> None:
        """The probe ended with neither a success nor a failure (its request was cancelled): let the next one probe.

        Without this the half-open flag stays set and the breaker refuses every request for good."""
        self._probing = False

    def failure(self) -> None:
        self._failures += 1
        self._probing = False
        if self._open_until is not None or self._failures >= self._threshold:
            was_open = self._open_until is not None
            self._open_until = time.monotonic() + self._open_s
            if not was_open:
                self._on_change(True)


class Upstream:
    def __init__(self, name: str, config: UpstreamConfig, metrics: Metrics) -> None:
        self.name = name
        self.config = config
        self.base = config.url
        paths = ("/chat/completions", "/completions", "/models")
        tls = _trust(name, config)
        self.targets = {path: Target.parse(config.url + path, tls) for path in paths}
        self.model = config.model
        self.kind = config.kind
        """local, or remote (the hub): the `upstream_kind` label and span attribute, and what residency excludes."""
        self.max_inflight = config.max_inflight
        self.inflight = 0
        """Requests this replica has sent and not finished (streams until their end): the spillover signal."""
        self.resting_until = 0.0
        """Loop time until which a hub that answered 429 is left out of tiers that have another upstream: its
        Retry-After (at most REST_MAX_S), so that a spilling tier does not pay a round trip per request to hear it."""
        self.unserved: dict[str, float] = {}
        """Model name → loop time until which a hub that answered 404 for it is left out of tiers that have another
        upstream (UNSERVED_S): a tier spilling a model the hub does not serve pays no round trip per request."""
        self.ttft_ewma_s = 0.0
        """Moving average of streams' time to their first event with output (weight TTFT_EWMA_WEIGHT), observed when
        each stream ends."""
        self.headers = {"content-type": "application/json"}
        token = _api_key(name, config)
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        gauge = metrics.circuit_open.labels(name)
        gauge.set(0)

        def on_change(is_open: bool) -> None:
            gauge.set(1 if is_open else 0)
            logger.warning("circuit breaker %s", "opened" if is_open else "closed", extra={"upstream": name})

        breaker = config.circuit_breaker
        self.breaker = CircuitBreaker(breaker.failures_to_open, breaker.open_s, on_change)
        self.latency = metrics.upstream_latency.labels(name)
        self._errors = metrics.upstream_errors

    def error(self, reason: str) -> None:
        self._errors.labels(self.name, reason).inc()
        self.breaker.failure()

    def refused(self, reason: str) -> None:
        """Counted as an error, and as an answer by the breaker: the upstream is up and refused this request only
        (closing a half-open circuit, as any answer does)."""
        self._errors.labels(self.name, reason).inc()
        self.breaker.success()

    def rest(self, response: Response, now: float) -> None:
        """Leave this upstream out of tiers that have another one for the Retry-After of its 429 (1 s without one)."""
        self.resting_until = now + min(REST_MAX_S, retry_after_s(response.headers) or 1.0)

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_ewma_s += TTFT_EWMA_WEIGHT * (seconds - self.ttft_ewma_s)


TTFT_EWMA_WEIGHT = 0.2
"""Weight of the newest sample: the average follows a change of the local server's latency within about 10 requests."""

UNSERVED_S = 60.0
"""How long a hub's 404 for a model keeps it out of the tiers with another upstream, for that model: long enough to
spare a spilling tier a round trip per request, short enough to find the model once the hub serves it."""

REST_MAX_S = 60.0
"""The longest a hub's 429 keeps it out of a tier that has another upstream (a Retry-After beyond is cut to this)."""

_SECONDS = re.compile(r"[0-9]{1,9}")
_MILLISECONDS = re.compile(rb"[0-9]{1,9}(?:\.[0-9]{1,6})?")


def retry_headers(headers: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """An upstream's advice on when to retry, for passing its 4xx on: Retry-After (RFC 9110 section 10.2.3) in whole
    seconds, and retry-after-ms (which OpenAI's SDKs read first) when it is a number. Anything else is dropped."""
    advice = []
    seconds = retry_after_s(headers)
    if seconds is not None:
        advice.append((b"retry-after", b"%d" % math.ceil(seconds)))
    milliseconds = headers.get(b"retry-after-ms", b"").strip()
    if _MILLISECONDS.fullmatch(milliseconds):
        advice.append((b"retry-after-ms", milliseconds))
    return advice


def retry_after_s(headers: dict[bytes, bytes]) -> float | None:
    """A response's Retry-After in seconds (delay-seconds or an HTTP-date, RFC 9110 section 10.2.3), or None."""
    value = headers.get(b"retry-after", b"").decode("latin-1").strip()
    if not value:
        return None
    if _SECONDS.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110's IMF-fixdate is GMT; an obsolete form without a zone is read as such
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


ERROR_EVENT = b'data: {"error"'
"""How an OpenAI-compatible stream's error event starts (vLLM writes `data: {"error": {...}}`, this gateway
`data: {"error":{...}}`)."""


def _event_message(data: bytes) -> str:
    """The message of the error event that `data` starts with, or its first bytes."""
    line = data.partition(b"\n")[0][len(b"data: ") :]
    try:
        error = orjson.loads(line)["error"]
        return str(error["message"])[:300]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return line[:300].decode("utf-8", "replace")


def _not_an_answer(response: Response, stream: bool, *, hub: bool = False) -> str | None:
    """Why a response is a failure to fail over from, or None: a 5xx; a success other than 200 or a redirect (not
    followed), neither of which carries a completion; a non-streamed 200 that is not JSON (a proxy's HTML page);
    with ``hub``, a 429 or a 404. A 4xx is otherwise the upstream refusing the request itself: it is passed on, not
    failed over."""
    status = response.status
    if status >= 500 or (status < 400 and status != 200):
        return f"HTTP {status}"
    if hub and status == 429:
        return "HTTP 429 (over the limits of this stack's key there)"
    if hub and status == 404:
        return "HTTP 404 (it serves no such model)"
    if status == 200 and not stream:
        content_type = response.headers.get(b"content-type", b"")
        if b"json" not in content_type.lower():
            return f"HTTP 200 with Content-Type {content_type.decode('latin-1')[:60]!r}, not JSON"
    return None


def _api_key(name: str, config: UpstreamConfig) -> str | None:
    if config.api_key_file is None:
        return None if config.api_key is None else config.api_key.get_secret_value()
    what = f"upstreams.{name}.api_key_file"
    return read_utf8(config.api_key_file, what, "mount the Secret holding the key there").strip()


def _trust(name: str, config: UpstreamConfig) -> ssl.SSLContext | None:
    """The context an upstream with `ca_file` is verified with: that CA only, host name checked."""
    if config.ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=config.ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"upstreams.{name}.ca_file: cannot load {config.ca_file}: {getattr(exc, 'strerror', None) or exc}. "
            "Fix: mount the PEM CA certificate(s) the upstream's certificate chains to there"
        ) from None


@dataclass(slots=True)
class Opened:
    """An upstream answer that has passed the failover point: headers received and, for streams, a first chunk."""

    upstream: Upstream
    response: Response
    status: int
    first: bytes
    """Streams: the first chunk. Otherwise: the whole body."""
    latency_s: float
    """Time to the response's headers. The caller puts it in `upstream.latency` once the answer is on its way."""
    first_s: float
    """Time from the request to this upstream to `first` in hand."""


async def open_upstream(
    client: HttpClient,
    upstreams: list[Upstream],
    path: str,
    payload: Callable[[Upstream], bytes],
    *,
    stream: bool,
    budgets: BudgetsConfig,
    deadline: float,
    tier: str,
    model: str,
    extra_headers: dict[str, str] | None = None,
    on_head: Callable[[Response], None] | None = None,
    on_first: Callable[[bytes], bool] | None = None,
) -> Opened:
    """Try each upstream in order; fail over on connect errors, 5xx and timeouts before the first event.

    `deadline` is the request's deadline on the loop clock; `model` the name an upstream without its own `model` is
    asked for; `extra_headers` (trace context) go to every upstream
    tried; `on_head` and `on_first` (streams) are given to the client's request (`HttpClient.request`): a 200's head
    may go on to the client before its first event (a later failure before that event still fails over, behind the
    head already sent), and a 200's first body bytes are the stream's answer, never failed over from, so they may go
    on to the client before this returns. Raises
    GatewayError 503 (every upstream down or open) or 504 (out of time).
    """
    loop = asyncio.get_running_loop()
    failures: list[str] = []
    timed_out = False
    saturated = 0
    alone = len(upstreams) == 1
    for upstream in upstreams:
        if upstream.max_inflight is not None and upstream.inflight >= upstream.max_inflight:
            failures.append(f"{upstream.name}: saturated ({upstream.inflight} in flight)")
            saturated += 1
            continue
        if not alone and upstream.resting_until > loop.time():
            rest = math.ceil(upstream.resting_until - loop.time())
            failures.append(f"{upstream.name}: HTTP 429 (over the limits of this stack's key there), left out {rest} s")
            continue
        if not alone and upstream.unserved and upstream.unserved.get(upstream.model or model, 0.0) > loop.time():
            failures.append(f"{upstream.name}: HTTP 404 (it serves no model {upstream.model or model!r}), left out")
            continue
        if not upstream.breaker.allow():
            failures.append(f"{upstream.name}: circuit open")
            continue
        probe = upstream.breaker.is_open  # allowed while open: this request is the half-open probe
        remaining = deadline - loop.time()
        if remaining <= 0:
            timed_out = True
            break
        # A stream must show its first event within the TTFT budget; a non-streamed answer arrives whole, so it
        # only has the request budget.
        limit = min(budgets.upstream_ttft_ms / 1000, remaining) if stream else remaining
        started = loop.time()
        response: Response | None = None
        upstream.inflight += 1  # until the caller releases it (stream end), or a failure below
        try:
            # The client applies the limit (one timer, lifted once the first chunk is in hand).
            headers = upstream.headers if extra_headers is None else {**upstream.headers, **extra_headers}
            response = await client.request(
                b"POST", upstream.targets[path], headers, payload(upstream), deadline=started + limit,
                on_head=on_head if stream else None, on_first=on_first if stream else None,
            )  # fmt: skip
            latency = loop.time() - started
            # A remote upstream is the hub's gateway: its 429 is its limit on the burst key this whole stack shares
            # (gateway.burstTenant), not on the client, who never sees that key; its 404, a model it does not serve
            # (the hub is asked for the local tier's model unless hub.model names one). Another upstream of the tier
            # (the local one, behind the hub while the tier spills) takes the request. Neither is passed on unless the
            # hub serves the tier alone: after a local model that failed, a 404 would tell the client that a model
            # this site lists does not exist (an error OpenAI's SDKs never retry). Either is an answer from a hub that
            # is up: no breaker failure (the breaker serves every tier, and its tiers that the hub serves alone would
            # answer 503 for as long as it is open). After a 429, tiers with another upstream leave the hub out for its
            # Retry-After; a tier the hub serves alone passes its 429 on, Retry-After included.
            unexpected = _not_an_answer(response, stream, hub=upstream.kind == "remote" and not alone)
            if unexpected is not None:
                upstream.latency.observe(latency)
                body = await response.read()
                failures.append(f"{upstream.name}: {unexpected}")
                if response.status in (404, 429):  # the hub is up, refusing this stack's requests: no breaker failure
                    upstream.refused(f"http_{response.status}")
                    if response.status == 429:
                        upstream.rest(response, loop.time())
                    else:
                        upstream.unserved[upstream.model or model] = loop.time() + UNSERVED_S
                else:
                    upstream.error(f"http_{response.status}")
                logger.warning(
                    "upstream failed, failing over",
                    extra={
                        "upstream": upstream.name,
                        "status": response.status,
                        "body": body[:200].decode("utf-8", "replace"),
                    },
                )
                response.close()
                upstream.inflight -= 1
                continue
            if response.status >= 400 or not stream:
                first = await response.read()
                response.close()  # complete: its connection goes back to the pool now
            else:
                first = await response.readany()
                response.disarm()  # the stream's reads are timed by the request budget from here on
                if not first:
                    raise StreamBroken("the stream closed before its first event")
                if first.startswith(ERROR_EVENT):
                    # No answer has started: an upstream that fails as its first event (vLLM's error event; a hub
                    # gateway whose own upstreams failed behind the head it sent) is failed over from, like a 5xx.
                    raise StreamBroken(f"an error event before any output: {_event_message(first)}")
        except TimeoutError:
            upstream.inflight -= 1
            if response is not None:
                response.close()
            timed_out = True
            reason = "timeout before the first event" if stream else "timeout"
            failures.append(f"{upstream.name}: {reason} ({limit * 1000:.0f} ms)")
            upstream.error("timeout")
            continue
        except (HttpClientError, OSError) as exc:
            upstream.inflight -= 1
            if response is not None:
                response.close()
            failures.append(f"{upstream.name}: {type(exc).__name__} {exc}".strip())
            upstream.error("connect" if response is None else "broken")
            continue
        except BaseException:
            upstream.inflight -= 1
            if response is not None:
                response.close()  # cancelled (client went away): drop the upstream request with it
            if probe:
                upstream.breaker.abandon()
            raise
        upstream.breaker.success()
        # A stream's TTFT (the spillover's average) is its first event with output, which the caller observes once
        # the stream has ended: the first event may carry only the role (Triton's OpenAI frontend sends it at once).
        return Opened(upstream, response, response.status, first, latency, loop.time() - started)
    detail = "; ".join(failures) or "no upstream attempted"
    if timed_out and loop.time() >= deadline:
        raise GatewayError(
            504, f"The request budget ran out before tier '{tier}' answered ({detail}).", type="timeout", code="timeout"
        )
    # When a circuit will let a probe through, or in a second for a saturated or refusing upstream.
    now = loop.time()
    wait = min((max(u.breaker.retry_after_s(), u.resting_until - now) or 1.0) for u in upstreams)
    retry_after = [(b"retry-after", b"%d" % max(1, math.ceil(wait)))]
    if saturated == len(upstreams):
        raise GatewayError(
            503,
            f"Every upstream of tier '{tier}' is saturated ({detail}). Retry after {retry_after[0][1].decode()} s.",
            type="service_unavailable",
            code="upstreams_saturated",
            headers=retry_after,
        )
    if all(u.kind == "remote" for u in upstreams):
        raise GatewayError(
            503,
            f"Tier '{tier}' is served by the hub, which is unavailable ({detail}). This site keeps serving its local "
            f"models and cache; retry after {retry_after[0][1].decode()} s.",
            type="service_unavailable",
            code="hub_unavailable",
            headers=retry_after,
        )
    if timed_out and all("timeout" in f for f in failures):
        raise GatewayError(
            504, f"Every upstream of tier '{tier}' timed out ({detail}).", type="timeout", code="upstream_timeout"
        )
    raise GatewayError(
        503,
        f"Every upstream of tier '{tier}' is unavailable ({detail}).",
        type="service_unavailable",
        code="upstreams_unavailable",
        headers=retry_after,
    )
