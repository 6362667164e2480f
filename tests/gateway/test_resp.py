"""The exact lookup's pipelined GET reader (resp.py) against a real Redis, and a scripted one for TLS."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import RedisServer, private_ca, run_on_uvloop
from redis.exceptions import AuthenticationError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from inferstack_gateway.resp import FastReads


def reads(url: str, timeout_s: float = 0.05, **kw: Any) -> FastReads:
    reader = FastReads.from_url(url, timeout_s, **kw)
    assert reader is not None
    return reader


def test_values_come_back_whole_binary_large_and_missing(redis_server: RedisServer) -> None:
    binary = b"\r\n$-1\r\n*2\r\n\x00\xff" * 10
    large = os.urandom(3 * 1024 * 1024)  # arrives in many reads
    redis_server.command("SET", "resp:binary", binary)
    redis_server.command("SET", "resp:large", large)

    async def main() -> list[bytes | None]:
        reader = reads(redis_server.url)
        try:
            return [await reader.get(key) for key in (b"resp:binary", b"resp:large", b"resp:absent")]
        finally:
            reader.close()

    assert run_on_uvloop(main) == [binary, large, None]


def test_concurrent_callers_share_one_connection_and_each_gets_its_own_reply(redis_server: RedisServer) -> None:
    for i in range(300):
        redis_server.command("SET", f"resp:many:{i}", f"value {i}" * (i % 7 + 1))

    async def main() -> tuple[list[bytes | None], int]:
        reader = reads(redis_server.url)
        try:
            values = await asyncio.gather(*(reader.get(f"resp:many:{i}".encode()) for i in range(300)))
            clients = redis_server.command("CLIENT", "LIST").count(b"cmd=get")
            return list(values), clients
        finally:
            reader.close()

    values, connections = run_on_uvloop(main)
    assert values == [(f"value {i}" * (i % 7 + 1)).encode() for i in range(300)]
    assert connections == 1


def test_a_caller_that_gave_up_does_not_shift_the_replies_of_the_next(stoppable_redis: RedisServer) -> None:
    stoppable_redis.command("SET", "resp:first", "first")
    stoppable_redis.command("SET", "resp:second", "second")
    assert stoppable_redis.process is not None
    pid = stoppable_redis.process.pid

    async def main() -> bytes | None:
        reader = reads(stoppable_redis.url, timeout_s=2.0)
        try:
            await reader.get(b"resp:first")  # connected
            os.kill(pid, signal.SIGSTOP)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.02):  # the exact stage's budget runs out
                    await reader.get(b"resp:first")
            os.kill(pid, signal.SIGCONT)
            return await reader.get(b"resp:second")
        finally:
            reader.close()

    assert run_on_uvloop(main) == b"second"


def test_a_frozen_redis_fails_the_reads_within_the_timeout_and_says_so_once(stoppable_redis: RedisServer) -> None:
    stoppable_redis.command("SET", "resp:k", "v")
    assert stoppable_redis.process is not None
    pid = stoppable_redis.process.pid
    reported: list[RedisError] = []

    async def main() -> tuple[list[BaseException | bytes | None], float, bytes | None]:
        reader = reads(stoppable_redis.url, timeout_s=0.1, on_timeout=reported.append)
        try:
            await reader.get(b"resp:k")
            os.kill(pid, signal.SIGSTOP)
            loop = asyncio.get_running_loop()
            started = loop.time()
            async with asyncio.timeout(3):  # a safety net for the test itself, far above the reader's timeout
                results = await asyncio.gather(*(reader.get(b"resp:k") for _ in range(5)), return_exceptions=True)
            waited = loop.time() - started
            os.kill(pid, signal.SIGCONT)
            return results, waited, await reader.get(b"resp:k")  # a new connection
        finally:
            reader.close()

    results, waited, after = run_on_uvloop(main)
    assert all(isinstance(result, RedisTimeoutError) for result in results), results
    assert 0.09 <= waited < 0.5
    assert len(reported) == 1 and isinstance(reported[0], RedisTimeoutError)
    assert after == b"v"


def test_a_budget_shorter_than_the_timeout_gives_up_alone_and_leaves_the_connection(
    stoppable_redis: RedisServer,
) -> None:
    stoppable_redis.command("SET", "resp:a", "first")
    stoppable_redis.command("SET", "resp:b", "second")
    assert stoppable_redis.process is not None
    pid = stoppable_redis.process.pid
    reported: list[RedisError] = []

    async def main() -> tuple[BaseException | bytes | None, float, bytes | None, bool]:
        reader = reads(stoppable_redis.url, timeout_s=2.0, on_timeout=reported.append)
        try:
            await reader.get(b"resp:a", 0.5)  # connected
            connection = reader._connection
            os.kill(pid, signal.SIGSTOP)
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                result: BaseException | bytes | None = await reader.get(b"resp:a", 0.05)
            except BaseException as exc:  # the test inspects what was raised
                result = exc
            waited = loop.time() - started
            os.kill(pid, signal.SIGCONT)
            # The same connection answers the next caller with its own value: the late reply was dropped.
            after = await reader.get(b"resp:b", 1.0)
            return result, waited, after, reader._connection is connection
        finally:
            reader.close()

    result, waited, after, same_connection = run_on_uvloop(main)
    assert type(result) is TimeoutError, result  # the caller's budget, not RedisTimeoutError: Redis is not down
    assert "budget of 50 ms" in str(result)
    assert 0.045 <= waited < 0.5
    assert after == b"second" and same_connection
    assert reported == []


def test_a_killed_redis_is_a_connection_error_and_a_restarted_one_is_used_again(own_redis: RedisServer) -> None:
    own_redis.command("SET", "resp:k", "before")

    async def main() -> tuple[bytes | None, BaseException, BaseException, bytes | None]:
        reader = reads(own_redis.url, timeout_s=0.5)
        try:
            before = await reader.get(b"resp:k")
            own_redis.stop()
            await asyncio.sleep(0.05)  # the connection's loss arrives
            with pytest.raises(RedisConnectionError) as lost:
                await reader.get(b"resp:k")
            with pytest.raises(RedisConnectionError) as refused:
                await reader.get(b"resp:k")
            own_redis.start()
            own_redis.command("SET", "resp:k", "after")
            return before, lost.value, refused.value, await reader.get(b"resp:k")
        finally:
            reader.close()

    before, lost, refused, after = run_on_uvloop(main)
    assert before == b"before" and after == b"after"
    assert "cannot connect to Redis at 127.0.0.1" in str(refused)
    assert str(lost)


def test_password_and_database_from_the_url() -> None:
    server = RedisServer("--requirepass", "s3cret")
    server.start()
    try:
        server.command("SELECT", "0")
        server.command("SET", "resp:k", "db0")

        async def main() -> tuple[bytes | None, bytes | None, BaseException]:
            right = reads(f"redis://:s3cret@127.0.0.1:{server.port}/0")
            other_db = reads(f"redis://default:s3cret@127.0.0.1:{server.port}/3")
            wrong = reads(f"redis://:nope@127.0.0.1:{server.port}/0")
            try:
                with pytest.raises(AuthenticationError) as refused:
                    await wrong.get(b"resp:k")
                return await right.get(b"resp:k"), await other_db.get(b"resp:k"), refused.value
            finally:
                for reader in (right, other_db, wrong):
                    reader.close()

        in_db0, in_db3, refused = run_on_uvloop(main)
        assert (in_db0, in_db3) == (b"db0", None)
        assert "refused the credentials" in str(refused)
    finally:
        server.cleanup()


def test_a_unix_socket_url() -> None:
    path = Path(tempfile.mkdtemp(prefix="resp-")) / "redis.sock"
    server = RedisServer("--unixsocket", str(path))
    server.start()
    try:
        server.command("SET", "resp:k", "over the socket")

        async def main() -> bytes | None:
            reader = reads(f"unix://{path}?db=0")
            try:
                return await reader.get(b"resp:k")
            finally:
                reader.close()

        assert run_on_uvloop(main) == b"over the socket"
    finally:
        server.cleanup()


def test_urls_with_options_it_does_not_take_on_stay_with_redis_py() -> None:
    assert FastReads.from_url("rediss://cache.example:6380/0?ssl_cert_reqs=none", 0.05) is None
    assert FastReads.from_url("redis://cache.example/0?socket_keepalive=true", 0.05) is None
    assert FastReads.from_url("rediss://:token@cache.example:6380/1", 0.05) is not None


def test_tls_is_verified() -> None:
    server_tls, trusting = private_ca("localhost")
    commands: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                commands.append(line)
                if line.startswith(b"GET"):
                    writer.write(b"$6\r\nsecure\r\n")
                elif line.startswith(b"AUTH"):
                    writer.write(b"+OK\r\n")
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def main() -> tuple[bytes | None, BaseException]:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        options: dict[str, Any] = {
            "host": "localhost", "port": port, "path": None, "db": 0, "username": None, "password": "tok",
            "timeout_s": 1.0,
        }  # fmt: skip
        trusted = FastReads(**options, tls=trusting)
        untrusted = FastReads(**options, tls=ssl.create_default_context())
        try:
            value = await trusted.get(b"k")
            with pytest.raises(RedisConnectionError) as refused:
                await untrusted.get(b"k")
            return value, refused.value
        finally:
            trusted.close()
            untrusted.close()
            server.close()

    value, refused = run_on_uvloop(main)
    assert value == b"secure"
    assert "certificate verify failed" in str(refused)
    assert any(line.startswith(b"AUTH") for line in commands)  # inline commands: the scripted server reads lines


def test_an_event_loop_held_up_past_the_timeout_is_not_taken_for_a_frozen_redis(redis_server: RedisServer) -> None:
    redis_server.command("SET", "resp:k", "v")
    reported: list[RedisError] = []

    class Busy(asyncio.Protocol):
        """A socket whose callback holds the loop while the GET's reply arrives, so that the reply is still unread
        when the loop next runs its timers."""

        def data_received(self, data: bytes) -> None:
            time.sleep(0.2)

    async def main() -> bytes | None:
        reader = reads(redis_server.url, timeout_s=0.05, on_timeout=reported.append)
        ours, theirs = socket.socketpair()
        transport, _ = await asyncio.get_running_loop().create_connection(Busy, sock=ours)
        try:
            await reader.get(b"resp:k")
            pending = asyncio.ensure_future(reader.get(b"resp:k"))
            await asyncio.sleep(0)  # the GET is sent
            theirs.send(b"x")
            return await pending
        finally:
            reader.close()
            transport.close()
            theirs.close()

    assert run_on_uvloop(main) == b"v"
    assert reported == []
