"""Spillover benchmark (issue 11): what the hybrid-burst decision adds, and an edge cache hit end to end.

Three measurements, in one run, on this machine:

1. The decision in-process: `TierRoute.pick` (spillover.py) timed with `time.perf_counter_ns`, over many decisions,
   below the threshold, while spilling, and for a residency-local request, beside the plain dict lookup of a tier's
   upstream list that the request path did before. Target: <= 0.1 ms per decision.
2. End to end, below the threshold: a gateway whose tier has a hub and spillover configured (thresholds never
   reached) against the same gateway config without them, both in front of the same stand-in upstream, interleaved
   runs at concurrency 1 with the official `openai` client (TTFT to the first content token, as gateway_bench.py).
   The difference is what configuring spillover costs a request that stays local.
3. An edge cache hit: an exact-cache hit through the spillover gateway with a small local Redis (the edge tier's
   cache: exact on, semantic off), streamed, the whole answer end to end as the client sees it. Target: p50 <= 2 ms.

    python benchmarks/spillover_bench.py             # writes benchmarks/results/spillover_bench.{json,md}
    python benchmarks/spillover_bench.py --quick     # fewer decisions and requests: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gateway_bench as gb

RESULTS = gb.RESULTS
API_KEY = "sk-bench"
TARGET_DECISION_MS = 0.1
TARGET_EDGE_HIT_P50_MS = 2.0


# ---------------------------------------------------------------------------------------------------------------
# 1. The decision, in-process.


def decision_config(spill_above: int) -> dict[str, Any]:
    return {
        "upstreams": {
            "local": {"url": "http://local.invalid:8000/v1"},
            "hub": {"url": "http://hub.invalid:8080/v1", "kind": "remote", "api_key": "sk-hub"},
        },
        "tiers": {
            "plain": {"upstreams": ["local"]},
            "burst": {"upstreams": ["local", "hub"], "spillover": {"spill_above_inflight": spill_above}},
        },
        "models": {"m": {"tier": "burst", "cache": {"policy": "never"}}},
        "auth": {"enabled": False},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_decisions(decisions: int) -> dict[str, Any]:
    from inferstack_gateway.config import parse_config
    from inferstack_gateway.metrics import Metrics
    from inferstack_gateway.spillover import build_routes
    from inferstack_gateway.upstream import Upstream

    config = parse_config(decision_config(spill_above=8), env={})
    metrics = Metrics()
    upstreams = {name: Upstream(name, cfg, metrics) for name, cfg in config.upstreams.items()}
    routes = build_routes(config, upstreams, metrics)
    tiers = {name: [upstreams[u] for u in tier.upstreams] for name, tier in config.tiers.items()}
    local = upstreams["local"]
    clock = time.perf_counter_ns
    batch = 1000

    def timed(name: str, step: Any, loads: list[int]) -> dict[str, Any]:
        """Per-decision time from batches of 1000 (clock overhead spread thin), and single decisions' tail."""
        per_batch: list[float] = []
        singles: list[float] = []
        n = len(loads)
        for start in range(0, decisions, batch):
            begin = clock()
            for i in range(start, start + batch):
                local.inflight = loads[i % n]
                step()
            per_batch.append((clock() - begin) / batch)
        for i in range(min(decisions, 200_000)):
            local.inflight = loads[i % n]
            begin = clock()
            step()
            singles.append(clock() - begin)
        # The loop's own cost (setting inflight, the call of a no-op) measured the same way, to subtract.
        return {
            "path": name,
            "ns_per_decision_p50": statistics.median(per_batch),
            "ns_per_decision_p99_of_batches": percentile(per_batch, 0.99),
            "single_ns_p50": statistics.median(singles),
            "single_ns_p99": percentile(singles, 0.99),
            "single_ns_p999": percentile(singles, 0.999),
            "single_ns_max": max(singles),
        }

    burst, plain = routes["burst"], routes["plain"]
    below = [0, 1, 2, 3, 4, 5, 6, 7]  # under spill_above_inflight = 8: never spills
    around = [6, 7, 8, 9, 10, 9, 8, 7, 6, 5, 4, 3]  # crosses both thresholds: spills and returns
    rows = [
        timed("baseline: tiers[name] (the lookup it replaces)", lambda: tiers["burst"], below),
        timed("no spillover configured: pick()", lambda: plain.pick(False), below),
        timed("spillover, below the threshold: pick()", lambda: burst.pick(False), below),
        timed("spillover, crossing the thresholds: pick()", lambda: burst.pick(False), around),
        timed("residency local: pick()", lambda: burst.pick(True), around),
        timed("clock overhead (empty step)", lambda: None, below),
    ]
    return {"decisions": decisions, "rows": rows}


# ---------------------------------------------------------------------------------------------------------------
# 2 and 3. Processes.


def gateway_config(port: int, upstream: str, hub: str | None, redis_url: str, prefix: str) -> dict[str, Any]:
    upstreams: dict[str, Any] = {"local": {"url": upstream}}
    tier: dict[str, Any] = {"upstreams": ["local"]}
    if hub is not None:
        upstreams["hub"] = {"url": hub, "kind": "remote", "api_key": "${HUB_API_KEY}"}
        tier = {"upstreams": ["local", "hub"], "spillover": {"spill_above_inflight": 64, "return_below_inflight": 32}}
    return {
        "server": {"port": port, "access_log": True},
        "redis": {"url": redis_url, "key_prefix": prefix},
        "upstreams": upstreams,
        "tiers": {"small": tier},
        # The edge tier's cache: exact only (the semantic stage needs the embedding model; gateway_bench covers it).
        "models": {"local": {"tier": "small", "cache": {"policy": "temperature_zero", "exact": True}}},
        "auth": {"keys": [{"tenant": "site", "name": "bench", "key": "${GATEWAY_API_KEY}"}]},
        "limits": {"requests_per_minute": 100_000_000, "tokens_per_minute": 2_000_000_000},
    }


async def complete(client: Any, body: dict[str, Any]) -> tuple[float, str]:
    """The whole answer, as the official client sees it (the last event of a stream), and the cache header."""
    started = time.perf_counter()
    response = await client.chat.completions.with_raw_response.create(**body)
    parsed = response.parse()
    if body.get("stream"):
        async for _ in parsed:
            pass
    return time.perf_counter() - started, response.headers.get("x-inferstack-cache", "-")


async def raw_post(session: Any, url: str, body: dict[str, Any]) -> tuple[float, str]:
    """The same over a bare keep-alive aiohttp client: the gateway's and the network's share, without the client's."""
    import orjson

    started = time.perf_counter()
    async with session.post(
        url, data=orjson.dumps(body), headers={"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
    ) as response:
        await response.read()
    return time.perf_counter() - started, response.headers.get("x-inferstack-cache", "-")


async def warm(client: Any, body: dict[str, Any] | None = None) -> None:
    """One request before a phase: a keep-alive connection left idle past uvicorn's 5 s was closed by the server,
    and the first request on it fails (the client is built without retries, so that no retry hides in a timing)."""
    for _ in range(2):
        try:
            await (gb.one(client, gb.chat("warm up", 1.0)) if body is None else complete(client, body))
            return
        except Exception:
            continue


async def warm_raw(session: Any, url: str) -> None:
    body = {"model": "local", "temperature": 1, "messages": [{"role": "user", "content": "warm up"}]}
    for _ in range(2):
        try:
            await raw_post(session, url, body)
            return
        except Exception:
            continue


def summarize(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "requests": len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": statistics.quantiles(ms, n=100, method="inclusive")[98],
    }


STATIC_ANSWER = {
    "id": "cmpl-static", "object": "chat.completion", "created": 1700000000, "model": "local",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "".join(f" tok{i}" for i in range(16))}}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26},
}  # fmt: skip


def serve_static(port: int) -> None:
    """A server answering every request at once with the same completion: the client's own floor, measured in the
    same run (uvicorn + uvloop + httptools, like the gateway)."""
    import orjson
    import uvicorn

    body = orjson.dumps(STATIC_ANSWER)
    headers = [(b"content-type", b"application/json"), (b"x-inferstack-cache", b"static")]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await gb.read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


def end_to_end(requests: int, runs: int, workdir: Path) -> dict[str, Any]:
    servers = gb.Servers()
    start = servers.start
    try:
        ports = {name: gb.free_port() for name in ("upstream", "hub", "redis", "plain", "spill", "static")}
        me = [sys.executable, str(Path(gb.__file__)), "--ttft-ms", "20", "--itl-ms", "2", "--tokens", "16"]
        start([*me, "--serve-upstream", str(ports["upstream"])], ports["upstream"])
        start([*me, "--serve-upstream", str(ports["hub"])], ports["hub"])
        start([sys.executable, __file__, "--serve-static", str(ports["static"])], ports["static"])
        # A small Redis, as an edge site runs it: no persistence, 64 MB.
        start([*gb.redis_command(), "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--maxmemory", "64mb", "--dir", str(workdir)], ports["redis"])  # fmt: skip
        redis_url = f"redis://127.0.0.1:{ports['redis']}/0"
        upstream = f"http://127.0.0.1:{ports['upstream']}/v1"
        binary = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
        env = {**os.environ, "GATEWAY_API_KEY": API_KEY, "HUB_API_KEY": "sk-hub-bench"}
        for name, hub in (("plain", None), ("spill", f"http://127.0.0.1:{ports['hub']}/v1")):
            path = workdir / f"{name}.yaml"
            config = gateway_config(ports[name], upstream, hub, redis_url, f"bench-{name}:")
            config["server"]["access_log"] = False
            path.write_text(yaml.safe_dump(config))
            start([binary, "--config", str(path)], ports[name], env=env)

        async def bench() -> dict[str, Any]:
            import openai

            clients = {
                name: openai.AsyncOpenAI(
                    base_url=url, api_key=API_KEY, max_retries=0, timeout=60, http_client=openai.DefaultAioHttpClient()
                )
                for name, url in (
                    ("direct", upstream),
                    ("plain", f"http://127.0.0.1:{ports['plain']}/v1"),
                    ("spill", f"http://127.0.0.1:{ports['spill']}/v1"),
                )
            }
            for client in clients.values():
                await gb.one(client, gb.chat("warm up", 1.0))
            ttft: dict[str, list[list[float]]] = {name: [] for name in clients}
            hit_kinds = (
                "openai client, non-streamed",
                "openai client, streamed (SSE replay)",
                "bare aiohttp client",
                "floor: openai client, non-streamed, static server",
                "floor: bare aiohttp client, static server",
            )
            static = openai.AsyncOpenAI(
                base_url=f"http://127.0.0.1:{ports['static']}/v1", api_key=API_KEY, max_retries=0, timeout=60,
                http_client=openai.DefaultAioHttpClient(),
            )  # fmt: skip
            await complete(static, {"model": "local", "messages": [{"role": "user", "content": "warm up"}]})
            hits: dict[str, list[float]] = {kind: [] for kind in hit_kinds}
            not_hits: dict[str, int] = {}
            import aiohttp

            session = aiohttp.ClientSession()
            spill_url = f"http://127.0.0.1:{ports['spill']}/v1/chat/completions"
            static_url = f"http://127.0.0.1:{ports['static']}/v1/chat/completions"
            for run in range(runs):
                order = list(clients)[run % 3 :] + list(clients)[: run % 3]
                for name in order:
                    await warm(clients[name])
                    values = []
                    for i in range(requests):
                        value, _ = await gb.one(clients[name], gb.chat(f"relay r{run} {i}", 1.0))
                        values.append(value)
                    ttft[name].append(values)
                # The edge cache hit: one non-streamed miss stores the answer, with its usage; `stream` is not part
                # of the cache key, so the same question is then a hit streamed or not. (An answer stored from a
                # stream without usage would answer only such streams: a non-streamed answer needs usage.)
                streamed = gb.chat(f"When does shift {run} start?", 0.0)
                plain = {k: v for k, v in streamed.items() if k != "stream"}
                await warm(clients["spill"])
                await warm(static, {"model": "local", "messages": [{"role": "user", "content": "warm up"}]})
                for url in (spill_url, static_url):
                    await warm_raw(session, url)
                await complete(clients["spill"], plain)
                await asyncio.sleep(0.3)  # the write-back lands after the response
                for _ in range(requests):
                    for kind in hit_kinds:
                        if "bare" in kind:
                            value, result = await raw_post(
                                session, static_url if "static" in kind else spill_url, plain
                            )
                        elif "static" in kind:
                            value, result = await complete(static, plain)
                        else:
                            value, result = await complete(clients["spill"], streamed if "streamed" in kind else plain)
                        if result in ("hit", "static"):
                            hits[kind].append(value)
                        else:  # an exact stage over its 5 ms budget on a loaded machine goes upstream: not a hit
                            not_hits[result] = not_hits.get(result, 0) + 1
            await session.close()
            await static.close()
            for client in clients.values():
                await client.close()
            per_run = {name: [summarize(values) for values in runs_] for name, runs_ in ttft.items()}
            medians = {
                name: {
                    "ttft_p50_ms": statistics.median(r["p50_ms"] for r in rows),
                    "ttft_p99_ms": statistics.median(r["p99_ms"] for r in rows),
                }
                for name, rows in per_run.items()
            }
            added = [s["p50_ms"] - p["p50_ms"] for s, p in zip(per_run["spill"], per_run["plain"], strict=True)]
            return {
                "ttft": medians,
                "per_run": per_run,
                "spill_minus_plain_p50_ms": statistics.median(added),
                "spill_minus_plain_p50_ms_spread": [min(added), max(added)],
                "edge_hit": {kind: summarize(values) for kind, values in hits.items() if values},
                "edge_not_hits": not_hits,
            }

        import uvloop

        return uvloop.run(bench())
    finally:
        servers.stop()


# ---------------------------------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    load = report["load_average_before"]
    lines = [
        f"Spillover benchmark, {report['date']}, {report['machine']}, Python {report['python']}, load average "
        f"before the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min), after "
        f"{report['load_average_after'][0]:.2f}.",
        "",
        f"**The decision** (`TierRoute.pick`, in-process, {report['decision']['decisions']:,} decisions per row; "
        "per decision from batches of 1,000, and single decisions timed one by one, clock overhead included):",
        "",
        "| path | ns/decision p50 | batch p99 | single p50 ns | single p99 ns | single p99.9 ns | single max ns |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["decision"]["rows"]:
        lines.append(
            f"| {row['path']} | {row['ns_per_decision_p50']:.0f} | {row['ns_per_decision_p99_of_batches']:.0f} | "
            f"{row['single_ns_p50']:.0f} | {row['single_ns_p99']:.0f} | {row['single_ns_p999']:.0f} | "
            f"{row['single_ns_max']:.0f} |"
        )
    e2e = report["end_to_end"]
    lines += [
        "",
        f"**End to end**, c=1, {report['requests']} requests per path and run, median of {report['runs']} interleaved "
        "runs; stand-in upstream TTFT 20 ms, 16 tokens; official `openai` client, streaming, "
        "TTFT = first content token:",
        "",
        "| path | TTFT p50 ms | TTFT p99 ms |",
        "|---|---|---|",
    ]
    names = {"direct": "direct (the limit)", "plain": "gateway, local tier only",
             "spill": "gateway, local tier + hub + spillover (below the threshold)"}  # fmt: skip
    for name, row in e2e["ttft"].items():
        lines.append(f"| {names[name]} | {row['ttft_p50_ms']:.2f} | {row['ttft_p99_ms']:.2f} |")
    low, high = e2e["spill_minus_plain_p50_ms_spread"]
    hit = e2e["edge_hit"]
    lines += [
        "",
        f"Spillover configured vs not, TTFT p50 difference: {e2e['spill_minus_plain_p50_ms']:+.3f} ms "
        f"[{low:+.3f}..{high:+.3f}] over runs (noise of a shared machine: the decision itself is the row above).",
        "",
        "| target | value | |",
        "|---|---|---|",
    ]
    decision = next(r for r in report["decision"]["rows"] if r["path"].startswith("spillover, crossing"))
    ms = decision["ns_per_decision_p50"] / 1e6
    single = decision["single_ns_p99"] / 1e6
    lines.append(
        f"| spillover decision <= {TARGET_DECISION_MS} ms | {ms:.5f} ms per decision (single p99 {single:.5f} ms) | "
        f"{'met' if max(ms, single) <= TARGET_DECISION_MS else 'MISSED'} |"
    )
    for kind, row in hit.items():
        if kind.startswith("floor"):
            lines.append(f"| {kind} (no target: the client's own cost) | p50 {row['p50_ms']:.2f} ms, "
                         f"p99 {row['p99_ms']:.2f} ms | |")  # fmt: skip
            continue
        lines.append(
            f"| edge exact-cache hit end to end p50 <= {TARGET_EDGE_HIT_P50_MS} ms, {kind} | "
            f"p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} ms ({row['requests']} hits) | "
            f"{'met' if row['p50_ms'] <= TARGET_EDGE_HIT_P50_MS else 'MISSED'} |"
        )
    pairs = (
        ("openai client, non-streamed", "floor: openai client, non-streamed, static server"),
        ("bare aiohttp client", "floor: bare aiohttp client, static server"),
    )
    for measured, floor in pairs:
        if measured in hit and floor in hit:
            share = hit[measured]["p50_ms"] - hit[floor]["p50_ms"]
            lines.append(f"| the gateway's share of a hit (p50 minus the floor), {measured} | {share:+.2f} ms | |")
    if e2e["edge_not_hits"]:
        lines.append(
            "| (hit requests answered otherwise: exact stage over its 5 ms budget) | "
            f"{', '.join(f'{k} {v}' for k, v in sorted(e2e['edge_not_hits'].items()))} | |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=1_000_000, help="decisions per row (default 1,000,000)")
    parser.add_argument("--requests", type=int, default=300, help="requests per path and run (default 300)")
    parser.add_argument("--runs", type=int, default=3, help="interleaved end-to-end runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="100,000 decisions, 2 runs of 100 requests")
    parser.add_argument("--out", type=Path, default=RESULTS / "spillover_bench.json")
    parser.add_argument("--serve-static", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_static:
        serve_static(args.serve_static)
        return 0
    if args.quick:
        args.decisions, args.requests, args.runs = 100_000, 100, 2
    load_before = os.getloadavg()
    decision = measure_decisions(args.decisions)
    workdir = Path(tempfile.mkdtemp(prefix="spillover-bench-"))
    try:
        e2e = end_to_end(args.requests, args.runs, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        **gb.run_header(load_before),
        "requests": args.requests,
        "runs": args.runs,
        "decision": decision,
        "end_to_end": e2e,
    }
    gb.write_results(args.out, report, render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
