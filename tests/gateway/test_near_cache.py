"""The exact lookup's near cache (resp.py): values kept in the worker's memory, kept true by Redis's client tracking.

Each test runs the reader against a real Redis and changes keys behind its back through another client, as another
gateway replica or an operator would.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import cast

import pytest
import redis.asyncio as aioredis
from gateway_harness import RedisServer, gets_served, run_on_uvloop, settle, until

from inferstack_gateway import resp
from inferstack_gateway.resp import NEAR_ENTRY_OVERHEAD, FastReads

MB = 1 << 20


def near_reads(url: str, near_bytes: int = MB, timeout_s: float = 0.5) -> FastReads:
    reader = FastReads.from_url(url, timeout_s, near_bytes=near_bytes)
    assert reader is not None and reader.near is not None
    return reader


def test_a_repeated_read_is_answered_from_memory_without_a_round_trip(own_redis: RedisServer) -> None:
    own_redis.command("SET", "near:k", "value")

    async def main() -> tuple[list[bytes | None], int, int, int]:
        reader = near_reads(own_redis.url)
        try:
            values = [await reader.get(b"near:k", 0.5) for _ in range(5)]
            return values, gets_served(own_redis), reader.near_hits, reader.near_entries()
        finally:
            reader.close()

    values, served, hits, entries = run_on_uvloop(main)
    assert values == [b"value"] * 5
    assert served == 1 and hits == 4 and entries == 1


def test_writes_deletes_and_flushes_by_another_client_are_seen_at_the_next_read(own_redis: RedisServer) -> None:
    async def main() -> list[bytes | None]:
        reader = near_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url)
        seen: list[bytes | None] = []
        try:
            await other.set("near:a", "one")
            await other.set("near:b", "bee")
            seen += [await reader.get(b"near:a"), await reader.get(b"near:a")]
            await other.set("near:a", "two")  # rewritten
            await settle()
            seen += [await reader.get(b"near:a"), await reader.get(b"near:a")]
            await other.delete("near:a")  # deleted
            await settle()
            seen.append(await reader.get(b"near:a"))
            seen += [await reader.get(b"near:b"), await reader.get(b"near:b")]
            await other.flushall()  # everything, in one invalidation with no key list
            await settle()
            seen.append(await reader.get(b"near:b"))
            assert reader.near_entries() == 0
            return seen
        finally:
            reader.close()
            await other.aclose()

    assert run_on_uvloop(main) == [b"one", b"one", b"two", b"two", None, b"bee", b"bee", None]


def test_an_entry_is_never_served_past_its_ttl_even_before_redis_says_it_expired() -> None:
    # Active expiry off: Redis deletes (and invalidates) an expired key only when it is next read, so the reader's
    # own expiry, taken from the PTTL read with the value, is what stops the value being served from memory.
    server = RedisServer("--enable-debug-command", "yes")
    server.start()
    try:
        server.command("DEBUG", "SET-ACTIVE-EXPIRE", "0")
        server.command("SET", "near:ttl", "short-lived", "PX", "300")
        server.command("SET", "near:forever", "kept")

        async def main() -> tuple[list[bytes | None], int, float]:
            reader = near_reads(server.url)
            try:
                first = [
                    await reader.get(b"near:ttl"),
                    await reader.get(b"near:ttl"),
                    await reader.get(b"near:forever"),
                ]
                assert reader.near is not None
                expires = reader.near[b"near:ttl"][1] - asyncio.get_running_loop().time()
                await asyncio.sleep(0.4)
                hits_before = reader.near_hits
                after = [await reader.get(b"near:ttl"), await reader.get(b"near:forever")]
                return first + after, reader.near_hits - hits_before, expires
            finally:
                reader.close()

        values, hits_after, expires_in = run_on_uvloop(main)
        assert values == [b"short-lived", b"short-lived", b"kept", None, b"kept"]
        assert 0.2 < expires_in <= 0.3
        assert hits_after == 1  # only the key without a TTL came from memory after the sleep
    finally:
        server.cleanup()


def test_reads_racing_writes_never_keep_a_value_that_was_overwritten(own_redis: RedisServer) -> None:
    # Another client rewrites the key as fast as it can while the reader reads it: whatever the interleaving of
    # replies and invalidations on the connection, once the writes stop the next read returns the last value.
    async def main() -> tuple[list[tuple[bytes | None, bytes]], int]:
        reader = near_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url)
        outcomes: list[tuple[bytes | None, bytes]] = []
        try:
            for round_ in range(20):
                stop = asyncio.Event()
                last = b""

                async def write(stop: asyncio.Event = stop, round_: int = round_) -> None:
                    nonlocal last
                    i = 0
                    while not stop.is_set():
                        last = f"{round_}:{i}".encode()
                        await other.set("near:race", last)
                        i += 1

                async def read() -> None:
                    for _ in range(200):
                        await reader.get(b"near:race")
                        await asyncio.sleep(0)  # a read answered from memory does not yield: let the writer run

                writer = asyncio.create_task(write())
                await read()
                stop.set()
                await writer
                await settle()
                outcomes.append((await reader.get(b"near:race"), last))
            return outcomes, reader.near_hits
        finally:
            reader.close()
            await other.aclose()

    outcomes, near_hits = run_on_uvloop(main)
    assert sum(int(last.split(b":")[1]) + 1 for _, last in outcomes) >= 200, outcomes  # writes raced the reads
    assert near_hits > 0  # and some reads came from memory in between
    assert all(read == last for read, last in outcomes), outcomes


def test_a_lost_connection_empties_it_and_a_new_connection_starts_empty(own_redis: RedisServer) -> None:
    own_redis.command("SET", "near:k", "before")

    async def main() -> tuple[bytes | None, int, bytes | None]:
        reader = near_reads(own_redis.url)
        try:
            await reader.get(b"near:k")
            assert await reader.get(b"near:k") == b"before" and reader.near_hits == 1
            own_redis.stop()  # its invalidations stop with it: a write while it is gone would go unseen
            await until(lambda: reader._connection is None)
            entries = reader.near_entries()
            own_redis.start()  # a new Redis with no data, as after a failover to an empty replica
            own_redis.command("SET", "near:k", "after")
            return await reader.get(b"near:k"), entries, await reader.get(b"near:k")
        finally:
            reader.close()

    first_after, entries_when_lost, second_after = run_on_uvloop(main)
    assert entries_when_lost == 0
    assert first_after == b"after" and second_after == b"after"


def test_a_connection_gone_quiet_is_not_trusted_and_a_frozen_redis_is_then_found_out(
    stoppable_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A connection cut with no reset could be missing invalidations: past NEAR_FRESH_S of silence the reader asks
    # Redis again instead of answering from memory, and a Redis that does not answer fails the read within its budget.
    monkeypatch.setattr(resp, "NEAR_FRESH_S", 0.2)
    stoppable_redis.command("SET", "near:k", "v")
    assert stoppable_redis.process is not None
    pid = stoppable_redis.process.pid

    async def main() -> tuple[bytes | None, BaseException | bytes | None]:
        reader = near_reads(stoppable_redis.url, timeout_s=2.0)
        try:
            await reader.get(b"near:k", 0.5)
            os.kill(pid, signal.SIGSTOP)
            fresh = await reader.get(b"near:k", 0.05)  # heard from Redis a moment ago: from memory
            await asyncio.sleep(0.3)
            try:
                stale: BaseException | bytes | None = await reader.get(b"near:k", 0.05)
            except BaseException as exc:  # the test inspects what was raised
                stale = exc
            return fresh, stale
        finally:
            os.kill(pid, signal.SIGCONT)
            reader.close()

    fresh, stale = run_on_uvloop(main)
    assert fresh == b"v"
    assert type(stale) is TimeoutError, stale


def test_it_holds_at_most_its_size_dropping_the_least_recently_used() -> None:
    server = RedisServer()
    server.start()
    try:
        value = b"x" * 1000
        for i in range(5):
            server.command("SET", f"near:{i}", value)
        limit = 3 * (len(b"near:0") + len(value) + NEAR_ENTRY_OVERHEAD)

        async def main() -> tuple[int, int, list[bool]]:
            reader = near_reads(server.url, near_bytes=limit)
            try:
                for i in range(5):
                    await reader.get(f"near:{i}".encode())
                    await reader.get(b"near:0")  # kept in use: never the least recently used
                assert reader.near is not None
                held = [f"near:{i}".encode() in reader.near for i in range(5)]
                return reader.near_bytes(), reader.near_entries(), held
            finally:
                reader.close()

        size, entries, held = run_on_uvloop(main)
        assert size <= limit and entries == 3
        assert held == [True, False, False, True, True]
    finally:
        server.cleanup()


def test_a_redis_that_refuses_tracking_leaves_it_off_says_so_once_and_still_reads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer()
    server.start()
    try:
        server.command("ACL", "SETUSER", "default", "-client|tracking")
        server.command("SET", "near:k", "v")

        async def main() -> tuple[list[bytes | None], int, int]:
            reader = near_reads(server.url)
            try:
                values = [await reader.get(b"near:k") for _ in range(3)]
                assert reader._connection is not None
                reader._connection.fail(resp.RedisConnectionError("dropped by the test"))
                values.append(await reader.get(b"near:k"))  # a second connection, refused again, not logged again
                return values, reader.near_hits, gets_served(server)
            finally:
                reader.close()

        with caplog.at_level(logging.WARNING, logger="inferstack_gateway.resp"):
            values, hits, served = run_on_uvloop(main)
        assert values == [b"v"] * 4
        assert hits == 0 and served == 4
        refusals = [r for r in caplog.records if "does not do client tracking" in r.getMessage()]
        assert len(refusals) == 1
    finally:
        server.cleanup()


def test_without_a_size_nothing_is_kept_and_nothing_is_asked_of_redis(own_redis: RedisServer) -> None:
    own_redis.command("SET", "near:k", "v")

    async def main() -> tuple[list[bytes | None], bytes]:
        reader = FastReads.from_url(own_redis.url, 0.5)
        assert reader is not None and reader.near is None
        try:
            values = [await reader.get(b"near:k") for _ in range(3)]
            return values, own_redis.command("CLIENT", "LIST")
        finally:
            reader.close()

    values, clients = run_on_uvloop(main)
    assert values == [b"v"] * 3
    (reader_line,) = [line for line in clients.split(b"\n") if b"cmd=get" in line]
    assert b" resp=2" in reader_line and b" flags=N " in reader_line  # RESP2 and no tracking (t), as before


def test_a_value_invalidated_between_its_reply_and_its_ttl_is_not_kept() -> None:
    # A scripted RESP3 server puts an invalidation of the key between the GET's reply and the PTTL's, as a write by
    # another client can land there (the two commands are answered in order, but need not be in one read); a real
    # Redis does not let a test place a write there on purpose.
    served: list[bytes] = []

    class Scripted(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)
            self.buffer = b""

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            replies = {
                b"HELLO": b"%1\r\n$5\r\nproto\r\n:3\r\n",
                b"CLIENT": b"+OK\r\n",
                b"GET": b"$3\r\nold\r\n>2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\nnear:k\r\n",
                b"PTTL": b":60000\r\n",
            }
            while self.buffer and self.buffer.count(b"\r\n") >= 1 + 2 * int(self.buffer[1:2]):
                parts = self.buffer.split(b"\r\n")
                count = int(parts[0][1:])
                command = parts[2]
                self.buffer = b"\r\n".join(parts[1 + 2 * count :])
                served.append(command)
                self.transport.write(replies[command])

    async def main() -> tuple[bytes | None, bytes | None, int]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Scripted, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader = near_reads(f"redis://127.0.0.1:{port}/0")
        try:
            first = await reader.get(b"near:k")
            second = await reader.get(b"near:k")
            return first, second, reader.near_entries()
        finally:
            reader.close()
            server.close()

    first, second, entries = run_on_uvloop(main)
    assert first == second == b"old"
    assert served == [b"HELLO", b"CLIENT", b"GET", b"PTTL", b"GET", b"PTTL"]  # the second read was a round trip
    assert entries == 0


def test_no_entry_outlives_the_max_age_which_bounds_what_redis_does_not_invalidate(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SWAPDB changes what database 0 holds with no tracked write, so Redis sends no invalidation: the copy in memory
    # is served until NEAR_MAX_AGE_S after it was read, and not after.
    monkeypatch.setattr(resp, "NEAR_MAX_AGE_S", 0.3)
    own_redis.command("SET", "near:swapped", "db0")

    async def main() -> tuple[bytes | None, bytes | None, bytes | None]:
        reader = near_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url.replace("/0", "/1"))
        try:
            await other.set("near:swapped", "db1")
            await reader.get(b"near:swapped")
            await other.swapdb(0, 1)
            await settle()
            within = await reader.get(b"near:swapped")
            await asyncio.sleep(0.3)
            return within, await reader.get(b"near:swapped"), await reader.get(b"near:swapped")
        finally:
            reader.close()
            await other.aclose()

    within, after, again = run_on_uvloop(main)
    assert within == b"db0"  # not invalidated by Redis: the documented limit of client tracking
    assert after == b"db1" and again == b"db1"
