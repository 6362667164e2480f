"""What one call costs on a cold path, next to the same call in a hot loop.

At concurrency 1 the gateway runs a few hundred microseconds of Python once every few tens of milliseconds, on a
core that the client and the upstream have used in between: its code and data have left the caches. This program
times single calls of the kind found on the path to the first token in that state (after touching 64 MiB, every
page of it, and a 5 ms sleep on the event loop) and in a hot loop, so that the cost of keeping a step on the path
can be judged by its cold price, not by its hot one.

    python benchmarks/cold_calls.py                 # about 20 s
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import gateway_bench as bench
import uvloop
from prometheus_client import CollectorRegistry, Gauge, Histogram
from rbloom import Bloom

from inferstack_gateway.normalize import cache_keys, parse_chat

TRASH = bytearray(64 << 20)
PAGE = 4096


def cases() -> dict[str, Callable[[], Awaitable[None]]]:
    registry = CollectorRegistry()
    gauge = Gauge("g", "a gauge", registry=registry)
    histogram = Histogram("h", "a histogram", ["kind"], registry=registry)
    child = histogram.labels("exact")
    counter = [0]

    async def nothing() -> None:
        pass

    async def int_add() -> None:
        counter[0] += 1

    async def gauge_inc() -> None:
        gauge.inc()

    async def observe() -> None:
        child.observe(0.001)

    async def labels_observe() -> None:
        histogram.labels("exact").observe(0.001)

    async def timeout() -> None:
        async with asyncio.timeout(1.0):
            pass

    async def call_at() -> None:
        asyncio.get_running_loop().call_at(1e12, print).cancel()

    async def task() -> None:
        asyncio.get_running_loop().create_task(nothing()).cancel()

    async def sha256() -> None:
        hashlib.sha256(b"sk-an-api-key-of-usual-length-0123456789").hexdigest()

    async def blake2b() -> None:
        hashlib.blake2b(b"sk-an-api-key-of-usual-length-0123456789", digest_size=32).hexdigest()

    request = parse_chat(
        {"model": "local", "messages": [{"role": "user", "content": "What is the capital of Kenya?"}],
         "temperature": 0, "stream": True, "max_tokens": 16}
    )  # fmt: skip
    scope = {"tenant": "tenant-a", "alias": "local", "model_version": "v1", "prompt_version": "", "tier": "small"}

    async def exact_key() -> None:
        cache_keys(request, **scope)

    async def all_keys() -> None:
        keys = cache_keys(request, **scope)
        keys.partition, keys.tenant_tag  # noqa: B018 (digested when read)

    bloom = Bloom(1_000_000, 0.01)
    bloom.update(b"inferstack:x:%064d" % i for i in range(1000))

    async def bloom_miss() -> None:
        b"inferstack:x:" + b"f" * 64 in bloom  # noqa: B015

    return {
        "nothing (the timer's own cost)": nothing,
        "int += 1": int_add,
        "Gauge.inc()": gauge_inc,
        "Histogram child .observe()": observe,
        "Histogram .labels().observe()": labels_observe,
        "async with asyncio.timeout()": timeout,
        "loop.call_at() + cancel()": call_at,
        "loop.create_task() + cancel()": task,
        "hashlib.sha256(key).hexdigest()": sha256,
        "hashlib.blake2b(key, digest_size=32).hexdigest()": blake2b,
        "cache_keys(): the exact key only (a semantic stage skipped)": exact_key,
        "cache_keys() with the semantic partition and tenant tag": all_keys,
        "the miss filter's lookup (rbloom, a key it lacks)": bloom_miss,
    }


async def cold(call: Callable[[], Awaitable[None]], samples: int) -> float:
    times = []
    for _ in range(samples):
        TRASH[::PAGE] = b"\1" * (len(TRASH) // PAGE)
        await asyncio.sleep(0.005)
        started = time.perf_counter_ns()
        await call()
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


async def hot(call: Callable[[], Awaitable[None]], loops: int) -> float:
    for _ in range(loops // 10):
        await call()
    started = time.perf_counter_ns()
    for _ in range(loops):
        await call()
    return (time.perf_counter_ns() - started) / loops / 1000


async def measure(samples: int, loops: int) -> list[dict[str, Any]]:
    return [
        {"call": name, "cold_us": round(await cold(call, samples), 2), "hot_us": round(await hot(call, loops), 3)}
        for name, call in cases().items()
    ]


def render(report: dict[str, Any]) -> str:
    lines = [
        f"Cold and hot calls, {report['date']}, {report['machine']}, Python {report['python']}. Median µs of one "
        f"call: cold ({report['samples']} calls, each after {report['trash_mib']} MiB touched and 5 ms asleep on "
        f"the event loop) and hot (a loop of {report['loops']}).",
        "",
        "| call | cold µs | hot µs |",
        "|---|---|---|",
    ]
    lines += [f"| {row['call']} | {row['cold_us']:.1f} | {row['hot_us']:.2f} |" for row in report["calls"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=150, help="cold calls per case (default 150)")
    parser.add_argument("--loops", type=int, default=20000, help="hot calls per case (default 20000)")
    parser.add_argument("--out", type=Path, default=bench.RESULTS / "cold_calls.json")
    args = parser.parse_args()
    load_before = os.getloadavg()
    calls = uvloop.run(measure(args.samples, args.loops))
    report = {
        **bench.run_header(load_before),
        "samples": args.samples,
        "loops": args.loops,
        "trash_mib": len(TRASH) >> 20,
        "calls": calls,
    }
    bench.write_results(args.out, report, render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
