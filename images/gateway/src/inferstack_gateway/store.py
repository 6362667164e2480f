"""Everything the gateway keeps in Redis: exact entries, the semantic index and the rate-limit counters.

Only commands that Redis 8, Redis Stack, Valkey (with valkey-search) and ElastiCache all speak are used; the vector
index has VECTOR and TAG fields only, no TEXT. Any Redis failure makes the gateway skip Redis for
`redis.retry_after_ms` and serve without it: no client ever sees a Redis error.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from inferstack_gateway.config import EmbeddingsConfig, RedisConfig
from inferstack_gateway.logs import logger
from inferstack_gateway.metrics import Metrics
from inferstack_gateway.resp import FastReads

WINDOW_S = 60


@dataclass(slots=True)
class Usage:
    """Counts in the current one-minute window after this request was counted."""

    requests: int
    tokens_before: int
    """Tokens charged before this request's prompt estimate was added."""


class RedisStore:
    def __init__(self, config: RedisConfig, metrics: Metrics, embeddings: EmbeddingsConfig) -> None:
        assert config.url is not None
        self.prefix = config.key_prefix
        self.exact_prefix = f"{config.key_prefix}x:"
        """Every exact entry's key is this and the request's exact digest (the miss filter tracks this prefix)."""
        # One index per embedding model and size: vectors of two models are not comparable (a distance between them
        # means nothing, so an old entry would answer whatever question lay near it), and an index's DIM is fixed
        # (a vector of another size is refused by every search). The documents' prefix is not under an older index's.
        scope = hashlib.sha256(f"{embeddings.model}\n{embeddings.dimensions}".encode()).hexdigest()[:12]
        self.index = f"{config.key_prefix}semantic:{scope}"
        self.documents = f"{config.key_prefix}sem:{scope}:"
        self.dimensions = embeddings.dimensions
        self._metrics = metrics
        self._retry_after_s = config.retry_after_ms / 1000
        self._down_until = 0.0
        self._down = False
        self._index_ready = False
        timeout = config.timeout_ms / 1000
        # No client-side retries: a failed round trip is skipped, not repeated inside the request's budget.
        self.client = aioredis.Redis.from_url(
            config.url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=config.max_connections,
            retry=Retry(NoBackoff(), 0),
            protocol=2,
            health_check_interval=0,
        )
        # The exact lookup's GETs, pipelined on one connection (resp.py); None for a URL with options only redis-py
        # takes, and then redis-py reads them too.
        self.reads = FastReads.from_url(
            config.url,
            timeout,
            on_timeout=lambda exc: self.failed("get", exc),
            near_bytes=config.near_cache_mb << 20,
            known_prefix=self.exact_prefix.encode(),
            known_keys=config.miss_filter_keys,
        )
        metrics.redis_up.set(1)

    # -- health ---------------------------------------------------------------------------------------------------

    def available(self) -> bool:
        return not self._down or time.monotonic() >= self._down_until

    def failed(self, op: str, exc: BaseException) -> None:
        self._metrics.redis_errors.labels(op).inc()
        self._down_until = time.monotonic() + self._retry_after_s
        if not self._down:
            self._down = True
            self._metrics.redis_up.set(0)
            # Logged once per outage; the counter above counts every failure.
            logger.warning(
                "redis unavailable, serving without cache and with per-replica rate limits",
                extra={"op": op, "error": f"{type(exc).__name__}: {exc}"},
            )

    def succeeded(self) -> None:
        if self._down:
            self._down = False
            self._metrics.redis_up.set(1)
            logger.info("redis available again")

    async def close(self) -> None:
        if self.reads is not None:
            self.reads.close()
        await self.client.aclose()

    async def ping(self, timeout_s: float) -> bool:
        """Whether Redis answers a PING within `timeout_s`; a failure starts an outage window as any other does."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.client.ping()
        except (RedisError, OSError, TimeoutError) as exc:
            self.failed("ping", exc)
            return False
        self.succeeded()
        return True

    # -- rate-limit counters (see limits.py) and the exact lookup -------------------------------------------------

    async def reserve(
        self, key_id: str, window: int, requests: int, tokens: int, exact_key: str | None
    ) -> tuple[int, int, bytes | None]:
        """Add `requests` request slots and `tokens` tokens to a key's counters in `window`, in one round trip with
        the exact lookup. Returns (request count, token count, cached answer) after the increments."""
        requests_key = f"{self.prefix}rl:{key_id}:{window}:r"
        tokens_key = f"{self.prefix}rl:{key_id}:{window}:t"
        pipe = self.client.pipeline(transaction=False)
        pipe.incrby(requests_key, requests)
        pipe.expire(requests_key, 2 * WINDOW_S)
        pipe.incrby(tokens_key, tokens)
        pipe.expire(tokens_key, 2 * WINDOW_S)
        if exact_key is not None:
            pipe.get(f"{self.exact_prefix}{exact_key}")
        result = await pipe.execute()
        return int(result[0]), int(result[2]), (result[4] if exact_key is not None else None)

    async def add_tokens(self, charges: list[tuple[str, int, int]]) -> list[int]:
        """Add tokens to several keys' counters: (key id, window, tokens) each. Returns the new totals."""
        pipe = self.client.pipeline(transaction=False)
        for key_id, window, tokens in charges:
            tokens_key = f"{self.prefix}rl:{key_id}:{window}:t"
            pipe.incrby(tokens_key, tokens)
            pipe.expire(tokens_key, 2 * WINDOW_S)
        result = await pipe.execute()
        return [int(total) for total in result[::2]]

    def exact_absent(self, exact_key: str) -> bool:
        """Whether the exact lookup's miss filter knows that Redis does not hold this key: a miss with no round trip
        (resp.FastReads.surely_absent), answered without a coroutine."""
        reads = self.reads
        return reads is not None and reads.surely_absent(f"{self.exact_prefix}{exact_key}".encode())

    async def get_exact(self, exact_key: str, budget_s: float) -> bytes | None:
        """The exact lookup: one GET, the only Redis command on a leased request's path (pipelined, resp.py).

        Raises the builtin TimeoutError when `budget_s` (the exact stage's budget) runs out first. It used to carry
        the key's pending token charges in the same pipeline; a pipeline of three costs redis-py about 1.5 times a
        single command in this position (cold, between requests), so the charges now go with the batched flush
        (limits.FLUSH_S) instead."""
        key = f"{self.exact_prefix}{exact_key}"
        value: bytes | str | None
        if self.reads is not None:
            value = await self.reads.get(key.encode(), budget_s)
        else:
            async with asyncio.timeout(budget_s):
                value = await self.client.get(key)
        return value if isinstance(value, bytes) else None

    # -- writes -------------------------------------------------------------------------------------------------------

    async def write(
        self,
        exact_key: str,
        value: bytes,
        ttl_s: int | None,
        semantic: tuple[bytes, str, str, int] | None,
    ) -> None:
        """Store an answer under its exact key (ttl_s) and/or in the semantic index (vector, tenant, partition, ttl)."""
        pipe = self.client.pipeline(transaction=False)
        if ttl_s is not None:
            key = f"{self.exact_prefix}{exact_key}"
            if self.reads is not None:
                self.reads.expect(key.encode())  # Redis's push for this write comes a round trip after it
            pipe.set(key, value, ex=ttl_s)
        if semantic is not None:
            vector, tenant_tag, partition, semantic_ttl_s = semantic
            doc = f"{self.documents}{exact_key}"
            pipe.hset(doc, mapping={"vec": vector, "tenant": tenant_tag, "part": partition, "resp": value})
            pipe.expire(doc, semantic_ttl_s)
        await pipe.execute()

    # -- semantic index ----------------------------------------------------------------------------------------------

    async def ensure_index(self) -> None:
        if self._index_ready:
            return
        try:
            await self.client.execute_command(  # type: ignore[no-untyped-call]
                "FT.CREATE", self.index, "ON", "HASH", "PREFIX", "1", self.documents,
                "SCHEMA",
                "vec", "VECTOR", "HNSW", "6",
                "TYPE", "FLOAT32", "DIM", str(self.dimensions), "DISTANCE_METRIC", "COSINE",
                "tenant", "TAG",
                "part", "TAG",
            )  # fmt: skip
        except ResponseError as exc:
            if "already exists" not in str(exc).lower():
                raise
        self._index_ready = True

    async def nearest(self, vector: bytes, tenant_tag: str, partition: str) -> tuple[float, bytes] | None:
        """The closest stored answer in this tenant's partition: (cosine distance, response), or None."""
        await self.ensure_index()
        # Tag values are hex digests, so they need no escaping; the tenant filter is redundant with the
        # partition (which hashes the tenant) and is kept as a second, independent guard.
        query = f"(@tenant:{{{tenant_tag}}} @part:{{{partition}}})=>[KNN 1 @vec $vec AS dist]"
        try:
            reply = await self.client.execute_command(  # type: ignore[no-untyped-call]
                "FT.SEARCH", self.index, query, "PARAMS", "2", "vec", vector,
                "RETURN", "2", "dist", "resp", "LIMIT", "0", "1", "DIALECT", "2",
            )  # fmt: skip
        except ResponseError as exc:
            if "no such index" not in str(exc).lower():
                raise
            # Redis restarted empty or was flushed: recreate the index; this lookup is a plain miss.
            self._index_ready = False
            await self.ensure_index()
            return None
        if not reply or reply[0] == 0 or len(reply) < 3:
            return None
        fields = reply[2]
        found = {fields[i]: fields[i + 1] for i in range(0, len(fields) - 1, 2)}
        if b"dist" not in found or b"resp" not in found:
            return None
        return float(found[b"dist"]), found[b"resp"]


class LocalLimiter:
    """Per-replica fixed-window counters, used while Redis is down."""

    def __init__(self) -> None:
        self._window = -1
        self._counts: dict[str, list[int]] = {}

    def admit(self, key_id: str, prompt_tokens: int) -> Usage:
        window = int(time.time()) // WINDOW_S
        if window != self._window:
            self._window, self._counts = window, {}
        counts = self._counts.setdefault(key_id, [0, 0])
        counts[0] += 1
        counts[1] += prompt_tokens
        return Usage(requests=counts[0], tokens_before=counts[1] - prompt_tokens)

    def charge_tokens(self, key_id: str, tokens: int) -> None:
        if key_id in self._counts:
            self._counts[key_id][1] += tokens


def retry_after_s() -> int:
    return max(1, math.ceil(WINDOW_S - time.time() % WINDOW_S))


async def close_quietly(store: RedisStore | None) -> None:
    if store is not None:
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(store.close(), 1)
