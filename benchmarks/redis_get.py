"""The exact lookup's cost: one Redis GET as the gateway makes it, through redis-py and through its own reader.

The exact lookup is the only Redis command between a cacheable request's arrival and its first token, and the whole
of an exact hit. This program times one GET of a 1 kB value against a real Redis (gateway_bench's, with RediSearch)
on this machine, three ways, interleaved:

  redis-py        `redis.asyncio.Redis.get`, configured as the gateway's store configures it (RESP2, no retries,
                  no health checks; hiredis installed, so redis-py parses with it too)
  gateway reader  `inferstack_gateway.resp.FastReads.get`: the pipelined one-connection reader the gateway uses
  floor           the same command written to a socket by a bare asyncio protocol and parsed by hiredis

at two cadences: "after 20 ms idle", one GET after each 20 ms pause (how the lookup runs at concurrency 1, where each
request arrives on a core that other processes used in between), and "back to back" (a hot loop). Medians and p90
of --requests GETs per way and cadence.

    python benchmarks/redis_get.py                  # 400 GETs per way and cadence, about 30 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import gateway_bench as bench

RESULTS = bench.RESULTS


async def measure(port: int, requests: int) -> dict[str, dict[str, list[float]]]:
    import hiredis
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from inferstack_gateway.resp import FastReads

    url = f"redis://127.0.0.1:{port}/0"
    client = aioredis.Redis.from_url(url, protocol=2, retry=Retry(NoBackoff(), 0), health_check_interval=0)
    reader = FastReads.from_url(url, timeout_s=0.05)
    assert reader is not None
    await client.set("bench:exact", os.urandom(1024))

    class Floor(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = hiredis.Reader()
            self.waiter: asyncio.Future[Any] | None = None

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.parser.feed(data)
            reply = self.parser.gets()
            if reply is not False and self.waiter is not None:
                self.waiter.set_result(reply)

        async def get(self, key: bytes) -> Any:
            self.waiter = asyncio.get_running_loop().create_future()
            self.transport.write(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
            return await self.waiter

    _, floor = await asyncio.get_running_loop().create_connection(Floor, "127.0.0.1", port)
    ways: dict[str, Callable[[], Awaitable[Any]]] = {
        "redis-py": lambda: client.get("bench:exact"),
        "gateway reader": lambda: reader.get(b"bench:exact"),
        "floor": lambda: floor.get(b"bench:exact"),
    }
    out: dict[str, dict[str, list[float]]] = {"after 20 ms idle": {}, "back to back": {}}
    for cadence, pause in (("after 20 ms idle", 0.02), ("back to back", 0.0)):
        samples: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(20):  # warm-up: connections open, code loaded
            for get in ways.values():
                await get()
        for _ in range(requests):
            for name, get in ways.items():
                if pause:
                    await asyncio.sleep(pause)
                started = time.perf_counter()
                value = await get()
                samples[name].append((time.perf_counter() - started) * 1e6)
                assert value is not None and len(value) == 1024
        out[cadence] = samples
    await client.aclose()
    reader.close()
    floor.transport.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", type=Path, default=RESULTS / "redis_get.json")
    args = parser.parse_args()
    import uvloop

    port = bench.free_port()
    workdir = tempfile.mkdtemp(prefix="redis-get-")
    command = [*bench.redis_command(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    load_before = os.getloadavg()
    redis = subprocess.Popen([*command, "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        bench.wait_port(port, redis)
        samples = uvloop.run(measure(port, args.requests))
    finally:
        redis.terminate()
        redis.wait(10)
    report = {
        **bench.run_header(load_before),
        "requests": args.requests,
        "cadences": {
            cadence: {
                name: {"p50_us": statistics.median(values), "p90_us": statistics.quantiles(values, n=10)[-1]}
                for name, values in ways.items()
            }
            for cadence, ways in samples.items()
        },
    }
    bench.write_results(args.out, report, render(report))
    return 0


def render(report: dict[str, Any]) -> str:
    load = " / ".join(f"{value:.2f}" for value in report["load_average_before"])
    lines = [
        f"Redis GET, {report['date']}, {report['machine']}, Python {report['python']}, load average before "
        f"{load}. One 1 kB GET, {report['requests']} per way and cadence, interleaved; µs as the caller sees it.",
        "",
        "| cadence | way | p50 µs | p90 µs |",
        "|---|---|---|---|",
    ]
    for cadence, ways in report["cadences"].items():
        for name, row in ways.items():
            lines.append(f"| {cadence} | {name} | {row['p50_us']:.0f} | {row['p90_us']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
