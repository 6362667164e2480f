"""The shared limiter's lease, against a stand-in for its Redis store: what runs on a request's way upstream."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from inferstack_gateway.auth import Principal
from inferstack_gateway.limits import FLUSH_S, SharedLimiter, lease_size
from inferstack_gateway.store import WINDOW_S


class Store:
    """The calls SharedLimiter makes on RedisStore, counted; every reservation is granted."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.reserves: list[tuple[str, int, int]] = []
        self.flushed: list[list[tuple[str, int, int]]] = []

    async def reserve(self, key_id: str, window: int, n: int, tokens: int, exact_key: str | None) -> Any:
        self.reserves.append((key_id, n, tokens))
        self.count += n
        self.total += tokens
        return self.count, self.total, None

    async def add_tokens(self, batch: list[tuple[str, int, int]]) -> list[int]:
        self.flushed.append(batch)
        self.total += sum(tokens for _, _, tokens in batch)
        return [self.total for _ in batch]

    def succeeded(self) -> None:
        pass

    def failed(self, stage: str, exc: BaseException) -> None:
        raise AssertionError(f"{stage}: {exc!r}")


PRINCIPAL = Principal("t", "key", requests_per_minute=6000, tokens_per_minute=10**9)


def run_in_one_window(main: Any) -> None:
    """Run a test's coroutine inside one rate-limit window (a new window starts every key's lease from nothing)."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < 2:
        time.sleep(left + 0.01)
    asyncio.run(main())


def test_a_lease_starts_no_task_before_the_request_goes_upstream_and_its_tokens_still_reach_redis() -> None:
    async def main() -> None:
        store = Store()
        limiter = SharedLimiter(store)  # type: ignore[arg-type]
        refused, _ = await limiter.admit(PRINCIPAL, 10, None)  # the first request reserves a lease
        assert refused is None
        tasks = len(asyncio.all_tasks())
        assert limiter.lease(PRINCIPAL, 7)
        assert len(asyncio.all_tasks()) == tasks, "the token flush's task was created on the request's path"
        await asyncio.sleep(0)  # the request's task yields once it has written upstream
        assert len(asyncio.all_tasks()) == tasks + 1
        async with asyncio.timeout(2):
            while not store.flushed:
                await asyncio.sleep(FLUSH_S)
        assert store.flushed == [[("key", int(time.time()) // WINDOW_S, 7)]]  # run_in_one_window: the same window
        await limiter.drain()

    run_in_one_window(main)


def test_a_lease_running_low_tops_up_once_however_many_requests_see_it_low_before_the_top_up_runs() -> None:
    async def main() -> None:
        store = Store()
        limiter = SharedLimiter(store)  # type: ignore[arg-type]
        n = lease_size(PRINCIPAL.requests_per_minute)
        await limiter.admit(PRINCIPAL, 1, None)  # n slots reserved, one used
        admitted = 0
        while limiter.lease(PRINCIPAL, 1):  # past half the lease, each of these sees it low
            admitted += 1
        assert admitted == n - 1
        await limiter.drain()
        top_ups = [r for r in store.reserves[1:] if r[1] == n]
        assert len(top_ups) == 1
        assert limiter.lease(PRINCIPAL, 1), "the top-up's slots are usable"
        await limiter.drain()

    run_in_one_window(main)


def test_drain_waits_for_a_flush_scheduled_but_not_yet_started() -> None:
    async def main() -> None:
        store = Store()
        limiter = SharedLimiter(store)  # type: ignore[arg-type]
        await limiter.admit(PRINCIPAL, 10, None)
        limiter.lease(PRINCIPAL, 5)
        limiter.charge("key", 3)  # both wait for one flush, whose task does not exist yet
        await limiter.drain()
        assert [tokens for batch in store.flushed for _, _, tokens in batch] == [8]

    run_in_one_window(main)
