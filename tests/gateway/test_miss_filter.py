"""The exact lookup's miss filter (resp.py): a Bloom filter of the keys Redis holds, so a miss costs no round trip.

Each test runs the reader against a real Redis and writes keys behind its back through another client, as another
gateway replica would. What must never happen is a key that Redis holds being answered as a miss once the writer's
push has been read: every test that writes checks the reads against Redis's own GET count and values.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any, cast

import hiredis
import pytest
import redis.asyncio as aioredis
from gateway_harness import RedisServer, gets_served, run_on_uvloop, settle, until

from inferstack_gateway import resp
from inferstack_gateway.resp import FastReads

PREFIX = b"p:x:"


def filtered_reads(url: str, *, near_bytes: int = 0, keys: int = 10_000, timeout_s: float = 0.5) -> FastReads:
    reader = FastReads.from_url(url, timeout_s, near_bytes=near_bytes, known_prefix=PREFIX, known_keys=keys)
    assert reader is not None and reader.known_keys == keys
    return reader


async def built(reader: FastReads) -> None:
    """The first read opens the connection and starts the SCAN; wait until the filter answers."""
    await reader.get(PREFIX + b"opening-read")
    await until(reader.known_ready)


def test_keys_already_there_are_found_and_a_key_never_written_costs_no_round_trip(own_redis: RedisServer) -> None:
    for i in range(50):
        own_redis.command("SET", PREFIX + b"old:%d" % i, b"v%d" % i)

    async def main() -> tuple[list[bytes | None], list[bytes | None], int, int, int]:
        reader = filtered_reads(own_redis.url)
        try:
            await built(reader)
            served_before = gets_served(own_redis)
            found = [await reader.get(PREFIX + b"old:%d" % i) for i in range(50)]
            served_found = gets_served(own_redis) - served_before
            missing = [await reader.get(PREFIX + b"new:%d" % i) for i in range(200)]
            served_missing = gets_served(own_redis) - served_before - served_found
            return found, missing, served_found, served_missing, reader.known_skips
        finally:
            reader.close()

    found, missing, served_found, served_missing, skips = run_on_uvloop(main)
    assert found == [b"v%d" % i for i in range(50)]
    assert served_found == 50  # every held key is read from Redis
    assert missing == [None] * 200
    # At 1% false positives a few of the 200 may still go to Redis; nearly all are answered here.
    assert served_missing <= 12 and skips == 200 - served_missing


def test_the_filter_answers_only_once_its_scan_is_complete(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A SCAN of 10 keys a step over 3,000 keys takes many round trips: until the last, every lookup goes to Redis.
    monkeypatch.setattr(resp, "SCAN_COUNT", b"10")
    own_redis.command("EVAL", "for i=1,3000 do redis.call('SET', KEYS[1] .. i, 'v') end", "1", PREFIX + b"bulk:")

    async def main() -> tuple[int, bool, int, int]:
        reader = filtered_reads(own_redis.url)
        try:
            served_before = gets_served(own_redis)
            await reader.get(PREFIX + b"absent:0")  # opens the connection, starts the SCAN
            early = 0
            while not reader.known_ready():
                await reader.get(PREFIX + b"absent:%d" % early)
                early += 1
            served_early = gets_served(own_redis) - served_before
            bulk = [await reader.get(PREFIX + b"bulk:%d" % i) for i in range(1, 3001)]
            assert bulk == [b"v"] * 3000
            return early, reader.known_ready(), served_early, reader.known_builds
        finally:
            reader.close()

    early, ready, served_early, builds = run_on_uvloop(main)
    assert early > 0 and ready and builds == 1
    assert served_early == early + 1  # none was answered before the SCAN was done


def test_keys_written_by_another_client_during_and_after_the_scan_are_never_taken_for_misses(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer runs from before the reader connects until after its filter is built: keys written while tracking
    # turns on, while the SCAN walks the keyspace and after it, each read back once its push has been read.
    monkeypatch.setattr(resp, "SCAN_COUNT", b"20")
    own_redis.command("EVAL", "for i=1,2000 do redis.call('SET', KEYS[1] .. i, 'v') end", "1", PREFIX + b"filler:")

    async def main() -> tuple[int, list[bytes], list[bytes | None]]:
        reader = filtered_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url)
        written: list[bytes] = []
        stop = asyncio.Event()

        async def write() -> None:
            i = 0
            while not stop.is_set():
                key = PREFIX + b"live:%d" % i
                await other.set(key, key)
                written.append(key)
                i += 1

        try:
            writer = asyncio.create_task(write())
            await asyncio.sleep(0.02)
            await built(reader)
            await asyncio.sleep(0.1)
            stop.set()
            await writer
            await settle()
            return len(written), written, [await reader.get(key) for key in written]
        finally:
            reader.close()
            await other.aclose()

    count, written, values = run_on_uvloop(main)
    assert count > 50
    assert values == written  # each key's value is its own name: none answered as a miss


def test_a_flush_empties_it_and_what_is_written_after_is_found(own_redis: RedisServer) -> None:
    own_redis.command("SET", PREFIX + b"a", b"one")

    async def main() -> tuple[bytes | None, int, bytes | None, int]:
        reader = filtered_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url)
        try:
            await built(reader)
            assert await reader.get(PREFIX + b"a") == b"one"
            await other.flushall()
            await until(lambda: reader.known_builds == 2)  # rebuilt by a new SCAN, of an empty database
            served = gets_served(own_redis)
            after_flush = await reader.get(PREFIX + b"a")  # gone, and known to be: no round trip
            served_after_flush = gets_served(own_redis) - served
            await other.set(PREFIX + b"a", b"two")
            await settle()
            return after_flush, served_after_flush, await reader.get(PREFIX + b"a"), reader.known_skips
        finally:
            reader.close()
            await other.aclose()

    after_flush, served_after_flush, rewritten, skips = run_on_uvloop(main)
    assert after_flush is None and served_after_flush == 0 and skips >= 1
    assert rewritten == b"two"


def test_a_lost_connection_drops_it_and_the_next_connection_scans_again(own_redis: RedisServer) -> None:
    own_redis.command("SET", PREFIX + b"k", b"before")

    async def main() -> tuple[bool, bytes | None, int]:
        reader = filtered_reads(own_redis.url)
        try:
            await built(reader)
            assert await reader.get(PREFIX + b"k") == b"before"
            own_redis.stop()  # its pushes stop with it: a write while it is gone would go unseen
            await until(lambda: reader._connection is None)
            ready_when_lost = reader.known_ready()
            own_redis.start()  # a Redis with other data, as after a failover to another node
            own_redis.command("SET", PREFIX + b"elsewhere", b"there")
            await built(reader)
            return ready_when_lost, await reader.get(PREFIX + b"elsewhere"), reader.known_builds
        finally:
            reader.close()

    ready_when_lost, elsewhere, builds = run_on_uvloop(main)
    assert not ready_when_lost
    assert elsewhere == b"there" and builds == 2


def test_a_rebuild_drops_deleted_keys_and_keeps_what_is_written_meanwhile(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resp, "KNOWN_REBUILD_S", 100.0)
    own_redis.command("SET", PREFIX + b"doomed", b"v")

    async def main() -> tuple[int, int, int, bytes | None]:
        reader = filtered_reads(own_redis.url)
        other = aioredis.Redis.from_url(own_redis.url)
        try:
            await built(reader)
            connection = reader._connection
            assert connection is not None and connection.rebuild is not None
            assert 90 <= connection.rebuild.when() - asyncio.get_running_loop().time() <= 110  # the next, spread
            await other.delete(PREFIX + b"doomed")
            await settle()
            served = gets_served(own_redis)
            await reader.get(PREFIX + b"doomed")  # pushed for its deletion: still in the filter, so a round trip
            before_rebuild = gets_served(own_redis) - served
            reader.rescan(connection)  # what that timer runs, now
            await until(lambda: reader.known_builds >= 2)
            await other.set(PREFIX + b"fresh", b"new")
            await settle()
            served = gets_served(own_redis)
            await reader.get(PREFIX + b"doomed")
            after_rebuild = gets_served(own_redis) - served
            return before_rebuild, after_rebuild, reader.known_builds, await reader.get(PREFIX + b"fresh")
        finally:
            reader.close()
            await other.aclose()

    before_rebuild, after_rebuild, builds, fresh = run_on_uvloop(main)
    assert before_rebuild == 1 and after_rebuild == 0 and builds >= 2
    assert fresh == b"new"


def test_keys_outside_the_prefix_always_go_to_redis_and_are_not_kept_in_the_near_cache(
    own_redis: RedisServer,
) -> None:
    own_redis.command("SET", b"other:k", b"v")
    own_redis.command("SET", PREFIX + b"k", b"w")

    async def main() -> tuple[list[bytes | None], int, int]:
        reader = filtered_reads(own_redis.url, near_bytes=1 << 20)
        try:
            await built(reader)
            served = gets_served(own_redis)
            values = [await reader.get(b"other:k") for _ in range(3)] + [await reader.get(b"other:absent")]
            values += [await reader.get(PREFIX + b"k") for _ in range(3)]  # under the prefix: kept, one round trip
            return values, gets_served(own_redis) - served, reader.near_hits
        finally:
            reader.close()

    values, served, near_hits = run_on_uvloop(main)
    assert values == [b"v", b"v", b"v", None, b"w", b"w", b"w"]
    assert served == 5 and near_hits == 2


def test_an_idle_worker_stays_fresh_by_heartbeat_and_a_silent_redis_is_not_trusted(
    stoppable_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An idle connection PINGs Redis, so that a lone client's next lookup is still answered here; a Redis that stops
    # answering (a cut with no reset could be hiding pushes) is not trusted past NEAR_FRESH_S: the lookup goes to Redis.
    monkeypatch.setattr(resp, "NEAR_FRESH_S", 0.3)
    assert stoppable_redis.process is not None
    pid = stoppable_redis.process.pid

    def pings() -> int:
        stats = stoppable_redis.command("INFO", "commandstats")
        return int(stats.get("cmdstat_ping", {}).get("calls", 0))

    async def main() -> tuple[int, int, int, BaseException | bytes | None]:
        reader = filtered_reads(stoppable_redis.url, timeout_s=2.0)
        try:
            await built(reader)
            served, pinged, skips = gets_served(stoppable_redis), pings(), reader.known_skips
            await asyncio.sleep(1.0)  # idle for over three times NEAR_FRESH_S
            idle = await reader.get(PREFIX + b"absent")
            assert idle is None
            after_idle = (gets_served(stoppable_redis) - served, pings() - pinged, reader.known_skips - skips)
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(0.5)
            try:
                silent: BaseException | bytes | None = await reader.get(PREFIX + b"absent", 0.05)
            except BaseException as exc:  # the test inspects what was raised
                silent = exc
            return (*after_idle, silent)
        finally:
            os.kill(pid, signal.SIGCONT)
            reader.close()

    served, pinged, skips, silent = run_on_uvloop(main)
    assert served == 0 and skips == 1  # answered here after a second idle
    assert pinged >= 2  # the heartbeat kept the connection heard from
    assert type(silent) is TimeoutError, silent  # asked of the frozen Redis, not answered from the filter


def test_a_redis_that_refuses_scan_leaves_it_off_says_so_once_and_still_reads(caplog: pytest.LogCaptureFixture) -> None:
    server = RedisServer()
    server.start()
    try:
        server.command("ACL", "SETUSER", "default", "-scan")
        server.command("SET", PREFIX + b"k", b"v")

        async def main() -> tuple[list[bytes | None], int, bool]:
            reader = filtered_reads(server.url)
            try:
                values = [await reader.get(PREFIX + b"k"), await reader.get(PREFIX + b"absent")]
                await asyncio.sleep(0.1)
                values += [await reader.get(PREFIX + b"k"), await reader.get(PREFIX + b"absent")]
                assert reader._connection is not None
                reader._connection.fail(resp.RedisConnectionError("dropped by the test"))
                values.append(await reader.get(PREFIX + b"absent"))  # refused again on a new connection, not logged
                await asyncio.sleep(0.1)
                return values, gets_served(server), reader.known_ready()
            finally:
                reader.close()

        with caplog.at_level(logging.WARNING, logger="inferstack_gateway.resp"):
            values, served, ready = run_on_uvloop(main)
        assert values == [b"v", None, b"v", None, None]
        assert served == 5 and not ready
        assert len([r for r in caplog.records if "refused SCAN" in r.getMessage()]) == 1
    finally:
        server.cleanup()


def test_a_prefix_with_glob_characters_is_scanned_literally(own_redis: RedisServer) -> None:
    prefix = b"we*ird?[x]\\:x:"
    own_redis.command("SET", prefix + b"k", b"v")
    own_redis.command("SET", b"weXirdY[x]\\:x:k", b"not under the prefix")

    async def main() -> tuple[bytes | None, bytes | None, int]:
        reader = FastReads.from_url(own_redis.url, 0.5, known_prefix=prefix, known_keys=1000)
        assert reader is not None
        try:
            await reader.get(prefix + b"opening")
            await until(reader.known_ready)
            return await reader.get(prefix + b"k"), await reader.get(prefix + b"absent"), reader.known_skips
        finally:
            reader.close()

    found, absent, skips = run_on_uvloop(main)
    assert found == b"v" and absent is None and skips == 1


@pytest.mark.parametrize(("keys", "flags"), [(10_000, b" flags=tB "), (0, b" flags=t ")])
def test_on_it_tracks_in_broadcast_mode_and_off_tracking_stays_as_the_near_cache_had_it(
    own_redis: RedisServer, keys: int, flags: bytes
) -> None:
    async def main() -> bytes:
        reader = FastReads.from_url(own_redis.url, 0.5, near_bytes=1 << 20, known_prefix=PREFIX, known_keys=keys)
        assert reader is not None and reader.known_keys == keys
        try:
            await reader.get(PREFIX + b"k")
            return own_redis.command("CLIENT", "LIST")
        finally:
            reader.close()

    clients = run_on_uvloop(main)
    (line,) = [line for line in clients.split(b"\n") if b" resp=3" in line]
    assert flags in line  # t: tracking; B: broadcast


def test_a_flush_of_another_database_or_a_reload_never_hides_the_keys_still_held() -> None:
    # Redis pushes "all keys" (a null list) for a flush of any database, and for DEBUG RELOAD and a replica's full
    # resync, which then load keys that are never pushed one by one: the filter must walk the keys again.
    server = RedisServer("--enable-debug-command", "yes")
    server.start()
    try:
        server.command("SET", PREFIX + b"held", b"kept")

        async def main() -> tuple[list[bytes | None], int]:
            reader = filtered_reads(server.url)
            other = aioredis.Redis.from_url(server.url.rsplit("/", 1)[0] + "/3")
            try:
                await built(reader)
                seen = [await reader.get(PREFIX + b"held")]
                await other.flushdb()  # database 3, not the reader's
                await settle()
                seen.append(await reader.get(PREFIX + b"held"))
                await until(reader.known_ready)
                seen.append(await reader.get(PREFIX + b"held"))
                # DEBUG RELOAD saves and loads the data again: Redis empties and refills the keyspace unannounced
                server.command("SET", PREFIX + b"saved-then-loaded", b"there")
                builds = reader.known_builds
                server.command("DEBUG", "RELOAD")
                await until(lambda: reader.known_builds > builds)
                seen += [await reader.get(PREFIX + b"held"), await reader.get(PREFIX + b"saved-then-loaded")]
                return seen, reader.known_builds
            finally:
                reader.close()
                await other.aclose()

        seen, builds = run_on_uvloop(main)
        assert seen == [b"kept", b"kept", b"kept", b"kept", b"there"]
        assert builds == 3
    finally:
        server.cleanup()


def test_a_key_this_process_writes_is_found_before_its_push_is_read(own_redis: RedisServer) -> None:
    import redis

    async def main() -> tuple[bytes | None, bytes | None]:
        reader = filtered_reads(own_redis.url)
        writer = redis.Redis.from_url(own_redis.url)  # blocking: the loop reads no push while it writes
        try:
            await built(reader)
            reader.expect(PREFIX + b"mine")  # what the store does before its write-back
            writer.set(PREFIX + b"mine", b"written")
            writer.set(PREFIX + b"theirs", b"written")  # another replica's write: its push has not been read
            theirs = await reader.get(PREFIX + b"theirs")  # answered at once: the loop has not run since the writes
            return await reader.get(PREFIX + b"mine"), theirs
        finally:
            reader.close()
            writer.close()

    mine, theirs = run_on_uvloop(main)
    assert mine == b"written"
    assert theirs is None  # the one race the filter allows: a write whose push is still unread is a miss


class Scripted(asyncio.Protocol):
    """A RESP3 server that answers each command with what `answer(arguments)` returns."""

    def __init__(self, answer: Callable[[list[bytes]], bytes], served: list[list[bytes]]) -> None:
        self.answer = answer
        self.served = served
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        reader = hiredis.Reader()
        reader.feed(self.buffer)
        self.buffer = b""
        while (command := reader.gets()) is not False:
            self.served.append(command)
            self.transport.write(self.answer(command))


async def scripted_server(answer: Callable[[list[bytes]], bytes], served: list[list[bytes]]) -> tuple[Any, str]:
    server = await asyncio.get_running_loop().create_server(lambda: Scripted(answer, served), "127.0.0.1", 0)
    return server, f"redis://127.0.0.1:{server.sockets[0].getsockname()[1]}/0"


def test_a_scan_answered_with_loading_is_tried_again_until_it_completes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resp, "SCAN_RETRY_S", 0.02)
    served: list[list[bytes]] = []
    scans = 0

    def answer(command: list[bytes]) -> bytes:
        nonlocal scans
        if command[0] == b"HELLO":
            return b"%1\r\n$5\r\nproto\r\n:3\r\n"
        if command[0] == b"SCAN":
            scans += 1
            if scans <= 2:
                return b"-LOADING Redis is loading the dataset in memory\r\n"
            return b"*2\r\n$1\r\n0\r\n*1\r\n$7\r\np:x:old\r\n"
        if command[0] == b"GET":
            return b"$5\r\nvalue\r\n" if command[1] == b"p:x:old" else b"_\r\n"
        return b"+OK\r\n"

    async def main() -> tuple[list[bytes | None], int]:
        server, url = await scripted_server(answer, served)
        reader = filtered_reads(url)
        try:
            await built(reader)
            return [await reader.get(PREFIX + b"old"), await reader.get(PREFIX + b"absent")], reader.known_skips
        finally:
            reader.close()
            server.close()

    values, skips = run_on_uvloop(main)
    assert values == [b"value", None] and skips == 1
    assert scans == 3
    assert [b"CLIENT", b"TRACKING", b"ON", b"BCAST", b"PREFIX", PREFIX] in served


def test_a_redis_without_broadcast_tracking_keeps_the_near_cache_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    served: list[list[bytes]] = []

    def answer(command: list[bytes]) -> bytes:
        if command[0] == b"HELLO":
            return b"%1\r\n$5\r\nproto\r\n:3\r\n"
        if command[:2] == [b"CLIENT", b"TRACKING"]:
            return b"-ERR syntax error\r\n" if b"BCAST" in command else b"+OK\r\n"
        if command[0] == b"GET":
            return b"$5\r\nvalue\r\n"
        if command[0] == b"PTTL":
            return b":-1\r\n"
        return b"-ERR unexpected\r\n"

    async def main() -> tuple[list[bytes | None], int, bool]:
        server, url = await scripted_server(answer, served)
        reader = filtered_reads(url, near_bytes=1 << 20)
        try:
            values = [await reader.get(PREFIX + b"k") for _ in range(3)]
            assert reader._connection is not None
            reader._connection.fail(resp.RedisConnectionError("dropped by the test"))
            values.append(await reader.get(PREFIX + b"k"))  # refused again on a new connection, not logged again
            return values, reader.near_hits, reader.known_ready()
        finally:
            reader.close()
            server.close()

    with caplog.at_level(logging.WARNING, logger="inferstack_gateway.resp"):
        values, near_hits, ready = run_on_uvloop(main)
    assert values == [b"value"] * 4 and near_hits == 2 and not ready
    assert not any(command[0] == b"SCAN" for command in served)
    assert len([r for r in caplog.records if "refused broadcast tracking" in r.getMessage()]) == 1
