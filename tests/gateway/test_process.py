"""The gateway as it is deployed: its console script in a process of its own, under sustained load."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
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


def test_the_gateway_serves_https_itself_with_a_mounted_certificate(
    upstreams: Any, redis_server: Any, tmp_path: Path
) -> None:
    # Off AWS the load balancer forwards TCP: the gateway terminates TLS, so keys and prompts never cross in clear text.
    import openai
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    cert.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    port = free_port()
    config = {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False,
                   "tls_cert_file": str(tmp_path / "tls.crt"), "tls_key_file": str(tmp_path / "tls.key")},
        "upstreams": {"main": {"url": upstreams("up").base}},
        "tiers": {"small": {"upstreams": ["main"]}},
        "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
        "auth": {"keys": [{"tenant": "a", "name": "a", "key_sha256": sha256(API_KEY_A)}]},
    }  # fmt: skip
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    script = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
    process = subprocess.Popen([script, "--config", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        trusting = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        client = openai.OpenAI(
            base_url=f"https://127.0.0.1:{port}/v1", api_key=API_KEY_A, max_retries=0,
            http_client=openai.DefaultHttpxClient(verify=trusting),
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the gateway exited during startup"
            try:
                answer = client.chat.completions.create(model="local", messages=[{"role": "user", "content": "hi"}])
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "the gateway did not answer over HTTPS"
                time.sleep(0.1)
        assert answer.choices[0].message.content.startswith("up#")
        client.close()
        # Plain HTTP on the same port gets no answer.
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
        _a_site_trusts_this_hub_by_its_ca_file_only(f"https://127.0.0.1:{port}/v1", tmp_path, script)
    finally:
        process.terminate()
        try:
            process.wait(40)
        except subprocess.TimeoutExpired:
            process.kill()
            raise


def _a_site_trusts_this_hub_by_its_ca_file_only(hub_url: str, tmp_path: Path, script: str) -> None:
    """A second gateway (a site) with this HTTPS gateway as its hub: with `ca_file` (relative to its config) it
    reaches the hub; without it the private CA is not trusted and the request fails over to nothing (503)."""
    port = free_port()
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(tmp_path / "ca.crt", site_dir / "hub-ca.crt")
    hub = {"url": hub_url, "kind": "remote", "api_key": API_KEY_A, "model": "local"}
    config = {
        "server": {"host": "127.0.0.1", "port": port, "access_log": False},
        "upstreams": {"trusted": {**hub, "ca_file": "hub-ca.crt"}, "untrusted": hub},
        "tiers": {"trusted": {"upstreams": ["trusted"]}, "untrusted": {"upstreams": ["untrusted"]}},
        "models": {
            "via-trusted": {"tier": "trusted", "cache": {"policy": "never"}},
            "via-untrusted": {"tier": "untrusted", "cache": {"policy": "never"}},
        },
        "auth": {"enabled": False},
    }
    (site_dir / "gateway.yaml").write_text(yaml.safe_dump(config))
    process = subprocess.Popen([script, "--config", str(site_dir / "gateway.yaml")], stderr=subprocess.DEVNULL)
    try:

        def ask(model: str) -> tuple[int, dict[str, Any]]:
            body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/chat/completions", body, {"content-type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status, orjson.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, orjson.loads(exc.read())

        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the site gateway exited during startup"
            try:
                status, answer = ask("via-trusted")
                break
            except OSError:
                assert time.monotonic() < deadline, "the site gateway did not start"
                time.sleep(0.1)
        assert status == 200 and answer["choices"][0]["message"]["content"].startswith("up#")
        status, error = ask("via-untrusted")
        assert status == 503 and error["error"]["type"] != "", error
    finally:
        process.terminate()
        process.wait(40)


def test_a_tls_certificate_without_its_key_or_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path) -> None:
    script = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
    base = {
        "upstreams": {"main": {"url": "http://127.0.0.1:9/v1"}},
        "tiers": {"small": {"upstreams": ["main"]}},
        "models": {"local": {"tier": "small", "cache": {"policy": "never"}}},
        "auth": {"enabled": False},
    }
    for server, expected in (
        ({"tls_cert_file": "/nowhere/tls.crt"}, "set tls_cert_file and tls_key_file together"),
        ({"tls_cert_file": "/nowhere/tls.crt", "tls_key_file": "/nowhere/tls.key"}, "cannot load /nowhere/tls.crt"),
        ({"upstreams": {"main": {"url": "https://hub.example:8443/v1", "ca_file": "/nowhere/ca.crt"}}},
         "upstreams.main.ca_file: cannot load /nowhere/ca.crt"),
        ({"upstreams": {"main": {"url": "https://hub.example:8443/v1", "ca_file": "gateway.yaml"}}},
         "upstreams.main.ca_file: cannot load"),  # a file that holds no certificate
    ):  # fmt: skip
        path = tmp_path / "gateway.yaml"
        server, top = ({}, server) if "upstreams" in server else (server, {})
        path.write_text(yaml.safe_dump({**base, "server": server, **top}))
        done = subprocess.run([script, "--config", str(path)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and expected in done.stderr and "Traceback" not in done.stderr
        assert "Fix:" in done.stderr
