"""Per-key rate limits shared through Redis, without a Redis round trip on most requests.

Each key has two fixed one-minute windows in Redis: a request counter and a token counter (store.py). A replica
does not ask Redis before every request. It reserves request *slots* in batches (a lease) with one atomic INCRBY,
admits requests from its lease locally, and tops the lease up in the background before it runs out. Tokens
(prompt estimates at admission, completion tokens after the answer) are added to Redis in batches every
`FLUSH_S`, and every reply from Redis refreshes the replica's view of the key's shared token count.

Bounds, per key and window, with R replicas and a lease of n = max(1, min(LEASE_MAX, rpm // LEASE_SHARE)) slots:

- requests: never more than `requests_per_minute` admitted across all replicas. A slot is admitted only if
  Redis' counter gave it a number ≤ the limit, so there is no overshoot at all. The price is early refusal:
  slots leased by a replica and not used yet are counted as used, so other replicas can be refused while at
  most R * 1.5n (≤ 1.5 % of the limit per replica) slots sit unused in leases. Keys with a limit under
  2 * LEASE_SHARE have n = 1: every request makes its round trip, exactly as without leases.
- tokens: checked, as before, against the count *before* the request ("the budget is used up"), which already
  lets in-flight answers overshoot. A replica sees its own charges at once and the other replicas' charges as of
  its last round trip (at most `FLUSH_S` plus one round trip old while it has traffic, and at least every
  n/2 requests), so the extra overshoot is bounded by what the other replicas charge within that time.

While Redis is unavailable, the per-replica LocalLimiter (store.py) decides instead, as before.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from redis.exceptions import RedisError

from inferstack_gateway.auth import Principal
from inferstack_gateway.store import WINDOW_S, RedisStore

LEASE_MAX = 64
"""Most request slots one replica reserves at a time."""
LEASE_SHARE = 100
"""A lease is at most 1/LEASE_SHARE of the key's per-minute limit."""
FLUSH_S = 0.01
"""Token charges wait at most this long to be added to Redis, in one batch for all keys."""

Refusal = Literal["requests", "tokens"]


def lease_size(requests_per_minute: int) -> int:
    return max(1, min(LEASE_MAX, requests_per_minute // LEASE_SHARE))


@dataclass(slots=True)
class _Key:
    window: int
    lease: int = 0
    """Request slots reserved in Redis for this replica and not used yet."""
    tokens: int = 0
    """The key's token count in this window as this replica knows it: Redis' last answer plus its own charges since."""
    pending: int = 0
    """Tokens charged here and not yet added in Redis."""
    reserving: bool = False
    """A lease reservation is in flight (at most one per key, so concurrent requests cannot hoard slots)."""


class SharedLimiter:
    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._keys: dict[str, _Key] = {}
        self._dirty: set[str] = set()
        self._flushing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._scheduled = 0
        """Tasks `_soon` has scheduled and not created yet."""

    def _key(self, key_id: str) -> _Key:
        window = int(time.time()) // WINDOW_S
        state = self._keys.get(key_id)
        if state is None or state.window != window:
            # A new window starts from zero; what was pending for the old one no longer matters to any decision.
            state = self._keys[key_id] = _Key(window)
        return state

    def lease(self, principal: Principal, tokens: int) -> bool:
        """Admit the request from this replica's lease, without Redis. False: admit() must decide."""
        state = self._key(principal.key_id)
        if state.lease <= 0 or state.tokens >= principal.tokens_per_minute:
            return False
        state.lease -= 1
        state.tokens += tokens
        state.pending += tokens
        n = lease_size(principal.requests_per_minute)
        if state.lease <= n // 2 and not state.reserving:
            state.reserving = True  # from now: no second top-up before this one's task runs
            self._soon(self._top_up, principal, state, n)
        else:
            self._mark(principal.key_id)
        return True

    async def admit(
        self, principal: Principal, tokens: int, exact_key: str | None
    ) -> tuple[Refusal | None, bytes | None]:
        """One round trip: reserve this request's slot (and a lease), add its tokens, look up the exact cache.

        Returns (the limit that refuses the request or None, cached answer). Redis errors propagate.
        """
        state = self._key(principal.key_id)
        bulk = not state.reserving
        n = lease_size(principal.requests_per_minute) if bulk else 1
        pending, state.pending = state.pending, 0
        if bulk:
            state.reserving = True
        try:
            count, total, cached = await self._store.reserve(
                principal.key_id, state.window, n, pending + tokens, exact_key
            )
        except BaseException:
            state.pending += pending  # possibly counted twice if Redis applied it: errs on the side of refusing
            raise
        finally:
            if bulk:
                state.reserving = False
        granted = _granted(count, n, principal.requests_per_minute)
        state.tokens = total + state.pending
        if granted == 0:
            return "requests", cached
        state.lease += granted - 1
        if total - tokens >= principal.tokens_per_minute:
            return "tokens", cached
        return None, cached

    def charge(self, key_id: str, tokens: int) -> None:
        """Count tokens (a finished answer's) against the key; they reach Redis within FLUSH_S."""
        if tokens <= 0:
            return
        state = self._key(key_id)
        state.tokens += tokens
        state.pending += tokens
        self._mark(key_id)

    async def drain(self) -> None:
        """Wait for reservations and token flushes in flight (shutdown)."""
        while self._tasks or self._scheduled:
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=2)
            else:
                await asyncio.sleep(0)  # `_soon` creates the task in this turn of the loop

    # -- background ---------------------------------------------------------------------------------------------

    def _soon(self, start: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """Run `start(*args)` in a task created after the current callback.

        `lease` runs on a request's way to its upstream, before its first token, and at concurrency 1 nearly every
        request starts a token flush from there: a `call_soon` handle costs a fraction of a coroutine, its task and
        the task's registration on a cold path, and the task is then created after the request has been written
        upstream (the request's task does not yield before that when its connection is pooled)."""
        asyncio.get_running_loop().call_soon(self._spawn, start, args)
        self._scheduled += 1

    def _spawn(self, start: Callable[..., Coroutine[Any, Any, None]], args: tuple[Any, ...]) -> None:
        self._scheduled -= 1
        task = asyncio.get_running_loop().create_task(start(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _mark(self, key_id: str) -> None:
        self._dirty.add(key_id)
        if not self._flushing:
            self._flushing = True
            self._soon(self._flush)

    async def _top_up(self, principal: Principal, state: _Key, n: int) -> None:
        """Reserve `n` more slots; `lease` set `state.reserving` when it scheduled this."""
        pending, state.pending = state.pending, 0
        try:
            count, total, _ = await self._store.reserve(principal.key_id, state.window, n, pending, None)
            self._store.succeeded()
        except (RedisError, OSError, TimeoutError) as exc:
            state.pending += pending
            self._store.failed("reserve", exc)
            return
        finally:
            state.reserving = False
        state.lease += _granted(count, n, principal.requests_per_minute)
        state.tokens = total + state.pending

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(FLUSH_S)
            while self._dirty:
                batch: list[tuple[str, int, int]] = []
                for key_id in self._dirty:
                    state = self._keys.get(key_id)
                    if state is not None and state.pending:
                        batch.append((key_id, state.window, state.pending))
                        state.pending = 0
                self._dirty.clear()
                if not batch:
                    return
                try:
                    totals = await self._store.add_tokens(batch)
                    self._store.succeeded()
                except (RedisError, OSError, TimeoutError) as exc:
                    self._store.failed("charge", exc)  # these tokens are lost, as a failed write-back's were before
                    return
                for (key_id, window, _), total in zip(batch, totals, strict=True):
                    state = self._keys.get(key_id)
                    if state is not None and state.window == window:
                        state.tokens = total + state.pending
        finally:
            self._flushing = False


def _granted(count: int, n: int, limit: int) -> int:
    """Slots (count - n, count] were reserved; those numbered within the limit are usable."""
    return max(0, min(n, limit - (count - n)))
