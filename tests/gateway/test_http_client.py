"""The gateway's HTTP/1.1 client against scripted servers: every byte the server sends is written out here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from gateway_harness import private_ca

from inferstack_gateway.http_client import ConnectFailed, HttpClient, StreamBroken, Target

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The request head and its content-length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def answers_ok_after(gate: asyncio.Event) -> Handler:
    """A keep-alive server that answers each request with "ok", once `gate` is set."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            await gate.wait()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    return handler


def run(handler: Handler, client_side: Callable[[HttpClient, Target], Awaitable[Any]], **client: Any) -> Any:
    async def main() -> Any:
        handlers: set[asyncio.Task[Any]] = set()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            handlers.add(task)
            try:
                await handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        http = HttpClient(**{"limit_per_origin": 8, "keepalive_s": 4.0, "connect_timeout_s": 1.0, **client})
        try:
            return await client_side(http, Target.parse(f"http://127.0.0.1:{port}/v1/chat/completions"))
        finally:
            http.close()
            server.close()
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await asyncio.sleep(0.01)  # the transports' close callbacks

    return asyncio.run(main())


def test_target_keeps_path_query_and_a_non_default_port_in_the_host_header() -> None:
    target = Target.parse("https://hub.example.internal:8443/v1/chat/completions?x=1")
    assert (target.scheme, target.host, target.port) == ("https", "hub.example.internal", 8443)
    assert target.path == b"/v1/chat/completions?x=1"
    assert target.host_header == b"hub.example.internal:8443"
    assert Target.parse("http://gw/v1").host_header == b"gw"
    with pytest.raises(ValueError, match="not an http"):
        Target.parse("ftp://gw/v1")


def test_one_write_carries_the_whole_request_and_the_connection_is_reused() -> None:
    heads: list[bytes] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while not reader.at_eof():
            try:
                head, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            heads.append(head)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        writer.close()

    async def client_side(http: HttpClient, target: Target) -> list[bytes]:
        bodies = []
        for i in range(3):
            response = await http.request(b"POST", target, {"authorization": "Bearer k"}, b'{"n":%d}' % i)
            bodies.append(await response.read())
            response.close()
        assert http.idle_connections() == 1 and http.busy_connections() == 0
        return bodies

    assert run(handler, client_side) == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    assert connections == 1
    assert heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:")
    assert b"authorization: Bearer k\r\n" in heads[0] and b"content-length: 7\r\n" in heads[0]


def test_a_chunked_stream_is_handed_over_chunk_by_chunk_as_it_arrives() -> None:
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n")
        writer.write(b"7\r\ndata: 1\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"7\r\ndata: 2\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()  # the client keeps the connection

    async def client_side(http: HttpClient, target: Target) -> list[bytes]:
        response = await http.request(b"POST", target, {}, b"{}")
        assert response.status == 200 and response.headers[b"content-type"] == b"text/event-stream"
        first = await response.readany()  # arrives before the server sends the rest
        release.set()
        rest = await response.read()
        assert response.at_eof()
        response.close()
        assert http.idle_connections() == 1  # a complete chunked response keeps the connection
        return [first, rest]

    assert run(handler, client_side) == [b"data: 1", b"data: 2"]


def test_a_body_ended_by_closing_the_connection_is_complete_and_not_reused() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy")
        await writer.drain()
        writer.close()

    async def client_side(http: HttpClient, target: Target) -> tuple[int, bytes, int]:
        response = await http.request(b"POST", target, {}, b"{}")
        body = await response.read()
        response.close()
        return response.status, body, http.idle_connections()

    assert run(handler, client_side) == (503, b"busy", 0)


def test_a_reset_mid_stream_raises_after_the_chunks_that_arrived() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
        await writer.drain()
        writer.transport.abort()

    async def client_side(http: HttpClient, target: Target) -> bytes:
        response = await http.request(b"POST", target, {}, b"{}")
        first = await response.readany()
        with pytest.raises(StreamBroken, match="closed the connection"):
            await response.readany()
        response.close()
        assert http.idle_connections() == 0 and http.busy_connections() == 0
        return first

    assert run(handler, client_side) == b"data: 1"


def test_a_pooled_connection_the_server_closed_while_idle_is_replaced_once() -> None:
    served = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        # Keep-alive is offered, then the connection is dropped without reading the next request: what an upstream
        # whose idle timeout ran out does.
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    async def client_side(http: HttpClient, target: Target) -> list[bytes]:
        bodies = []
        for _ in range(2):
            response = await http.request(b"POST", target, {}, b"{}")
            bodies.append(await response.read())
            response.close()
            await asyncio.sleep(0.02)  # the next request goes out on the pooled connection, which then dies
        return bodies

    assert run(handler, client_side) == [b"ok", b"ok"]
    assert served == 2


def test_cancelling_a_request_closes_its_connection_so_the_upstream_sees_the_abort() -> None:
    saw_close = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # returns when the client closes
        saw_close.set()

    async def client_side(http: HttpClient, target: Target) -> tuple[int, int]:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await http.request(b"POST", target, {}, b"{}")  # the server never answers
        await asyncio.wait_for(saw_close.wait(), 2)
        return http.idle_connections(), http.busy_connections()

    assert run(handler, client_side) == (0, 0)


def test_a_deadline_with_no_headers_raises_timeout_error_and_aborts_the_request() -> None:
    saw_close = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # returns when the client closes
        saw_close.set()

    async def client_side(http: HttpClient, target: Target) -> tuple[float, int, int]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):  # a safety net for the test itself: `waited` tells which one fired
                await http.request(b"POST", target, {}, b"{}", deadline=started + 0.1)  # the server never answers
        waited = loop.time() - started
        await asyncio.wait_for(saw_close.wait(), 2)
        return waited, http.idle_connections(), http.busy_connections()

    waited, idle, busy = run(handler, client_side)
    assert 0.09 <= waited < 0.5
    assert (idle, busy) == (0, 0)


def test_a_deadline_bounds_the_body_until_it_is_lifted() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await asyncio.sleep(0.3)  # well past the first request's deadline
        writer.write(b"4\r\nlate\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def stalls(http: HttpClient, target: Target) -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        response = await http.request(b"POST", target, {}, b"{}", deadline=started + 0.1)
        first = await response.readany()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):  # a safety net, as above
                await response.readany()  # the deadline is still armed
        waited = loop.time() - started
        response.close()
        return first, waited

    first, waited = run(handler, stalls)
    assert first == b"first" and 0.09 <= waited < 0.3

    async def lifted(http: HttpClient, target: Target) -> bytes:
        loop = asyncio.get_running_loop()
        response = await http.request(b"POST", target, {}, b"{}", deadline=loop.time() + 0.1)
        first = await response.readany()
        response.disarm()
        rest = await response.read()  # arrives 0.3 s in, after the deadline that no longer applies
        response.close()
        return first + rest

    assert run(handler, lifted) == b"firstlate"


def test_a_deadline_bounds_the_wait_for_a_pool_slot_and_is_lifted_by_close() -> None:
    gate = asyncio.Event()
    handler = answers_ok_after(gate)

    async def client_side(http: HttpClient, target: Target) -> tuple[float, bytes, bytes]:
        loop = asyncio.get_running_loop()
        one = asyncio.ensure_future(http.request(b"POST", target, {}, b"{}", deadline=loop.time() + 0.2))
        await asyncio.sleep(0.05)
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):  # a safety net, as above
                await http.request(b"POST", target, {}, b"{}", deadline=started + 0.05)  # the only slot is taken
        waited = loop.time() - started
        gate.set()
        response = await one
        body = await response.read()
        response.close()  # back to the pool, its deadline lifted
        await asyncio.sleep(0.25)  # past the first request's deadline: nothing fires on the reused connection
        again = await http.request(b"POST", target, {}, b"{}")
        second = await again.read()
        again.close()
        return waited, body, second

    waited, body, second = run(handler, client_side, limit_per_origin=1)
    assert 0.045 <= waited < 0.2
    assert body == second == b"ok"


def test_a_refused_connection_fails_with_connect_failed() -> None:
    async def main() -> None:
        http = HttpClient(limit_per_origin=1, keepalive_s=4, connect_timeout_s=1)
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectFailed, match="cannot connect"):
            await http.request(b"GET", Target.parse(f"http://127.0.0.1:{port}/v1/models"), {})
        assert http.busy_connections() == 0
        http.close()

    asyncio.run(main())


def test_the_pool_limit_queues_the_request_beyond_it() -> None:
    gate = asyncio.Event()
    handler = answers_ok_after(gate)

    async def client_side(http: HttpClient, target: Target) -> tuple[bool, bytes]:
        one = asyncio.ensure_future(http.request(b"POST", target, {}, b"{}"))
        two = asyncio.ensure_future(http.request(b"POST", target, {}, b"{}"))
        await asyncio.sleep(0.1)
        waiting = http.busy_connections() == 1 and not one.done() and not two.done()
        gate.set()
        response = await one
        body = await response.read()
        response.close()  # frees the only slot: the second request goes out on the same connection
        (await two).close()
        return waiting, body

    assert run(handler, client_side, limit_per_origin=1) == (True, b"ok")


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("nothing may reach the server")

    async def client_side(http: HttpClient, target: Target) -> None:
        with pytest.raises(ValueError, match="line break"):
            await http.request(b"POST", target, {"x-trace": "a\r\nx-evil: 1"}, b"{}")

    run(handler, client_side)


def test_a_large_unread_body_pauses_the_socket_and_is_read_whole() -> None:
    size = 5 * 2**20

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        for _ in range(size // 65536):
            writer.write(b"x" * 65536)
            await writer.drain()

    async def client_side(http: HttpClient, target: Target) -> int:
        response = await http.request(b"POST", target, {}, b"{}")
        await asyncio.sleep(0.2)  # let the server fill the buffer: reading pauses past PAUSE_BYTES
        assert response._buffered <= 2 * 2**20
        body = await response.read()
        response.close()
        return len(body)

    assert run(handler, client_side) == size


def test_a_piped_body_goes_to_the_sink_read_by_read_and_the_read_that_ends_it_stays_for_readany() -> None:
    steps = [asyncio.Event(), asyncio.Event()]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
        writer.write(b"7\r\ndata: 2\r\n")  # both arrive before the client pipes
        await writer.drain()
        await steps[0].wait()
        writer.write(b"7\r\ndata: 3\r\n")
        await writer.drain()
        await steps[1].wait()
        writer.write(b"7\r\ndata: 4\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def client_side(http: HttpClient, target: Target) -> tuple[list[bytes], bytes]:
        sunk: list[bytes] = []
        response = await http.request(b"POST", target, {}, b"{}")
        await asyncio.sleep(0.05)
        response.pipe(lambda data: sunk.append(data) or True)
        assert sunk == [b"data: 1data: 2"]  # what had arrived is handed over at once, in one piece
        waiting = asyncio.ensure_future(response.piped())
        await asyncio.sleep(0)
        waiter = response._waiter
        assert waiter is not None
        steps[0].set()
        await asyncio.sleep(0.05)
        assert sunk[1:] == [b"data: 3"]
        assert response._waiter is waiter and not waiter.done()  # the read went to the sink; the task was not woken
        steps[1].set()
        assert await waiting == "end"
        last = await response.readany()
        assert await response.readany() == b"" and response.at_eof()
        response.close()
        assert http.idle_connections() == 1
        return sunk, last

    assert run(handler, client_side) == ([b"data: 1data: 2", b"data: 3"], b"data: 4")


def test_a_sink_that_is_full_pauses_the_upstream_until_resumed() -> None:
    chunk, count = 65536, 256  # 16 MiB: more than the sockets' buffers between the two sides hold
    written = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(count):
            writer.write(b"%x\r\n%b\r\n" % (chunk, b"x" * chunk))
            await writer.drain()
            written += chunk
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        await reader.read()

    async def client_side(http: HttpClient, target: Target) -> int:
        taken = 0
        full = True

        def sink(data: bytes) -> bool:
            nonlocal taken
            taken += len(data)
            return not full

        response = await http.request(b"POST", target, {}, b"{}")
        response.pipe(sink)
        assert await response.piped() == "paused"
        await asyncio.sleep(0.3)
        paused_at, written_at = taken, written
        assert paused_at <= 2 * 2**20  # one read after the pause at most, then nothing
        assert written_at < chunk * count  # the server is held back by TCP, not buffered whole here
        full = False
        response.resume()
        assert await response.piped() == "end"
        rest = await response.read()
        response.close()
        return taken + len(rest)

    assert run(handler, client_side) == chunk * count


def test_a_reset_while_piping_raises_from_piped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.transport.abort()

    async def client_side(http: HttpClient, target: Target) -> list[bytes]:
        sunk: list[bytes] = []
        response = await http.request(b"POST", target, {}, b"{}")
        response.pipe(lambda data: sunk.append(data) or True)
        with pytest.raises(StreamBroken, match="closed the connection"):
            await response.piped()
        response.close()
        assert http.idle_connections() == 0 and http.busy_connections() == 0
        return sunk

    assert run(handler, client_side) == [b"data: 1"]


def test_a_sink_that_raises_fails_piped_with_its_error_and_the_connection_is_dropped() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7\r\ndata: 1\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"7\r\ndata: 2\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()

    def sink(data: bytes) -> bool:
        raise ValueError("the receiver broke")

    async def client_side(http: HttpClient, target: Target) -> int:
        response = await http.request(b"POST", target, {}, b"{}")
        response.pipe(sink)
        with pytest.raises(ValueError, match="the receiver broke"):
            await response.piped()
        response.close()
        return http.idle_connections() + http.busy_connections()

    assert run(handler, client_side) == 0


def test_https_verifies_the_server_certificate_and_its_host_name() -> None:
    server_tls, trusting = private_ca("127.0.0.1")

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        target = Target.parse(f"https://127.0.0.1:{port}/v1/chat/completions")
        # GIVEN a client that trusts the CA THEN the exchange works over TLS
        http = HttpClient(limit_per_origin=2, keepalive_s=4, connect_timeout_s=2, tls=trusting)
        response = await http.request(b"POST", target, {}, b"{}")
        assert (response.status, await response.read()) == (200, b"ok")
        response.close()
        http.close()
        # GIVEN the system trust store only (the test CA is not in it) THEN the connection is refused, not used
        strict = HttpClient(limit_per_origin=2, keepalive_s=4, connect_timeout_s=2)
        with pytest.raises(ConnectFailed, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await strict.request(b"POST", target, {}, b"{}")
        # GIVEN the same client and a target of its own that trusts the CA (an upstream's ca_file) THEN it works,
        # in a pool of its own, and the system-store target still is refused
        private = Target.parse(f"https://127.0.0.1:{port}/v1/chat/completions", trusting)
        assert private.origin != target.origin
        response = await strict.request(b"POST", private, {}, b"{}")
        assert (response.status, await response.read()) == (200, b"ok")
        response.close()
        with pytest.raises(ConnectFailed, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
            await strict.request(b"POST", target, {}, b"{}")
        assert Target.parse(f"http://127.0.0.1:{port}/v1", trusting).tls is None  # plain http carries no context
        strict.close()
        server.close()

    asyncio.run(main())


# -- on_first: a 200's first body bytes, offered from the connection's read ----------------------------------------

CHUNKED_200 = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n"


def writes_in_steps(head: bytes, *pieces: bytes) -> tuple[Handler, list[asyncio.Event]]:
    """A server that answers with `head` and the first piece in one write, then each next piece once the client sets
    the next of the returned events."""
    steps = [asyncio.Event() for _ in pieces[1:]]

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(head + pieces[0])
        await writer.drain()
        for step, piece in zip(steps, pieces[1:], strict=True):
            await step.wait()
            writer.write(piece)
            await writer.drain()
        await reader.read()  # the client keeps the connection

    return handler, steps


@pytest.mark.parametrize("sent_on", [True, False], ids=["sent-on", "declined"])
def test_on_first_gets_a_200s_first_body_bytes_once_from_the_read_and_readany_still_returns_them(
    sent_on: bool,
) -> None:
    # GIVEN a chunked 200 whose first read brings two chunks and whose body goes on in two later writes
    handler, steps = writes_in_steps(
        CHUNKED_200, b"7\r\ndata: 1\r\n7\r\ndata: 2\r\n", b"7\r\ndata: 3\r\n", b"7\r\ndata: 4\r\n0\r\n\r\n"
    )

    async def client_side(http: HttpClient, target: Target) -> tuple[list[Any], int, list[bytes], int]:
        calls: list[Any] = []

        def on_first(data: bytes) -> bool:
            calls.append((data, asyncio.current_task()))
            return sent_on

        # WHEN it is asked for with an on_first callback, and read as it arrives
        async with asyncio.timeout(2):  # a safety net: a lost chunk would wait for ever
            response = await http.request(b"POST", target, {}, b"{}", on_first=on_first)
            reads = [await response.readany()]
            early = response.sent_early
            for step in steps:
                step.set()
                reads.append(await response.readany())
            assert await response.readany() == b"" and response.at_eof()
        response.close()
        return calls, early, reads, http.idle_connections()

    calls, early, reads, idle = run(handler, client_side)
    # THEN the callback got the first read's body bytes (both chunks, in one piece) once, from the connection's
    # callback (no task running), and not the later reads'
    assert calls == [(b"data: 1data: 2", None)]
    # AND sent_early counts them only if the callback said it sent them on
    assert early == (len(b"data: 1data: 2") if sent_on else 0)
    # AND readany returns them all the same, then the rest; the connection is kept
    assert reads == [b"data: 1data: 2", b"data: 3", b"data: 4"]
    assert idle == 1


@pytest.mark.parametrize("status", [b"500 Internal Server Error", b"404 Not Found"], ids=["500", "404"])
def test_on_first_is_not_called_for_a_response_that_is_not_a_200(status: bytes) -> None:
    # GIVEN an error response whose body comes in two writes, as a 200's stream would
    head = b"HTTP/1.1 %b\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\n\r\n" % status
    handler, steps = writes_in_steps(head, b'9\r\n{"error":\r\n', b"3\r\n{}}\r\n0\r\n\r\n")

    async def client_side(http: HttpClient, target: Target) -> tuple[list[bytes], int, bytes]:
        calls: list[bytes] = []
        # WHEN it is asked for with an on_first callback
        async with asyncio.timeout(2):  # a safety net, as above
            response = await http.request(b"POST", target, {}, b"{}", on_first=lambda data: calls.append(data) or True)
            first = await response.readany()  # the first body bytes have been read
            steps[0].set()
            body = first + await response.read()
        response.close()
        return calls, response.sent_early, body

    # THEN the callback is never called, and the body is read whole
    assert run(handler, client_side) == ([], 0, b'{"error":{}}')


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_on_first_is_not_called_when_the_whole_body_arrives_in_the_read_that_brings_its_first_bytes(
    framing: str,
) -> None:
    # GIVEN a 200 whose whole body (content-length, or chunked with its last chunk) comes in one write with its head
    if framing == "content-length":
        answer = b"HTTP/1.1 200 OK\r\ncontent-length: 14\r\n\r\ndata: 1data: 2"
    else:
        answer = CHUNKED_200 + b"7\r\ndata: 1\r\n7\r\ndata: 2\r\n0\r\n\r\n"
    handler, _ = writes_in_steps(answer, b"")

    async def client_side(http: HttpClient, target: Target) -> tuple[list[bytes], int, bytes, bool]:
        calls: list[bytes] = []
        # WHEN it is asked for with an on_first callback
        async with asyncio.timeout(2):  # a safety net, as above
            response = await http.request(b"POST", target, {}, b"{}", on_first=lambda data: calls.append(data) or True)
            body = await response.read()
        at_eof = response.at_eof()
        response.close()
        return calls, response.sent_early, body, at_eof

    # THEN the callback is not called (the caller ends its own response with these bytes), and readany has them
    assert run(handler, client_side) == ([], 0, b"data: 1data: 2", True)


def test_an_on_first_that_raises_breaks_nothing_and_readany_returns_every_byte() -> None:
    # GIVEN a chunked 200 whose body goes on after its first read, and a callback that raises
    handler, steps = writes_in_steps(CHUNKED_200, b"7\r\ndata: 1\r\n", b"7\r\ndata: 2\r\n0\r\n\r\n")

    def on_first(data: bytes) -> bool:
        raise ValueError("the client's side broke")

    async def client_side(http: HttpClient, target: Target) -> tuple[bytes, bytes, int, int]:
        # WHEN the response is read
        async with asyncio.timeout(2):  # a safety net, as above
            response = await http.request(b"POST", target, {}, b"{}", on_first=on_first)
            first = await response.readany()
            steps[0].set()
            rest = await response.read()
        response.close()
        return first, rest, response.sent_early, http.idle_connections()

    # THEN every byte is read, none counted as sent early, and the connection is kept for the next request
    assert run(handler, client_side) == (b"data: 1", b"data: 2", 0, 1)


@pytest.mark.parametrize("then", ["disarm", "pipe"])
def test_on_first_is_not_called_after_disarm_or_once_the_body_is_piped(then: str) -> None:
    # GIVEN a chunked 200 whose head comes alone, and its body only once the client has disarmed (or piped) it
    handler, steps = writes_in_steps(CHUNKED_200, b"", b"7\r\ndata: 1\r\n7\r\ndata: 2\r\n")

    async def client_side(http: HttpClient, target: Target) -> tuple[list[bytes], list[bytes], int]:
        calls: list[bytes] = []
        sunk: list[bytes] = []
        async with asyncio.timeout(2):  # a safety net, as above
            response = await http.request(b"POST", target, {}, b"{}", on_first=lambda data: calls.append(data) or True)
            # WHEN the caller disarms the response (or pipes it) before any body byte has arrived
            if then == "disarm":
                response.disarm()
            else:
                response.pipe(lambda data: sunk.append(data) or True)
            steps[0].set()
            if then == "disarm":
                sunk.append(await response.readany())
            else:
                while not sunk:
                    await asyncio.sleep(0.01)
        response.close()
        return calls, sunk, response.sent_early

    # THEN the body's bytes go to readany (or the sink) only, and the callback is never called
    assert run(handler, client_side) == ([], [b"data: 1data: 2"], 0)


# -- on_head: a 200's head, offered from the read that parses it ---------------------------------------------------


@pytest.mark.parametrize("head_alone", [True, False], ids=["head-alone", "head-with-first-event"])
def test_on_head_is_called_for_a_head_that_comes_alone_and_left_to_on_first_when_the_first_event_comes_with_it(
    head_alone: bool,
) -> None:
    # GIVEN a chunked 200 whose head comes alone, its first event in a later write (vLLM's server), or with it
    first, rest = (b"", b"7\r\ndata: 1\r\n") if head_alone else (b"7\r\ndata: 1\r\n", b"")
    handler, steps = writes_in_steps(CHUNKED_200, first, rest, b"0\r\n\r\n")

    async def client_side(http: HttpClient, target: Target) -> tuple[list[Any], bytes]:
        calls: list[Any] = []

        def on_first(data: bytes) -> bool:
            calls.append(("first", data))
            return True

        # WHEN it is asked for with both callbacks
        async with asyncio.timeout(2):  # a safety net, as above
            response = await http.request(
                b"POST", target, {}, b"{}", on_head=lambda r: calls.append(("head", r.status)), on_first=on_first
            )
            steps[0].set()
            body = await response.readany()
            steps[1].set()
            body += await response.read()
        response.close()
        return calls, body

    # THEN a head alone goes to on_head at once and its first event to on_first; a head that brings its first event
    # goes to on_first with it (the caller writes both at once), never to on_head
    calls, body = run(handler, client_side)
    assert calls == ([("head", 200), ("first", b"data: 1")] if head_alone else [("first", b"data: 1")])
    assert body == b"data: 1"
