"""Where a Python relay's added TTFT goes: the same relay with its parts swapped, against a direct connection.

gateway_bench.py measures the gateway beside a bare relay (uvicorn + aiohttp's client) and LiteLLM. This program
takes the relay apart, so that each layer's share of the added time to the first content token is measured rather
than guessed. Every path relays the same upstream stand-in (gateway_bench's, 20 ms TTFT, 2 ms ITL, 16 tokens):

  direct        client -> upstream: the limit
  pipe          a byte pipe (asyncio protocols on uvloop, no HTTP parsing at all): the floor of any proxy process
  uvicorn+aiohttp   uvicorn (httptools, uvloop) with aiohttp's client, one session: gateway_bench's "relay"
  uvicorn+own   uvicorn's stock httptools protocol with the gateway's own client (inferstack_gateway.http_client);
                a response's head and its first chunk leave in two writes
  gwproto+own   the same with the gateway's protocol (server.GatewayHttpProtocol, under uvicorn's server: the head
                leaves with the first chunk, in one write; since 2026-11-28 an HTTP/1.1 protocol of the gateway's own,
                before a subclass of uvicorn's): the server and client the gateway runs, without the gateway's own work
  raw+own       the gateway's client behind a bare httptools server protocol, no ASGI (streams only): the share of
                the gateway's protocol and ASGI
  gateway       `inferstack-gateway` itself, with Redis and the exact cache on, on a request no cache covers
                (temperature 1): minus gwproto+own, the gateway's own work on the path

With --granian, two more rows put the same relay (the gateway's client) on Granian, a Rust HTTP server for Python
apps, in place of uvicorn: `granian-rsgi+own` on its own RSGI interface and `granian-asgi+own` on ASGI (one worker,
uvloop). Granian is installed from PyPI into benchmarks/.granian (git-ignored) on first use, never a dependency of
the kit; if pip cannot, the rows are left out and the reason printed.

The client is the official openai package (AsyncOpenAI on aiohttp, streaming, uvloop), one request at a time; TTFT
is the first chunk with content. Each round warms every path up (20 requests), then sends --requests requests to
each path, one path after another request by request, so that a slow moment of the shared machine falls on every
path alike; the table shows each path's median TTFT over rounds, minus direct's in the same round, with min..max.
A request that has not finished after 30 s is abandoned, counted and printed with its path (a benchmark that waits
for ever measures nothing).

    python benchmarks/relay_floor.py                 # 7 rounds of 200 requests per path (about 8 min on 2 cores)
    python benchmarks/relay_floor.py --rounds 3 --requests 100
    python benchmarks/relay_floor.py --granian       # with the two Granian rows
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gateway_bench as bench
import spillover_bench
import yaml

RESULTS = bench.RESULTS
API_KEY = "sk-relay-floor"
STALL_S = 30.0
GRANIAN = "granian==2.8.7"
GRANIAN_LIB = Path(__file__).parent / ".granian"


def serve_pipe(port: int, upstream_port: int) -> None:
    """Bytes in, bytes out: one upstream connection per client connection, nothing parsed."""
    import uvloop

    class Upstream(asyncio.Protocol):
        def __init__(self, client: asyncio.Transport) -> None:
            self.client = client

        def data_received(self, data: bytes) -> None:
            self.client.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self.client.close()

    class Client(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.upstream: Any = None
            self.pending: list[bytes] = []
            self.connecting = asyncio.ensure_future(self.connect())

        async def connect(self) -> None:
            loop = asyncio.get_running_loop()
            self.upstream, _ = await loop.create_connection(
                lambda: Upstream(self.transport), "127.0.0.1", upstream_port
            )
            self.upstream.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for data in self.pending:
                self.upstream.write(data)

        def data_received(self, data: bytes) -> None:
            if self.upstream is None:
                self.pending.append(data)
            else:
                self.upstream.write(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.upstream is not None:
                self.upstream.close()

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Client, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def relay_client(upstream: str) -> tuple[Any, Any]:
    """The gateway's HTTP client and the upstream's chat completions target: what every `+own` row relays with."""
    from inferstack_gateway.http_client import HttpClient, Target

    return HttpClient(limit_per_origin=1024, keepalive_s=4, connect_timeout_s=1), Target.parse(
        upstream + "/chat/completions"
    )


async def relay_asgi(http: Any, target: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """One ASGI request relayed with the gateway's client: the body read whole, each upstream chunk sent as read."""
    if scope["type"] != "http":
        return
    body = await bench.read_body(receive)
    response = await http.request(b"POST", target, {"content-type": "application/json"}, body)
    try:
        content_type = response.headers.get(b"content-type", b"application/json")
        await send({"type": "http.response.start", "status": response.status,
                    "headers": [(b"content-type", content_type)]})  # fmt: skip
        while chunk := await response.readany():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    finally:
        response.close()
    await send({"type": "http.response.body", "body": b""})


def serve_own(port: int, upstream: str, coalesce: bool = False) -> None:
    """gateway_bench's relay with the gateway's HTTP client in place of aiohttp's; with `coalesce`, on the gateway's
    own uvicorn protocol (a response's head sent with its first body bytes)."""
    import uvicorn

    from inferstack_gateway.server import GatewayHttpProtocol

    http, target = relay_client(upstream)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await relay_asgi(http, target, scope, receive, send)

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http=GatewayHttpProtocol if coalesce else "httptools",
        log_level="warning", access_log=False,
    )  # fmt: skip


def serve_raw(port: int, upstream: str) -> None:
    """The gateway's client behind a bare httptools server protocol (no ASGI, no uvicorn): streams only."""
    import httptools
    import uvloop

    http, target = relay_client(upstream)
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

    class Server(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)
            self.body: list[bytes] = []

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_body(self, body: bytes) -> None:
            self.body.append(body)

        def on_message_complete(self) -> None:
            body, self.body = b"".join(self.body), []
            asyncio.get_running_loop().create_task(self.handle(body))

        async def handle(self, body: bytes) -> None:
            response = await http.request(b"POST", target, {"content-type": "application/json"}, body)
            first = True
            try:
                while chunk := await response.readany():
                    data = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                    if first:
                        self.transport.writelines((head, data))
                        first = False
                    else:
                        self.transport.write(data)
            finally:
                response.close()
            self.transport.write(b"0\r\n\r\n")

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


_granian_relay: tuple[Any, Any] | None = None


def granian_relay() -> tuple[Any, Any]:
    """The relay's client and target in a Granian worker, made on its first request (inside the worker's loop)."""
    global _granian_relay
    if _granian_relay is None:
        _granian_relay = relay_client(os.environ["RELAY_TO"])
    return _granian_relay


async def granian_rsgi(scope: Any, protocol: Any) -> None:
    """The relay on Granian's RSGI interface: the body in one await, each chunk sent as it is read."""
    http, target = granian_relay()
    body = await protocol()
    response = await http.request(b"POST", target, {"content-type": "application/json"}, body)
    try:
        content_type = response.headers.get(b"content-type", b"application/json").decode("latin-1")
        transport = protocol.response_stream(response.status, [("content-type", content_type)])
        while chunk := await response.readany():
            await transport.send_bytes(chunk)
    finally:
        response.close()


async def granian_asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The relay of `uvicorn+own`, served by Granian's ASGI interface."""
    await relay_asgi(*granian_relay(), scope, receive, send)


def ensure_granian() -> str | None:
    """Granian in benchmarks/.granian, installed from PyPI on first use; None (the reason printed) if pip cannot."""
    if not (GRANIAN_LIB / "granian").is_dir():
        print(f"Installing {GRANIAN} into {GRANIAN_LIB} (once)...", flush=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(GRANIAN_LIB), GRANIAN],
                           check=True, timeout=600)  # fmt: skip
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            print(f"Granian rows left out: pip could not install {GRANIAN} ({exc})", flush=True)
            return None
    return str(GRANIAN_LIB)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--granian", action="store_true", help="add the relay on Granian (RSGI and ASGI)")
    parser.add_argument("--serve", choices=["pipe", "own", "gwproto", "raw"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--to", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "relay_floor.json")
    args = parser.parse_args()
    if args.serve == "pipe":
        serve_pipe(args.port, int(args.to))
        return 0
    if args.serve in ("own", "gwproto"):
        serve_own(args.port, args.to, coalesce=args.serve == "gwproto")
        return 0
    if args.serve == "raw":
        serve_raw(args.port, args.to)
        return 0

    names = ["direct", "pipe", "uvicorn+aiohttp", "uvicorn+own", "gwproto+own", "raw+own", "gateway"]
    granian_lib = ensure_granian() if args.granian else None
    if granian_lib is not None:
        names += ["granian-rsgi+own", "granian-asgi+own"]
    ports = {name: bench.free_port() for name in names}
    redis_port = bench.free_port()
    upstream = f"http://127.0.0.1:{ports['direct']}/v1"
    here, gateway = [sys.executable, __file__], [sys.executable, bench.__file__]
    commands = {
        "direct": [*gateway, "--serve-upstream", str(ports["direct"])],
        "pipe": [*here, "--serve", "pipe", "--port", str(ports["pipe"]), "--to", str(ports["direct"])],
        "uvicorn+aiohttp": [*gateway, "--serve-relay", str(ports["uvicorn+aiohttp"]), "--relay-to", upstream],
        "uvicorn+own": [*here, "--serve", "own", "--port", str(ports["uvicorn+own"]), "--to", upstream],
        "gwproto+own": [*here, "--serve", "gwproto", "--port", str(ports["gwproto+own"]), "--to", upstream],
        "raw+own": [*here, "--serve", "raw", "--port", str(ports["raw+own"]), "--to", upstream],
    }
    environments: dict[str, dict[str, str]] = {}
    if granian_lib is not None:
        gateway_src = Path(__file__).resolve().parent.parent / "images" / "gateway" / "src"
        search_path = os.pathsep.join([granian_lib, str(Path(__file__).resolve().parent), str(gateway_src)])
        for interface in ("rsgi", "asgi"):
            name = f"granian-{interface}+own"
            commands[name] = [sys.executable, "-m", "granian", "--interface", interface, "--loop", "uvloop",
                              "--workers", "1", "--host", "127.0.0.1", "--port", str(ports[name]),
                              "--log-level", "warning", "--no-ws", f"relay_floor:granian_{interface}"]  # fmt: skip
            environments[name] = {**os.environ, "PYTHONPATH": search_path, "RELAY_TO": upstream}
    import uvloop

    workdir = Path(tempfile.mkdtemp(prefix="relay-floor-"))
    config = workdir / "gateway.yaml"
    # The edge tier's gateway of spillover_bench without a hub: Redis with the exact cache, no semantic stage (no
    # embedding model here).
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    config.write_text(
        yaml.safe_dump(spillover_bench.gateway_config(ports["gateway"], upstream, None, redis_url, "rf:"))
    )
    binary = shutil.which("inferstack-gateway", path=str(Path(sys.executable).parent)) or "inferstack-gateway"
    servers = bench.Servers()
    load_before = os.getloadavg()  # before the servers start: the run's own load is not "before"
    try:
        for name, command in commands.items():
            servers.start(command, ports[name], env=environments.get(name))
        servers.start([*bench.redis_command(), "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", "--dir", str(workdir)], redis_port)  # fmt: skip
        servers.start(
            [binary, "--config", str(config)], ports["gateway"], env={**os.environ, "GATEWAY_API_KEY": API_KEY}
        )
        rounds, stalled = uvloop.run(measure(ports, args.rounds, args.requests))
    finally:
        servers.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    report = summarize(rounds, args, load_before)
    report["stalled_requests"] = stalled
    bench.write_results(args.out, report, render(report))
    return 0


async def measure(ports: dict[str, int], rounds: int, requests: int) -> tuple[list[dict[str, float]], dict[str, int]]:
    import openai

    clients = {
        name: openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=API_KEY,
            max_retries=0,
            timeout=60,  # a lost request fails the run in a minute, not in the client's default ten
            http_client=openai.DefaultAioHttpClient(),
        )
        for name, port in ports.items()
    }
    out = []
    stalled: dict[str, int] = {}

    async def one(name: str, content: str) -> float | None:
        try:
            return (await bench.one(clients[name], bench.chat(content, 1.0), STALL_S))[0]
        except TimeoutError:
            stalled[name] = stalled.get(name, 0) + 1
            print(f"{name}: a request stalled for {STALL_S:.0f} s and was abandoned ({content!r})", flush=True)
            return None

    try:
        for number in range(rounds):
            for i in range(20):  # in turn as well: no warmed connection sits idle past a server's keep-alive timeout
                for name in clients:
                    await one(name, f"warm {number} {i}")
            ttfts: dict[str, list[float]] = {name: [] for name in clients}
            for i in range(requests):
                for name in clients:
                    if (ttft := await one(name, f"r{number} {i}")) is not None:
                        ttfts[name].append(ttft)
            if empty := [name for name, values in ttfts.items() if not values]:
                print(f"round {number + 1}/{rounds}: left out, no request of {', '.join(empty)} finished", flush=True)
                continue
            row = {name: statistics.median(values) * 1000 for name, values in ttfts.items()}
            out.append(row)
            print(f"round {number + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in row.items()), flush=True)
    finally:
        for client in clients.values():
            await client.close()
    return out, stalled


# The gateway's added time, layer by layer: each layer is one row minus the row below it, in the same round.
LAYERS = (
    ("one more hop, nothing parsed", "pipe", "direct"),
    ("HTTP parsing and the gateway's client", "raw+own", "pipe"),
    ("the gateway's protocol and ASGI", "gwproto+own", "raw+own"),
    ("the gateway's own work", "gateway", "gwproto+own"),
)


def summarize(
    rounds: list[dict[str, float]], args: argparse.Namespace, load_before: tuple[float, float, float]
) -> dict[str, Any]:
    if not rounds:
        raise SystemExit("relay_floor: no round completed; nothing to report")
    layers = []
    for layer, upper, lower in LAYERS:
        differences = [r[upper] - r[lower] for r in rounds]
        layers.append({"layer": layer, "rows": [upper, lower], "ms": statistics.median(differences),
                       "spread_ms": [min(differences), max(differences)]})  # fmt: skip
    paths: dict[str, Any] = {}
    for name in rounds[0]:
        added = [r[name] - r["direct"] for r in rounds]
        paths[name] = {
            "ttft_p50_ms": statistics.median(r[name] for r in rounds),
            "added_ms": None if name == "direct" else statistics.median(added),
            "added_spread_ms": None if name == "direct" else [min(added), max(added)],
        }
    return {
        **bench.run_header(load_before),
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "paths": paths,
        "layers": layers,
        "per_round_ttft_p50_ms": rounds,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"Relay floor, {report['date']}, {report['machine']}, Python {report['python']}. Concurrency 1, "
        f"{report['rounds']} rounds of {report['requests_per_round']} requests per path; TTFT = first content token "
        "(official openai client); median over rounds, [min..max] of the added time.",
        "",
        "| path | TTFT p50 ms | added p50 ms |",
        "|---|---|---|",
    ]
    for name, row in report["paths"].items():
        added = "-" if row["added_ms"] is None else (
            f"{row['added_ms']:+.2f} [{row['added_spread_ms'][0]:+.2f}..{row['added_spread_ms'][1]:+.2f}]"
        )  # fmt: skip
        lines.append(f"| {name} | {row['ttft_p50_ms']:.2f} | {added} |")
    lines += [
        "",
        "The gateway's added time by layer: in each round, one row's TTFT p50 minus another's; median [min..max] over "
        "rounds.",
        "",
        "| layer | rows | ms |",
        "|---|---|---|",
    ]
    for layer in report["layers"]:
        low, high = layer["spread_ms"]
        upper, lower = layer["rows"]
        lines.append(f"| {layer['layer']} | {upper} minus {lower} | {layer['ms']:+.2f} [{low:+.2f}..{high:+.2f}] |")
    if report.get("stalled_requests"):
        counts = ", ".join(f"{name} {n}" for name, n in report["stalled_requests"].items())
        lines += ["", f"Requests abandoned after {STALL_S:.0f} s without an answer: {counts}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
