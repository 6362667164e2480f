"""The gateway as it is deployed: its console script in a process of its own, under sustained load."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from gateway_harness import API_KEY_A, free_port, sha256

RSS_LIMIT_MB = 200


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.fixture
def gateway_process(
    upstreams: Any, redis_server: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    upstream = upstreams("up", tokens=16)
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "access_log": True, **getattr(request, "param", {})},
        "redis": {"url": redis_server.url, "key_prefix": f"proc{port}:"},
        "upstreams": {"main": {"url": upstream.base}},
        "tiers": {"small": {"upstreams": ["main"]}},
        "models": {"local": {"tier": "small"}},
        "auth": {"keys": [{"tenant": "a", "name": "a", "key_sha256": sha256(API_KEY_A)}]},
        "limits": {"requests_per_minute": 10_000_000, "tokens_per_minute": 1_000_000_000},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    script = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
    process = subprocess.Popen([script, "--config", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            time.sleep(0.05)
        assert process.poll() is None, "the gateway exited during startup"
    yield url, process
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_resident_memory_under_sustained_load_stays_under_200_mb_per_worker(
    gateway_process: tuple[str, subprocess.Popen[bytes]],
) -> None:
    # GIVEN the gateway process, serving streams, cache misses and cache hits with its access log on
    url, process = gateway_process
    headers = {"authorization": f"Bearer {API_KEY_A}", "content-type": "application/json"}

    async def load(total: int, concurrency: int) -> int:
        done = 0

        async def worker(client: aiohttp.ClientSession, start: int) -> None:
            nonlocal done
            for i in range(start, total, concurrency):
                content = f"question {i % 500} " + "x" * (i % 2000)
                body = {"model": "local", "stream": i % 2 == 0, "temperature": 0 if i % 3 == 0 else 1,
                        "messages": [{"role": "user", "content": content}]}  # fmt: skip
                async with client.post(f"{url}/v1/chat/completions", headers=headers, data=orjson.dumps(body)) as r:
                    answer = await r.read()
                    assert r.status == 200, answer
                done += 1

        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as client:
            await asyncio.gather(*(worker(client, w) for w in range(concurrency)))
        return done

    # WHEN it serves a few thousand requests at 32 concurrent
    assert asyncio.run(load(3000, 32)) == 3000
    # THEN its resident memory peaked under the limit, for each of its processes (one per worker)
    pids = [process.pid, *_children(process.pid)]
    peaks = {pid: peak_rss_mb(pid) for pid in pids}
    assert all(peak <= RSS_LIMIT_MB for peak in peaks.values()), peaks
    assert process.poll() is None


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()] if path.exists() else []


def _idle_connection_open_after(url: str, idle_s: float) -> bool:
    """Whether a keep-alive connection the gateway has answered on is still open after `idle_s` of silence."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(idle_s)
        sock.settimeout(0.2)
        try:
            return sock.recv(1) != b""  # b"": the server closed it
        except TimeoutError:
            return True  # nothing to read, and not closed


def test_an_idle_client_connection_outlives_the_client_pools_idle_time(
    gateway_process: tuple[str, subprocess.Popen[bytes]],
) -> None:
    # uvicorn's default of 5 s closed connections that clients (aiohttp's pool keeps them 15 s) were about to reuse
    url, _ = gateway_process
    assert _idle_connection_open_after(url, 6.0)


@pytest.mark.parametrize("gateway_process", [{"keepalive_s": 1}], indirect=True)
def test_server_keepalive_s_closes_an_idle_client_connection(
    gateway_process: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, _ = gateway_process
    assert not _idle_connection_open_after(url, 2.0)
