"""The gateway as one pure ASGI application.

Request lifecycle (design.md): authenticate → read and validate the body → route (complexity tier) → rate limits
from this replica's lease of the shared Redis counters (limits.py), with the exact lookup for cacheable requests →
semantic lookup (single-turn only) → upstream with failover, relayed byte for byte → cache write-back and token
accounting after the response, deferred and off the critical path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError

from inferstack_gateway import sse
from inferstack_gateway.auth import KeyTable, Principal
from inferstack_gateway.config import GatewayConfig, ModelConfig
from inferstack_gateway.embeddings import Embedder, EmbeddingError, InputTooLong
from inferstack_gateway.errors import GatewayError, error_body
from inferstack_gateway.exchange import Exchange
from inferstack_gateway.http_client import HttpClient, Response
from inferstack_gateway.limits import SharedLimiter
from inferstack_gateway.logs import access, logger
from inferstack_gateway.metrics import Metrics
from inferstack_gateway.normalize import (
    CacheKeys,
    Kind,
    ParsedRequest,
    cache_keys,
    parse_chat,
    parse_completion,
    parse_json_body,
    unknown_model,
)
from inferstack_gateway.server import chunk_writer, on_lost, open_stream, start_stream
from inferstack_gateway.spillover import build_routes
from inferstack_gateway.store import LocalLimiter, RedisStore, close_quietly, retry_after_s
from inferstack_gateway.tracing import Tracer, setup_tracing
from inferstack_gateway.upstream import ERROR_EVENT, Opened, Upstream, open_upstream, retry_headers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
OPT_IN_HEADER = b"x-inferstack-cache-opt-in"
CONNECTION_CLOSE = (b"connection", b"close")
USAGE = b'"usage":{'
"""How a stored answer (orjson's compact JSON) shows its token usage: a key no string value can hold unescaped."""
DEFER_S = 0.002
"""Work that follows a response (access log line, stream metrics, cache write-back, token accounting) waits this long
and runs in one batch, so that it never sits in front of the next request a keep-alive client sends at once."""
POSTPONE_MAX = 25
"""While a request is between its arrival and its upstream call (the part of the path that decides its TTFT), the
batch is put off by another DEFER_S, at most this many times (50 ms): it then runs while that request waits for its
upstream. Under a load with always someone arriving, the cap keeps the batch from waiting for good."""
DONE_LINE = b"data: [DONE]"
FINISHED = frozenset({"stop", "length", "tool_calls", "function_call"})
"""The finish_reason values of an answer the model finished, which the cache may keep (_finished)."""
KEEPALIVE_S = 4
"""Idle upstream connections are closed after this long: below the 5 s after which uvicorn (vLLM's server, and
trtllm-serve's) closes them itself, so the gateway seldom sends a request on a connection the upstream is closing."""


class ClientGone(Exception):
    """The client disconnected while the gateway was still reading its request."""


class Gateway:
    """ASGI app. Construct with a validated config; resources are opened in the lifespan startup."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.keys = KeyTable(config)
        self.ready = False
        self.http: HttpClient | None = None
        self.store: RedisStore | None = None
        self.embedder: Embedder | None = None
        self._embeddings_watch: asyncio.Task[None] | None = None
        self.tracer: Tracer | None = None
        self.local_limits = LocalLimiter()
        self.shared_limits: SharedLimiter | None = None
        self.upstreams = {name: Upstream(name, cfg, self.metrics) for name, cfg in config.upstreams.items()}
        self.tiers = {name: [self.upstreams[u] for u in tier.upstreams] for name, tier in config.tiers.items()}
        self.routes = build_routes(config, self.upstreams, self.metrics)
        """Per tier: local-first, spilled (hub first) and residency-local upstream lists (spillover.py)."""
        self._keywords = {
            alias: [[k.lower() for k in rule.keywords] for rule in model.complexity]
            for alias, model in config.models.items()
        }
        self._tier_header = config.routing.tier_header.encode()
        self._prompt_version_header = config.routing.prompt_version_header.encode()
        self._background: set[asyncio.Task[Any]] = set()
        self._deferred: list[Callable[[], Any]] = []
        self._drain_handle: asyncio.TimerHandle | None = None
        self._postponed = 0
        self._arriving = 0
        """Requests between arrival and their upstream call or cached answer."""
        self._in_flight = 0
        # Read at scrape time: a Gauge.inc() per request takes a lock on the path to the first token.
        self.metrics.in_flight.set_function(lambda: self._in_flight)
        self._exact_lookup_seconds = self.metrics.cache_lookup.labels("exact")
        self._semantic_lookup_seconds = self.metrics.cache_lookup.labels("semantic")
        # The skips counted on the path to the first token (others are counted where they happen).
        self._skipped = {
            labels: self.metrics.cache_skipped.labels(*labels)
            for labels in (("semantic", "too_long"), ("semantic", "embeddings"), ("exact", "budget"))
        }
        # Label children resolved once: a labels() call takes a lock and validates on every request.
        self._model_metrics = {
            (alias, kind): (self.metrics.ttft.labels(alias, kind), self.metrics.itl.labels(alias))
            for alias in config.models
            for kind in ("local", "remote", "none")
        }
        self._request_counters: dict[tuple[str, int, str, str, str], Any] = {}
        self._model_requests = {alias: self.metrics.model_requests.labels(alias) for alias in config.models}
        self._id_prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._models_body = _models_body(list(config.models))
        self._routes: dict[str, tuple[bytes, Callable[[Scope, Receive, Send, Exchange], Awaitable[None]]]] = {
            "/v1/chat/completions": (b"POST", self._chat),
            "/v1/completions": (b"POST", self._completion),
            "/v1/models": (b"GET", self._models),
            "/healthz": (b"GET", self._healthz),
            "/readyz": (b"GET", self._readyz),
            "/metrics": (b"GET", self._metrics),
        }

    # -- ASGI entry ---------------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id")
        # Unique, not secret: a per-process random prefix and a counter (no urandom syscall per request).
        request_id = given.decode("latin-1")[:128] if given else f"{self._id_prefix}{next(self._ids):08x}"
        exchange = Exchange(request_id=request_id, route=path, started=time.perf_counter(), headers=headers)
        route = self._routes.get(path)
        if self.tracer is not None and path.startswith("/v1/"):
            exchange.span = self.tracer.start(scope["method"], path if route else "unknown", headers)
        try:
            if len(headers) != len(scope["headers"]):
                _one_authorization(scope["headers"])
            if route is None:
                exchange.route = "unknown"
                raise GatewayError(404, f"Unknown path {path}.", code="unknown_url")
            method, handler = route
            if scope["method"].encode() != method and not (method == b"GET" and scope["method"] == "HEAD"):
                # HEAD is GET without the body, which uvicorn leaves out: every server MUST support both (RFC 9110
                # §9.1); a 405 to HEAD failed probes and monitors that use it.
                allowed = b"GET, HEAD" if method == b"GET" else method
                raise GatewayError(
                    405, f"{path} accepts {allowed.decode()} only.", code="method_not_allowed",
                    headers=[(b"allow", allowed)],
                )  # fmt: skip
            await handler(scope, receive, send, exchange)
        except GatewayError as exc:
            if not exchange.response_started:
                extra = exc.headers
                if _unread_body(exchange, extra):
                    extra = [*extra, CONNECTION_CLOSE]
                await self._send(send, exchange, exc.status, exc.body(), JSON, extra)
            elif not exchange.finished:  # a stream's head is out (`on_head`): the error is its last event
                await self._end_stream(send, exchange, exc.status, exc.body(), exc.message)
        except ClientGone:
            exchange.status = 499
            self.metrics.client_disconnects.inc()
        except Exception:
            logger.exception("unhandled error", extra={"request_id": request_id, "path": path})
            body = error_body("The gateway failed to handle the request. It has been logged.", "server_error")
            if not exchange.response_started:
                extra = [CONNECTION_CLOSE] if _unread_body(exchange, []) else []
                await self._send(send, exchange, 500, body, JSON, extra)
            elif not exchange.finished:
                with contextlib.suppress(Exception):  # best effort: the protocol closes an unfinished response
                    await self._end_stream(send, exchange, 500, body, "unhandled error")
        finally:
            if exchange.route.startswith("/v1/"):
                self._observe(exchange)

    def _observe(self, exchange: Exchange) -> None:
        # The model label is the alias the client asked for ("" before one is known): per-model cache hit
        # rates, and the wake-up signal of a scaled-to-zero model, read it.
        model = exchange.model or ""
        labels = (exchange.route, exchange.status, exchange.cache, model, exchange.upstream_kind)
        counter = self._request_counters.get(labels)
        if counter is None:
            counter = self._request_counters[labels] = self.metrics.requests.labels(
                exchange.route, str(exchange.status), exchange.cache, model, exchange.upstream_kind
            )
        counter.inc()
        asked = self._model_requests.get(model)
        if asked is not None:
            asked.inc()
        elapsed = time.perf_counter() - exchange.started
        if exchange.observations is not None:
            for record, value in exchange.observations:
                record(value)
        if self.config.server.access_log:
            self._defer(lambda: _access_log(exchange, elapsed))
        if exchange.span is not None and self.tracer is not None:
            self.tracer.finish(exchange.span, exchange)

    def _defer(self, work: Callable[[], Any]) -> None:
        """Run `work` DEFER_S from now, batched with the other deferred work."""
        self._deferred.append(work)
        if self._drain_handle is None:
            self._drain_handle = asyncio.get_running_loop().call_later(DEFER_S, self._drain)

    def _drain(self, now: bool = False) -> None:
        if not now and self._arriving and self._postponed < POSTPONE_MAX:
            self._postponed += 1
            self._drain_handle = asyncio.get_running_loop().call_later(DEFER_S, self._drain)
            return
        self._postponed = 0
        self._drain_handle = None
        deferred, self._deferred = self._deferred, []
        for work in deferred:
            try:
                work()
            except Exception:
                logger.exception("deferred work failed")

    async def _send(
        self,
        send: Send,
        exchange: Exchange,
        status: int,
        body: bytes,
        content_type: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        exchange.status = status
        exchange.response_started = True
        headers = [
            (b"content-type", content_type),
            (b"content-length", b"%d" % len(body)),
            (b"x-request-id", exchange.request_id.encode("latin-1")),
        ]
        if exchange.route.startswith("/v1/") and exchange.route != "/v1/models":
            headers.append((b"x-inferstack-cache", exchange.cache.encode()))
        if extra:
            headers.extend(extra)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        exchange.finished = True
        await send({"type": "http.response.body", "body": body})

    # -- lifespan -----------------------------------------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    logger.exception("startup failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        config = self.config
        self.http = HttpClient(
            limit_per_origin=config.server.upstream_connections,
            keepalive_s=KEEPALIVE_S,
            connect_timeout_s=config.budgets.upstream_connect_ms / 1000,
        )
        if config.redis.url is not None:
            self.store = RedisStore(config.redis, self.metrics, config.embeddings)
            self.shared_limits = SharedLimiter(self.store)
            if self.store.reads is not None and self.store.reads.near is not None:
                self.metrics.watch_near_cache(self.store.reads)
            if self.store.reads is not None and self.store.reads.known_keys:
                self.metrics.watch_miss_filter(self.store.reads)
        if config.embeddings.url is not None:
            self.embedder = Embedder(config.embeddings, self.http)
            self.metrics.watch_embeddings(self.embedder)
        self.tracer = setup_tracing(config.tracing)
        semantic = any(m.cache.semantic.enabled and m.cache.policy != "never" for m in config.models.values())
        if self.store is not None and semantic:
            try:
                await asyncio.wait_for(self.store.ensure_index(), 2)
            except (RedisError, OSError, TimeoutError) as exc:
                self.store.failed("create_index", exc)  # retried on the first semantic lookup
        await asyncio.gather(
            *(self._warm(u) for u in self.upstreams.values()), self._first_probe(), self._open_exact_lookup()
        )
        if self.embedder is not None:
            self._embeddings_watch = asyncio.create_task(self.embedder.watch())
        self.ready = True
        logger.info("gateway ready", extra={"models": sorted(config.models), "upstreams": sorted(self.upstreams)})

    async def _warm(self, upstream: Upstream) -> None:
        """Open a keep-alive connection to each upstream before the first request (its failure is only logged)."""
        assert self.http is not None
        try:
            async with asyncio.timeout(2):
                response = await self.http.request(b"GET", upstream.targets["/models"], upstream.headers)
                try:
                    await response.read()
                finally:
                    response.close()
        except (OSError, TimeoutError) as exc:
            logger.warning("upstream not reachable at startup", extra={"upstream": upstream.name, "error": repr(exc)})

    async def _open_exact_lookup(self) -> None:
        """Open the exact lookup's Redis connection before the first request, which starts the SCAN that builds its
        miss filter (a failure starts an outage window as any other does; the first lookup tries again)."""
        store = self.store
        if store is not None and store.reads is not None:
            try:
                async with asyncio.timeout(2):
                    await store.reads.open()
            except (RedisError, OSError, TimeoutError) as exc:
                store.failed("connect", exc)

    async def _first_probe(self) -> None:
        """Try the embeddings endpoint once before the first request, so that /readyz reports what was observed. A
        probe slower than 2 s is left to the background watch (the state stays "unknown" until it ends)."""
        if self.embedder is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.embedder.probe(), 2)

    async def shutdown(self) -> None:
        self.ready = False
        if self._embeddings_watch is not None:
            self._embeddings_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._embeddings_watch
        if self._drain_handle is not None:
            self._drain_handle.cancel()
            self._drain(now=True)
        if self._background:
            await asyncio.wait(self._background, timeout=5)
        if self.shared_limits is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.shared_limits.drain(), 5)
        if self.http is not None:
            self.http.close()
        await close_quietly(self.store)
        if self.tracer is not None:
            self.tracer.shutdown()

    # -- small endpoints ----------------------------------------------------------------------------------------------

    async def _healthz(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        await self._send(send, exchange, 200, b'{"status":"ok"}', JSON)

    async def _readyz(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        """200 once started, with the state of each optional dependency; 503 while starting.

        A dependency that is down does not make the replica unready: it serves without the cache (and with
        per-replica limits), and a 503 would take every replica out of the Service at once when the shared Redis
        fails. The body says what is degraded, so that a probe or an operator sees the truth."""
        if not self.ready:
            await self._send(send, exchange, 503, b'{"status":"starting"}', JSON)
            return
        state: dict[str, str | None] = {"status": "ready"}
        if self.store is not None:
            up = await self.store.ping(self.config.redis.timeout_ms / 1000)
            state["redis"] = "up" if up else "down"
        if self.embedder is not None:
            # The last observation (a request's call or the background probe's), never a guess: "unknown" until
            # the first call ends; the probe keeps it at most embeddings.IDLE_PROBE_S old.
            state["embeddings"] = self.embedder.state
            observed = self.embedder.observed_at()
            state["embeddings_observed_at"] = None if observed is None else _utc(observed)
        if "down" in state.values():
            state["status"] = "degraded"
        await self._send(send, exchange, 200, orjson.dumps(state), JSON)

    async def _metrics(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        await self._send(send, exchange, 200, generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST.encode())

    async def _models(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        principal = self.keys.authenticate(exchange.headers.get(b"authorization"))
        body = self._models_body if not principal.models else _models_body(sorted(principal.models))
        await self._send(send, exchange, 200, body, JSON)

    # -- completions --------------------------------------------------------------------------------------------------

    async def _chat(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        await self._complete("chat", scope, receive, send, exchange)

    async def _completion(self, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        await self._complete("completions", scope, receive, send, exchange)

    async def _complete(self, kind: Kind, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        self._in_flight += 1
        self._arriving += 1
        exchange.arriving = True
        try:
            await self._complete_inner(kind, scope, receive, send, exchange)
        finally:
            self._arrived(exchange)
            self._in_flight -= 1

    def _arrived(self, exchange: Exchange) -> None:
        """The request has gone upstream (or been answered): deferred work may run now."""
        if exchange.arriving:
            exchange.arriving = False
            self._arriving -= 1

    async def _complete_inner(self, kind: Kind, scope: Scope, receive: Receive, send: Send, exchange: Exchange) -> None:
        headers = exchange.headers
        principal = self.keys.authenticate(headers.get(b"authorization"))
        exchange.tenant = principal.tenant
        content_type = headers.get(b"content-type")
        if content_type is not None and content_type.partition(b";")[0].strip().lower() != JSON:
            raise GatewayError(
                415,
                f"The request body must be JSON (Content-Type: application/json), got Content-Type "
                f"{content_type.decode('latin-1')[:100]!r}.",
                code="unsupported_media_type",
            )
        raw = await self._read_body(headers, receive)
        exchange.body_read = True
        body = parse_json_body(raw)
        request = parse_chat(body) if kind == "chat" else parse_completion(body)
        if request.stream and scope.get("http_version") == "1.0":
            # A stream's length is not known in advance: HTTP/1.1's chunked encoding frames it, which an HTTP/1.0
            # client cannot read.
            raise GatewayError(
                400, "Streaming needs HTTP/1.1 (chunked transfer encoding); this request came over HTTP/1.0. Send it "
                "over HTTP/1.1, or without 'stream'.", param="stream",
            )  # fmt: skip
        model = self.config.models.get(request.model)
        if model is None or (principal.models and request.model not in principal.models):
            raise unknown_model(request.model, list(principal.models or self.config.models))
        exchange.model = request.model
        most = request.most_tokens
        if most is not None and most > principal.tokens_per_minute:
            raise _too_many_tokens(most, principal.tokens_per_minute, self.metrics)
        tier = self._choose_tier(request, model, headers)
        exchange.tier = tier

        keys: CacheKeys | None = None
        if self._cacheable(request, model, headers):
            prompt_version = (headers.get(self._prompt_version_header) or b"").decode("latin-1") or model.prompt_version
            keys = cache_keys(
                request, tenant=principal.tenant, alias=request.model, model_version=model.version,
                prompt_version=prompt_version, tier=tier,
            )  # fmt: skip

        exact = keys if keys and model.cache.exact else None
        cached, looked_up = await self._admit(principal, request, exact, exchange)
        if cached is not None and _can_answer(request, cached):
            exchange.cache = "hit"
            await self._send_cached(send, exchange, request, cached)
            return

        embedding: asyncio.Task[bytes] | None = None
        # An exact stage that overran means the gateway or Redis is saturated: do not add an embedding on top.
        overloaded = exact is not None and not looked_up
        semantic = keys is not None and model.cache.semantic.enabled and request.single_turn_text is not None
        window = self.config.embeddings.max_input_tokens
        if semantic and window is not None and request.single_turn_tokens_estimate > window:
            semantic = False  # longer than the embedding model reads: the endpoint would refuse it
            exchange.count_later(self._skipped["semantic", "too_long"])
        if semantic and self.embedder is not None and not self.embedder.available():
            semantic = False  # the embeddings endpoint failed a moment ago: skipping it costs nothing
            exchange.count_later(self._skipped["semantic", "embeddings"])
        if semantic and not overloaded and self._redis_ok():
            assert keys is not None and request.single_turn_text is not None
            looked_up = True
            found, embedding = await self._semantic_lookup(request.single_turn_text, keys, model, exchange)
            if found is not None and _can_answer(request, found):
                exchange.cache = "semantic"
                await self._send_cached(send, exchange, request, found)
                if exact is not None:
                    self._promote(exact.exact, found, model)
                return
        exchange.cache = "miss" if keys is not None and looked_up else "bypass"
        write_keys = keys if exchange.cache == "miss" else None
        await self._proxy(request, model, tier, principal, write_keys, embedding, receive, send, exchange)

    async def _read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        limit = self.config.server.max_body_bytes
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        message = await receive()  # a body that came with the headers is here at once: no timer on that path
        if message["type"] == "http.disconnect":
            raise ClientGone
        first: bytes = message.get("body", b"")
        if len(first) > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return first
        timeout_s = self.config.server.request_read_timeout_s
        chunks = [first]
        size = len(first)
        try:
            async with asyncio.timeout(timeout_s):
                while message.get("more_body", False):
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(limit)
                    chunks.append(chunk)
        except TimeoutError:
            raise GatewayError(
                408,
                f"The request body did not arrive within {timeout_s:g} s (server.request_read_timeout_s).",
                code="request_timeout",
                headers=[CONNECTION_CLOSE],
            ) from None
        return b"".join(chunks)

    def _choose_tier(self, request: ParsedRequest, model: ModelConfig, headers: dict[bytes, bytes]) -> str:
        override = headers.get(self._tier_header)
        if override is not None:
            tier = override.decode("latin-1").strip()
            allowed = self.config.tiers_of(request.model)
            if tier not in allowed:
                raise GatewayError(
                    400,
                    f"Header {self.config.routing.tier_header}: '{tier}' is not a tier of model '{request.model}'. "
                    f"Allowed: {', '.join(sorted(allowed))}.",
                    param=self.config.routing.tier_header,
                )
            return tier
        if model.complexity:
            text = request.last_user_text.lower()
            tokens = request.prompt_tokens_estimate
            for rule, keywords in zip(model.complexity, self._keywords[request.model], strict=True):
                if (
                    (rule.min_prompt_tokens is not None and tokens >= rule.min_prompt_tokens)
                    or (rule.min_turns is not None and request.turns >= rule.min_turns)
                    or any(k in text for k in keywords)
                ):
                    return rule.tier
        return model.tier

    def _cacheable(self, request: ParsedRequest, model: ModelConfig, headers: dict[bytes, bytes]) -> bool:
        cache = model.cache
        if self.store is None or cache.policy == "never" or not (cache.exact or cache.semantic.enabled):
            return False
        control = headers.get(b"cache-control")
        if control is not None and (b"no-store" in control or b"no-cache" in control):
            return False
        logprobs = request.body.get("logprobs")
        if logprobs is not None and logprobs is not False:  # not `in (None, False)`: 0 == False
            # A stream's entry keeps no logprobs (sse.assemble), and a replay would have none to give. The legacy
            # completions' logprobs is a count, and 0 still asks for the sampled tokens' logprobs.
            return False
        if cache.policy == "always" or request.temperature == 0:
            return True
        return cache.allow_request_opt_in and headers.get(OPT_IN_HEADER, b"").lower() == b"true"

    def _redis_ok(self) -> bool:
        return self.store is not None and self.store.available()

    async def _admit(
        self, principal: Principal, request: ParsedRequest, exact: CacheKeys | None, exchange: Exchange
    ) -> tuple[bytes | None, bool]:
        """Count the request against its key's limits and look up the exact cache.

        Most requests are admitted from this replica's lease of the key's shared limit (limits.py) and need no Redis
        round trip at all unless they are cacheable; the others reserve slots and look up the exact cache in one
        round trip. Returns (cached answer, whether the exact cache was consulted).
        """
        tokens = request.prompt_tokens_estimate
        store = self.store
        limiter = self.shared_limits
        if store is None or limiter is None or not store.available():
            self._admit_locally(principal, tokens)
            return None, False
        leased = limiter.lease(principal, tokens)
        if leased and exact is None:
            return None, False
        if leased and exact is not None and store.exact_absent(exact.exact):
            # Most lookups are misses, and the miss filter answers them here: no round trip, so nothing is learned of
            # Redis's health and no lookup latency is observed.
            return None, True
        cached: bytes | None = None
        refused: str | None = None
        answered = False
        started = time.perf_counter()
        budget_s = self.config.budgets.exact_cache_ms / 1000
        try:
            if leased:
                assert exact is not None
                cached = await store.get_exact(exact.exact, budget_s)  # applies the budget itself, at less cost
            else:
                async with asyncio.timeout(budget_s):
                    refused, cached = await limiter.admit(principal, tokens, exact.exact if exact else None)
            answered = True
            store.succeeded()
        except TimeoutError:
            # An overrun skips this stage only: under load the event loop itself can lag past a few ms, and
            # treating that as an outage would turn every hit into upstream traffic for retry_after_ms.
            exchange.count_later(self._skipped["exact", "budget"])
        except (RedisError, OSError) as exc:
            store.failed("admit", exc)
        if exact is not None and answered:
            exchange.observe_later(self._exact_lookup_seconds, time.perf_counter() - started)
        if not leased and not answered:
            self._admit_locally(principal, tokens)
        elif refused == "requests":
            raise _rate_limited("requests", principal.requests_per_minute, self.metrics)
        elif refused == "tokens":
            raise _rate_limited("tokens", principal.tokens_per_minute, self.metrics)
        return cached, answered and exact is not None

    def _admit_locally(self, principal: Principal, tokens: int) -> None:
        usage = self.local_limits.admit(principal.key_id, tokens)
        if usage.requests > principal.requests_per_minute:
            raise _rate_limited("requests", principal.requests_per_minute, self.metrics)
        if usage.tokens_before >= principal.tokens_per_minute:
            raise _rate_limited("tokens", principal.tokens_per_minute, self.metrics)

    async def _semantic_lookup(
        self, text: str, keys: CacheKeys, model: ModelConfig, exchange: Exchange
    ) -> tuple[bytes | None, asyncio.Task[bytes] | None]:
        """Embed and search within the budget. The embedding task outlives an overrun so the write-back can use it."""
        assert self.embedder is not None and self.store is not None
        embedding = asyncio.create_task(self.embedder.embed(text))
        embedding.add_done_callback(_consume_exception)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.config.budgets.semantic_cache_ms / 1000):
                vector = await asyncio.shield(embedding)
                found = await self.store.nearest(vector, keys.tenant_tag, keys.partition)
            self.store.succeeded()
        except TimeoutError:
            self.metrics.cache_skipped.labels("semantic", "budget").inc()
            return None, embedding
        except EmbeddingError as exc:
            reason = "too_long" if isinstance(exc, InputTooLong) else "embeddings"
            self.metrics.cache_skipped.labels("semantic", reason).inc()
            exchange.detail["semantic_skipped"] = str(exc)
            return None, None
        except (RedisError, OSError) as exc:
            self.store.failed("semantic", exc)
            return None, embedding
        exchange.observe_later(self._semantic_lookup_seconds, time.perf_counter() - started)
        if found is None:
            return None, embedding
        distance, answer = found
        exchange.detail["semantic_distance"] = round(distance, 4)
        return (answer if distance <= model.cache.semantic.max_distance else None), embedding

    async def _send_cached(self, send: Send, exchange: Exchange, request: ParsedRequest, answer: bytes) -> None:
        exchange.observe_later(self._model_metrics[request.model, "none"][0], time.perf_counter() - exchange.started)
        if not request.stream:
            await self._send(send, exchange, 200, answer, JSON)
            return
        body = sse.replay(request.kind, orjson.loads(answer), request.include_usage)
        await self._send(send, exchange, 200, body, SSE_HEADERS[0][1], SSE_HEADERS[1:])

    # -- upstream -----------------------------------------------------------------------------------------------------

    async def _proxy(
        self,
        request: ParsedRequest,
        model: ModelConfig,
        tier: str,
        principal: Principal,
        keys: CacheKeys | None,
        embedding: asyncio.Task[bytes] | None,
        receive: Receive,
        send: Send,
        exchange: Exchange,
    ) -> None:
        """Run the upstream exchange; it is cancelled (closing the upstream request) if the client leaves first.

        The exchange runs in the request's own task. On the gateway's own server the connection's loss cancels it
        (`server.on_lost`); under another ASGI server a small watcher task waits for `http.disconnect` and does.
        """
        task = asyncio.current_task()
        assert task is not None
        cut_short = False

        def lost() -> None:
            nonlocal cut_short
            if not exchange.finished:  # only an unfinished response is cut short
                cut_short = True
                task.cancel()

        watcher = None
        if not on_lost(send, lost):
            watcher = asyncio.get_running_loop().create_task(_cancel_on_disconnect(receive, task, exchange))
        try:
            await self._relay(request, model, tier, principal, keys, embedding, send, exchange)
        except asyncio.CancelledError:
            if watcher is not None:
                cut_short = watcher.done() and not watcher.cancelled() and watcher.result()
            if not cut_short:
                raise
            task.uncancel()
            self.metrics.client_disconnects.inc()
            exchange.status = 499
            exchange.detail["disconnected"] = True
        finally:
            if watcher is not None:
                watcher.cancel()
            else:
                on_lost(send, None)
            if exchange.upstream is not None:
                self.upstreams[exchange.upstream].inflight -= 1  # counted by open_upstream, to the end of the stream

    async def _relay(
        self,
        request: ParsedRequest,
        model: ModelConfig,
        tier: str,
        principal: Principal,
        keys: CacheKeys | None,
        embedding: asyncio.Task[bytes] | None,
        send: Send,
        exchange: Exchange,
    ) -> None:
        assert self.http is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.budgets.request_ms / 1000 - (time.perf_counter() - exchange.started)
        path = "/chat/completions" if request.kind == "chat" else "/completions"
        payloads: dict[str | None, bytes] = {}

        def payload(upstream: Upstream) -> bytes:
            name = upstream.model
            if name not in payloads:
                payloads[name] = orjson.dumps({**request.body, "model": name or request.model})
            return payloads[name]

        trace = None if exchange.span is None or self.tracer is None else self.tracer.upstream_headers(exchange.span)
        self._arrived(exchange)
        route = self.routes[tier]
        resident = principal.resident or model.residency == "local"
        upstreams = route.pick(resident)
        exchange.spilled = upstreams is route.spilled
        if not upstreams:
            raise _stays_local(tier, self.config.routing.tier_header)
        first_out_at: float | None = None

        def on_head(response: Response) -> None:
            """A stream's head, sent from the upstream connection's read as soon as an upstream's 200 arrives: the
            client takes it in while the upstream computes the first event, as it would from the upstream itself
            (vLLM's server sends its head at once). A later failure before the first event still fails over, behind
            this head; if no upstream answers, the stream ends with the error event (`_end_stream`)."""
            if (
                not exchange.response_started
                and b"text/event-stream" in response.headers.get(b"content-type", b"")
                and open_stream(send, _stream_headers(exchange))
            ):
                exchange.status = 200
                exchange.response_started = True

        def on_first(data: bytes) -> bool:
            """A stream's first event (and its head, unless `on_head` sent it), sent from the upstream connection's
            read (`HttpClient.request`)."""
            nonlocal first_out_at
            if data.startswith(ERROR_EVENT):  # not an answer: `open_upstream` fails over from it
                return False
            if exchange.response_started:
                writer = chunk_writer(send)
                if writer is None:
                    return False
                writer.write(data)
            elif start_stream(send, _stream_headers(exchange), data):
                exchange.status = 200
                exchange.response_started = True
            else:
                return False
            first_out_at = time.perf_counter()
            return True

        sent = time.perf_counter()
        try:
            opened = await open_upstream(
                self.http, upstreams, path, payload,
                stream=request.stream, budgets=self.config.budgets, deadline=deadline, tier=tier,
                model=request.model, extra_headers=trace, on_head=on_head, on_first=on_first,
            )  # fmt: skip
        except GatewayError as exc:
            if resident and route.remote:
                exc.message += " This request stays in this tier (residency: local): it is never sent to the hub."
            raise  # `_http` answers it: as the stream's last event if an upstream's head went out (`on_head`)
        exchange.upstream = opened.upstream.name
        exchange.upstream_kind = opened.upstream.kind
        exchange.observe_later(opened.upstream.latency, opened.latency_s)
        if opened.status >= 400:
            # The upstream refused the request itself (4xx): pass it on, in OpenAI's shape, and do not fail over.
            exchange.cache = "bypass" if keys is None else exchange.cache
            body = _as_openai_error(opened.first, opened.status)
            if exchange.response_started:  # behind the head of an upstream that failed before its first event
                detail = f"HTTP {opened.status} from {opened.upstream.name}"
                await self._end_stream(send, exchange, opened.status, body, detail)
                return
            await self._send(send, exchange, opened.status, body, JSON, retry_headers(opened.response.headers))
            return
        if not request.stream:
            ttft = self._model_metrics[request.model, exchange.upstream_kind][0]
            exchange.observe_later(ttft, time.perf_counter() - exchange.started)
            await self._send(send, exchange, 200, opened.first, JSON)
            self._after(principal, request, model, keys, embedding, opened.first, streamed=False)
            return
        raw = await self._stream(opened, request, send, exchange, deadline, sent, first_out_at)
        if raw is not None:
            self._after(principal, request, model, keys, embedding, raw, streamed=True)

    async def _stream(
        self,
        opened: Opened,
        request: ParsedRequest,
        send: Send,
        exchange: Exchange,
        deadline: float,
        sent: float,
        first_out_at: float | None,
    ) -> bytes | None:
        """Relay the SSE body chunk by chunk as it arrives. Returns the whole body if it ended with [DONE].

        `sent`: when the request went to the tier's upstreams (the start of the upstream's TTFT). And when the
        response's first bytes went out from the upstream's read (`on_first` in `_relay`; the head with them, or
        before them from the read of the upstream's head, `on_head`), if they did: `first_out_at`."""
        response = opened.response
        early = response.sent_early
        # Arrival times only, on the relay path: the histograms are filled in the deferred batch after the response.
        arrivals = [first_out_at if first_out_at is not None else time.perf_counter()]
        chunks = [opened.first]
        error: str | None = None
        try:
            if not exchange.response_started:
                exchange.status = 200
                exchange.response_started = True
                await send({"type": "http.response.start", "status": 200, "headers": _stream_headers(exchange)})
            chunk = opened.first[early:] if early else opened.first
            if not response.at_eof():
                # The first chunk is in hand and a fresh response's write does not wait: it goes out before the
                # budget's timer is armed, which on a cold path costs tens of microseconds.
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                chunk = b""
            writer = None if response.at_eof() else chunk_writer(send)
            async with asyncio.timeout_at(deadline):
                if writer is not None:
                    # From here the upstream connection writes each read straight to the client (no task step or
                    # ASGI message per chunk); this task waits for the end, or for the client to drain a full buffer.

                    def sink(data: bytes) -> bool:
                        chunks.append(data)
                        arrivals.append(time.perf_counter())
                        return writer.write(data)

                    response.pipe(sink)
                    while await response.piped() == "paused":
                        await writer.drain()
                        response.resume()
                while True:
                    if not chunk:
                        chunk = await response.readany()
                        if not chunk:
                            break
                        chunks.append(chunk)
                        arrivals.append(time.perf_counter())
                    # When the upstream has already ended its stream, its last chunk also ends the response.
                    if response.at_eof() and _ends_with_done(chunks):
                        exchange.finished = True
                        await send({"type": "http.response.body", "body": chunk})
                        return b"".join(chunks)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    chunk = b""
        except TimeoutError:
            error = "The request budget ran out while the upstream was still streaming."
            opened.upstream.error("timeout_mid_stream")
        except OSError as exc:  # HttpClientError is a ConnectionError
            error = f"The upstream stream broke: {type(exc).__name__}."
            opened.upstream.error("broken_stream")
        finally:
            response.close()
            ended = time.perf_counter()
            metrics = self._model_metrics[request.model, exchange.upstream_kind]
            upstream_ttft = self.metrics.upstream_ttft
            started = exchange.started
            self._defer(
                lambda: _observe_stream(*metrics, upstream_ttft, opened, started, sent, chunks, arrivals, ended)
            )
        if error is None and not _ends_with_done(chunks):
            error = "The upstream ended the stream without [DONE]."
            opened.upstream.error("truncated_stream")
        if error is not None:
            # The answer had started: the request is counted as served (200), its error in the access log's detail.
            body = error_body(error, "server_error", None, "upstream_stream")
            await self._end_stream(send, exchange, exchange.status, body, error)
            return None
        exchange.finished = True
        await send({"type": "http.response.body", "body": b""})
        return b"".join(chunks)

    async def _end_stream(self, send: Send, exchange: Exchange, status: int, error: bytes, detail: str) -> None:
        """End a started stream with an error event (`error`, OpenAI's error object), which the official clients raise
        as an APIError: the status line has gone out. `status` is what the request is counted as (metrics, access log,
        trace): the failure's own status when no answer had started (a 503 or 504 behind an upstream's head), so that
        the error rate and its alert see an outage whatever the status line said."""
        exchange.status = status
        exchange.finished = True
        exchange.detail["stream_error"] = detail
        if b"\n" in error:  # an upstream's pretty-printed error object: one event's data is one line
            try:
                error = orjson.dumps(orjson.loads(error))
            except orjson.JSONDecodeError:
                error = error_body(detail, "server_error")
        await send({"type": "http.response.body", "body": b"data: " + error + b"\n\n"})

    # -- after the response -------------------------------------------------------------------------------------------

    def _after(
        self,
        principal: Principal,
        request: ParsedRequest,
        model: ModelConfig,
        keys: CacheKeys | None,
        embedding: asyncio.Task[bytes] | None,
        raw: bytes,
        streamed: bool,
    ) -> None:
        self._defer_task(lambda: self._write_back(principal, request, model, keys, embedding, raw, streamed))

    def _promote(self, exact_key: str, answer: bytes, model: ModelConfig) -> None:
        """Store a semantic hit's answer under the request's own exact key, after the response.

        The next identical request is then an exact hit (one Redis GET) instead of another embedding and KNN search."""

        async def write() -> None:
            assert self.store is not None
            try:
                await self.store.write(exact_key, answer, model.cache.ttl_s, None)
                self.metrics.cache_writes.labels("exact", "from_semantic").inc()
            except (RedisError, OSError) as exc:
                self.store.failed("write", exc)

        self._defer_task(write)

    def _defer_task(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start `make()` as a background task with the deferred batch (after the response); shutdown awaits it."""

        def start() -> None:
            task = asyncio.create_task(make())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

        self._defer(start)

    async def _write_back(
        self,
        principal: Principal,
        request: ParsedRequest,
        model: ModelConfig,
        keys: CacheKeys | None,
        embedding: asyncio.Task[bytes] | None,
        raw: bytes,
        streamed: bool,
    ) -> None:
        """Token accounting and cache writes for a complete answer. Nothing here can reach the client."""
        try:
            if keys is None and streamed and (reported := sse.reported_completion_tokens(raw)) is not None:
                # Nothing to cache: the usage the upstream reported is all that is needed, no need to rebuild the
                # whole answer from its events.
                response, tokens = None, reported
            else:
                response = sse.assemble(request.kind, raw) if streamed else _complete_body(raw)
                tokens = _output_tokens(response)
            store = self.store
            if store is None or self.shared_limits is None or not store.available():
                self.local_limits.charge_tokens(principal.key_id, tokens)
                return
            self.shared_limits.charge(principal.key_id, tokens)
            value = (
                None if response is None or not _finished(response) else (orjson.dumps(response) if streamed else raw)
            )
            try:
                if keys is None:
                    return
                if value is None:
                    self.metrics.cache_writes.labels("exact", "incomplete").inc()
                    return
                semantic = None
                if embedding is not None:
                    try:
                        vector = await embedding
                        ttl = model.cache.semantic.ttl_s
                        semantic = (vector, keys.tenant_tag, keys.partition, ttl)
                    except EmbeddingError:
                        self.metrics.cache_writes.labels("semantic", "no_embedding").inc()
                await store.write(keys.exact, value, model.cache.ttl_s if model.cache.exact else None, semantic)
                self.metrics.cache_writes.labels("exact", "stored").inc()
                if semantic is not None:
                    self.metrics.cache_writes.labels("semantic", "stored").inc()
            except (RedisError, OSError) as exc:
                store.failed("write", exc)
        except Exception:
            logger.exception("cache write-back failed")


def _stream_headers(exchange: Exchange) -> list[tuple[bytes, bytes]]:
    return [
        *SSE_HEADERS,
        (b"x-request-id", exchange.request_id.encode("latin-1")),
        (b"x-inferstack-cache", exchange.cache.encode()),
    ]


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any], exchange: Exchange) -> bool:
    """Cancel `task` when the client disconnects before its response is complete. True if it did."""
    while (await receive())["type"] != "http.disconnect":
        pass
    # uvicorn reports a disconnect after a complete response as well: only an unfinished response was cut short.
    if exchange.finished:
        return False
    task.cancel()
    return True


def _observe_stream(
    ttft: Any,
    itl: Any,
    upstream_ttft: Any,
    opened: Opened,
    started: float,
    sent: float,
    chunks: list[bytes],
    arrivals: list[float],
    ended: float,
) -> None:
    """A relayed stream's histograms and its upstream's TTFT average, after the response.

    TTFT is to the first event with output, not the first byte: Triton's OpenAI frontend opens every stream with a
    role-only event before the model has run. `ttft` is from the request's arrival (the client's view), `upstream_ttft`
    from `sent` (the request to the tier's upstreams, failover included), and the average (the spillover's signal)
    from the request to this upstream. A stream that ended with no output counts, in the average, as having taken
    until its end: a server that opens streams and then stalls is slow, not fast."""
    index = sse.first_output(chunks)
    if index is not None:
        ttft.observe(arrivals[index] - started)
        upstream_ttft.labels(opened.upstream.name).observe(arrivals[index] - sent)
    first = ended if index is None else arrivals[index]
    opened.upstream.observe_ttft(opened.first_s + first - arrivals[0])
    for previous, now in itertools.pairwise(arrivals):
        itl.observe(now - previous)


def _utc(timestamp: float) -> str:
    """RFC 3339 in UTC, to the millisecond: 2025-01-31T12:00:00.123Z."""
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _consume_exception(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _access_log(exchange: Exchange, elapsed: float) -> None:
    access.info(
        "request",
        extra={
            "request_id": exchange.request_id,
            "route": exchange.route,
            "status": exchange.status,
            "cache": exchange.cache,
            "model": exchange.model,
            "tier": exchange.tier,
            "upstream": exchange.upstream,
            "upstream_kind": exchange.upstream_kind,
            "spilled": exchange.spilled,
            "tenant": exchange.tenant,
            "duration_ms": round(elapsed * 1000, 3),
            **exchange.detail,
        },
    )


def _ends_with_done(chunks: list[bytes]) -> bool:
    tail = chunks[-1].rstrip()
    if len(tail) >= len(DONE_LINE) or len(chunks) == 1:
        return tail.endswith(DONE_LINE)
    return b"".join(chunks).rstrip().endswith(DONE_LINE)  # [DONE] split across chunks


def _models_body(aliases: list[str]) -> bytes:
    return orjson.dumps(
        {
            "object": "list",
            "data": [{"id": a, "object": "model", "created": 0, "owned_by": "inferstack"} for a in aliases],
        }
    )


def _can_answer(request: ParsedRequest, entry: bytes) -> bool:
    """Whether a stored answer can answer `request`. One stored from a stream that did not ask for usage has none, so
    it cannot answer a request that needs it (every non-streamed answer; a stream with include_usage): that request
    goes upstream, and its own answer, with usage, replaces the entry."""
    return (request.stream and not request.include_usage) or USAGE in entry


def _unread_body(exchange: Exchange, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether an error answered now leaves part of the request's body unread, and `headers` do not close already.

    Such an answer closes the connection (RFC 9110 §15.5.14 for 413, §10.1.1 for any final status sent before the
    content is read: the server SHOULD say whether it will close or go on reading). Kept open, the rest of the body
    was read and dropped for as long as the client went on sending it: a chunked body past the limit held its
    connection for good, and a client that had sent `Expect: 100-continue` and so never sent the body had its next
    request on the connection taken for that body, and never answered. The protocol (server.py) then closes in
    stages, so that the client can still read the answer (RFC 9112 §9.6)."""
    if exchange.body_read or CONNECTION_CLOSE in headers:
        return False
    fields = exchange.headers
    return b"transfer-encoding" in fields or fields.get(b"content-length", b"0").lstrip(b"0") != b""


def _one_authorization(headers: list[tuple[bytes, bytes]]) -> None:
    """Refuse a request with more than one Authorization header: a proxy in front that reads the first and the gateway,
    which would read the last, must never disagree on who is asking."""
    if sum(name == b"authorization" for name, _ in headers) > 1:
        raise GatewayError(
            401,
            "The request has more than one Authorization header. Send exactly one: 'Authorization: Bearer <key>'.",
            code="invalid_api_key",
            headers=[(b"www-authenticate", b"Bearer")],
        )


def _stays_local(tier: str, header: str) -> GatewayError:
    # Config validation refuses a residency-local key or model whose tiers have no local upstream, so only an explicit
    # tier header can get here.
    return GatewayError(
        400,
        f"Tier '{tier}' is served only by the hub, and this request must stay in this tier (residency: local). "
        f"Choose another tier in {header}, or none.",
        param=header,
        code="residency_local",
    )


def _too_large(limit: int) -> GatewayError:
    return GatewayError(413, f"The request body is larger than the limit of {limit} bytes.", code="request_too_large")


def _rate_limited(limit: str, value: int, metrics: Metrics) -> GatewayError:
    metrics.rate_limited.labels(limit).inc()
    wait = retry_after_s()
    return GatewayError(
        429,
        f"Rate limit reached: {value} {limit} per minute for this API key. Retry after {wait} s.",
        type="rate_limit_error" if limit == "requests" else "tokens",
        code="rate_limit_exceeded",
        headers=[(b"retry-after", str(wait).encode())],
    )


def _too_many_tokens(most: int, limit: int, metrics: Metrics) -> GatewayError:
    # OpenAI answers a request that could never fit its key's limit with 429 "Request too large", without a
    # Retry-After: waiting does not help, a smaller n or max_tokens does.
    metrics.rate_limited.labels("tokens").inc()
    return GatewayError(
        429,
        f"Request too large: with its n and max_tokens it may use {most} tokens, over this API key's limit of "
        f"{limit} tokens per minute. Reduce n or max_tokens.",
        type="tokens",
        code="rate_limit_exceeded",
    )


def _as_openai_error(body: bytes, status: int) -> bytes:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        return body
    message = parsed.get("message") if isinstance(parsed, dict) else None
    text = message if isinstance(message, str) else body[:500].decode("utf-8", "replace")
    return error_body(f"The upstream refused the request (HTTP {status}): {text}", "invalid_request_error")


def _complete_body(raw: bytes) -> dict[str, Any] | None:
    """A non-streamed answer worth caching: JSON with choices, each finished."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    if not all(
        isinstance(c, dict) and c.get("finish_reason") and (isinstance(c.get("message"), dict) or "text" in c)
        for c in choices
    ):
        return None
    return body


def _finished(response: dict[str, Any]) -> bool:
    """Whether every choice of a complete answer (_complete_body, sse.assemble) ended as the model finished it.

    Any other finish_reason is not cached: vLLM ends a request it aborted or that failed with "abort" or "error" (its
    FINISH_REASON_STRINGS) in a 200 answer, and OpenAI's "content_filter" omits content. The reasons OpenAI lists
    (API reference, chat completion object: choices[].finish_reason) are allowed but that one; an unknown one costs a
    miss, never a wrong answer."""
    return all(choice.get("finish_reason") in FINISHED for choice in response["choices"])


def _output_tokens(response: dict[str, Any] | None) -> int:
    if response is None:
        return 0
    usage = response.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return int(usage["completion_tokens"])
    text = 0
    for choice in response.get("choices") or ():
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else choice.get("text")
        text += len(content) if isinstance(content, str) else 0
    return text // 4
