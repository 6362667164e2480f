"""Where the gateway's added TTFT goes inside its process: timestamps at each hop of one streamed request.

gateway_bench.py measures the added time from outside; this program runs the gateway (the real app on its own HTTP
protocol under uvicorn's server, as `inferstack-gateway` serves it, with no cache so every request is relayed) in its
own process with a probe at each hop, while a second process drives it with the official openai client at c=1
against gateway_bench's stand-in upstream (20 ms TTFT). The probes wrap functions at their boundaries (one
perf_counter call each) and change nothing else. It prints the median time between consecutive probes over the
requests after a warm-up:

  request leg   bytes of the request read by the protocol -> the app called -> the request validated -> admitted
                -> the upstream call started -> the request written to the upstream socket
  response leg  the upstream's first content bytes read -> the first content chunk handed to the protocol for the
                client (since 2026-11-28 from the upstream connection's read itself, with the response's head:
                `Cycle.start_stream`; before, after the request's task had woken, passed the failover point and
                sent the head through ASGI)

The time from handing a chunk to the protocol to its socket write returning is not shown: on a 2-core machine the
write wakes the client, which often preempts the gateway on the same core, so that interval measures the client's
work.

With `--fine`, more probes split the first two hops: inside the protocol (the request's head parsed: its start, URL
and headers; `on_headers_complete`, which builds the ASGI scope and cycle and creates the request's task; the body;
the task's first step) and inside the gateway's handler (authentication, the body read, JSON parsing, validation). Each
probe is one more wrapped call on a cold path, so the fine run's totals are a few µs per probe above the plain run's.

With `--gap-ms`, the driver waits that long after each request, as the gateway does between its requests in
gateway_bench.py's c=1 runs (about 70 ms while the other paths take their turns). Back to back (the default), the
previous request's work after its answer (its task's end, the deferred batch) can still be running when the next one
arrives, and lands in "data handled -> task started" (105 µs there against 7 µs with a 60 ms gap, 2026-11-28).

    python benchmarks/gateway_hops.py                 # 400 requests, about 30 s
    python benchmarks/gateway_hops.py --fine          # the same, with the first two hops split
    python benchmarks/gateway_hops.py --fine --gap-ms 60
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gateway_bench as bench

HOPS = (
    "request read",
    "app called",
    "validated",
    "admitted",
    "upstream call",
    "upstream write",
    "upstream content read",
    "content out",
)

PROTOCOL_HOPS = (
    "message begun",
    "url read",
    "headers read",
    "headers parsed",
    "message complete",
    "data handled",
    "task started",
)
"""--fine: between "request read" and "app called"."""
HANDLER_HOPS = ("complete called", "authenticated", "body read", "json parsed")
"""--fine: between "app called" and "validated"."""


def hops(fine: bool) -> tuple[str, ...]:
    if not fine:
        return HOPS
    return (HOPS[0], *PROTOCOL_HOPS, HOPS[1], *HANDLER_HOPS, *HOPS[2:])


def install_probes(stamps: dict[str, float], done: Callable[[], None], fine: bool = False) -> None:
    """Wrap the functions at each hop; `stamps` is the request in flight (c=1), `done` runs after its last hop."""
    from inferstack_gateway import app, auth, http_client, server

    def wrap_sync(owner: Any, name: str, before: Callable[..., None] | None, after: str | None) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before(*args)
            result = original(*args, **kwargs)
            if after is not None:
                stamps[after] = time.perf_counter()
            return result

        setattr(owner, name, wrapper)

    def wrap_async(
        owner: Any, name: str, on_call: str | None, on_return: str | None, when: Callable[..., bool]
    ) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)  # uvicorn reads the app's signature
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            hit = when(*args)
            if hit and on_call is not None:
                stamps[on_call] = time.perf_counter()
            result = await original(*args, **kwargs)
            if hit and on_return is not None:
                stamps[on_return] = time.perf_counter()
            return result

        setattr(owner, name, wrapper)

    def request_read(protocol: Any, data: bytes) -> None:
        if data.startswith(b"POST"):
            stamps.clear()
            stamps["request read"] = time.perf_counter()

    def upstream_write(connection: Any, data: bytes) -> None:
        if data.startswith(b"POST"):
            stamps["upstream write"] = time.perf_counter()

    def upstream_read(connection: Any, data: bytes) -> None:
        if b"tok0" in data and "upstream content read" not in stamps:
            stamps["upstream content read"] = time.perf_counter()

    def stamp(hop: str) -> Callable[..., None]:
        return lambda *args: stamps.__setitem__(hop, time.perf_counter())

    wrap_sync(server.GatewayHttpProtocol, "data_received", request_read, "data handled" if fine else None)
    if fine:
        protocol, cycle = server.GatewayHttpProtocol, server.Cycle
        wrap_sync(protocol, "on_message_begin", None, "message begun")
        wrap_sync(protocol, "on_url", None, "url read")
        wrap_sync(protocol, "on_headers_complete", stamp("headers read"), "headers parsed")
        wrap_sync(protocol, "on_message_complete", None, "message complete")
        wrap_async(cycle, "run_asgi", "task started", None, lambda self, app: self.scope.get("method") == "POST")
        wrap_sync(app, "parse_json_body", None, "json parsed")
        wrap_sync(auth.KeyTable, "authenticate", None, "authenticated")
        wrap_async(app.Gateway, "_read_body", None, "body read", lambda *a: True)
        wrap_async(app.Gateway, "_complete", "complete called", None, lambda *a: True)
    wrap_sync(http_client._Connection, "send", upstream_write, None)
    wrap_sync(http_client._Connection, "data_received", upstream_read, None)
    wrap_sync(app, "parse_chat", None, "validated")
    is_post = lambda self, scope, *rest: scope.get("method") == "POST"  # noqa: E731
    wrap_async(app.Gateway, "_http", "app called", None, is_post)
    wrap_async(app.Gateway, "_admit", None, "admitted", lambda *a: True)
    original_open = app.open_upstream

    async def open_upstream(*args: Any, **kwargs: Any) -> Any:
        stamps["upstream call"] = time.perf_counter()
        return await original_open(*args, **kwargs)

    app.open_upstream = open_upstream  # type: ignore[assignment]

    def content_out(data: bytes) -> None:
        if b"tok0" in data and "content out" not in stamps:
            stamps["content out"] = time.perf_counter()
            done()

    wrap_sync(server.Cycle, "start_stream", lambda self, headers, first: content_out(first), None)
    wrap_sync(server.ChunkWriter, "write", lambda self, data: content_out(data), None)
    original_send = server.Cycle.send

    async def send(self: Any, message: Any) -> None:
        content_out(message.get("body", b""))
        await original_send(self, message)

    server.Cycle.send = send  # type: ignore[method-assign]


DRIVER = """
import asyncio, socket, sys
sys.path.insert(0, {here!r})
import gateway_bench as bench, openai, uvloop
async def main():
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:{port}/v1", api_key={key!r}, max_retries=0,
                                http_client=openai.DefaultAioHttpClient())
    for i in range({n}):
        await bench.one(client, bench.chat(f"hops {{i}}", 1.0))
        await asyncio.sleep({gap_s})
    await client.close()
uvloop.run(main())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--fine", action="store_true", help="split the first two hops (uvicorn, the handler)")
    parser.add_argument(
        "--gap-ms", type=float, default=0.0,
        help="idle time between requests (default 0: back to back; gateway_bench's c=1 gives the gateway ~70 ms)",
    )  # fmt: skip
    args = parser.parse_args()

    import uvicorn
    import uvloop
    import yaml

    from inferstack_gateway.app import Gateway
    from inferstack_gateway.config import load_config
    from inferstack_gateway.server import GatewayHttpProtocol

    rows: list[dict[str, float]] = []
    stamps: dict[str, float] = {}

    sequence = hops(args.fine)

    def done() -> None:
        if all(hop in stamps for hop in sequence):
            rows.append(dict(stamps))

    install_probes(stamps, done, args.fine)
    upstream_port, port = bench.free_port(), bench.free_port()
    upstream = subprocess.Popen(
        [sys.executable, bench.__file__, "--serve-upstream", str(upstream_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        bench.wait_port(upstream_port, upstream)
        config_path = Path(tempfile.mkdtemp(prefix="gateway-hops-")) / "gateway.yaml"
        config_path.write_text(
            yaml.safe_dump(
                {
                    "server": {"host": "127.0.0.1", "port": port, "access_log": False},
                    "upstreams": {"main": {"url": f"http://127.0.0.1:{upstream_port}/v1"}},
                    "tiers": {"small": {"upstreams": ["main"]}},
                    "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
                    "auth": {"keys": [{"tenant": "bench", "name": "bench", "key": bench.API_KEY}]},
                    "limits": {"requests_per_minute": 10**8, "tokens_per_minute": 10**9},
                }
            )
        )
        server = uvicorn.Server(
            uvicorn.Config(
                Gateway(load_config(str(config_path))), host="127.0.0.1", port=port, loop="uvloop",
                http=GatewayHttpProtocol, ws="none", lifespan="on", access_log=False, log_level="warning",
                server_header=False, proxy_headers=False,
            )
        )  # fmt: skip
        script = DRIVER.format(
            here=str(Path(__file__).parent), port=port, key=bench.API_KEY, n=args.requests, gap_s=args.gap_ms / 1000
        )

        async def serve() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.05)
            driver = await asyncio.create_subprocess_exec(sys.executable, "-c", script)
            await driver.wait()
            server.should_exit = True
            await task

        uvloop.run(serve())
    finally:
        upstream.terminate()
        upstream.wait(10)
    measured = rows[args.warmup :]
    if not measured:
        print("no complete request was probed", file=sys.stderr)
        return 1
    print(f"{len(measured)} requests after {args.warmup} of warm-up; median µs between consecutive hops\n")
    print("| from | to | median µs |\n|---|---|---|")
    for before, after in itertools.pairwise(sequence):
        if after == "upstream content read":
            waited = statistics.median((r[after] - r[before]) * 1e6 for r in measured)
            print(f"| {before} | {after} | (the upstream: {waited:,.0f}) |")
            continue
        print(f"| {before} | {after} | {statistics.median((r[after] - r[before]) * 1e6 for r in measured):.0f} |")
    request = statistics.median((r["upstream write"] - r["request read"]) * 1e6 for r in measured)
    response = statistics.median((r["content out"] - r["upstream content read"]) * 1e6 for r in measured)
    print(f"\nrequest leg {request:.0f} µs, response leg {response:.0f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
