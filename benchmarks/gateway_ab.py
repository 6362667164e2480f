"""The gateway at two commits side by side: does a change make it faster or leaner, measured in one run?

gateway_bench.py compares the gateway with a direct connection, a bare relay and LiteLLM. This program answers a
narrower question that a run of gateway_bench cannot, because two of its runs on a shared machine differ by more than
most changes do: it runs the working tree's gateway and the gateway of another commit (checked out with
`git worktree` into a temporary directory) as two processes at once, against the same upstream stand-in, and
measures them in alternating rounds (at c=1 taking turns request by request), next to the direct connection and the
bare relay. Each gateway gets the example config with the embeddings endpoint down and streams a request no cache
covers (temperature 1): the relay path.

The client is the official openai package (AsyncOpenAI on aiohttp, streaming, uvloop); TTFT is the first chunk with
content; CPU ms per request is read from /proc for each gateway process. The table shows the median over rounds and
[min..max].

    python benchmarks/gateway_ab.py --base HEAD~1                      # c=8 and c=32, 4 rounds (about 5 min)
    python benchmarks/gateway_ab.py --base main --concurrency 1 --requests 300
    python benchmarks/gateway_ab.py --base HEAD --concurrency 1 --head-src DIR       # a build of the package as head
    python benchmarks/gateway_ab.py --base HEAD --concurrency 1 --head-env NAME=VALUE   # head with its own environment
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import gateway_bench as bench

RESULTS = bench.RESULTS
ROOT = bench.ROOT


def start_gateways(
    base: str,
    workdir: Path,
    upstream: str,
    start: Any,
    head_src: Path | None = None,
    head_env: dict[str, str] | None = None,
    head_python: str | None = None,
) -> dict[str, tuple[int, int]]:
    """The working tree's gateway ("head") and `base`'s ("base"). Returns each one's (pid, port).

    `head_src`, a directory holding an `inferstack_gateway` package, runs in place of the working tree's (a build of
    it, such as one compiled with mypyc); `head_env` is set for the head's process only; `head_python` is the
    interpreter that runs head (another Python's virtual environment with the gateway's locked dependencies)."""
    tree = workdir / "base-tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), base], check=True,
                   capture_output=True)  # fmt: skip
    example = (ROOT / "images" / "gateway" / "config.example.yaml").read_text()
    limits = "\nlimits:\n  requests_per_minute: 100000000\n  tokens_per_minute: 2000000000\n"
    # No Redis and no embeddings: the relay path only (a change to the cache has gateway_bench's cache columns).
    example = re.sub(r"(?ms)^(redis|embeddings):.*?\n\n", "", example)
    example = example.replace("      policy: temperature_zero", "      policy: never")
    gateways = {}
    head = head_src or ROOT / "images" / "gateway" / "src"
    for name, source in (("head", head), ("base", tree / "images" / "gateway" / "src")):
        port = bench.free_port()
        config = workdir / f"{name}.yaml"
        config.write_text(example + limits)
        env = {
            **os.environ,
            "GATEWAY_PORT": str(port),
            "GATEWAY_UPSTREAM_URL": upstream,
            "GATEWAY_API_KEY": bench.API_KEY,
            "PYTHONPATH": str(source),  # this gateway's package ahead of the installed one
            **((head_env or {}) if name == "head" else {}),
        }
        python = head_python if name == "head" and head_python else sys.executable
        command = [python, "-c", "import sys; from inferstack_gateway.cli import main; sys.exit(main())",
                   "--config", str(config)]  # fmt: skip
        gateways[name] = (start(command, port, env=env).pid, port)
    return gateways


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare the working tree with (e.g. HEAD~1)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32], help="(default 8 32)")
    parser.add_argument("--requests", type=int, default=0, help="per path and round (default 50 x concurrency, 300+)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("--out", type=Path, default=RESULTS / "gateway_ab.json")
    parser.add_argument("--head-src", type=Path, help="run the inferstack_gateway package in this directory as head")
    parser.add_argument("--head-env", nargs="+", default=[], metavar="NAME=VALUE", help="environment of head only")
    parser.add_argument("--head-python", help="the interpreter that runs head (default: this one)")
    args = parser.parse_args()
    head_env = {}
    for item in args.head_env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--head-env takes NAME=VALUE, got {item!r}")
        head_env[name] = value
    if args.head_src is not None and not (args.head_src / "inferstack_gateway").is_dir():
        parser.error(f"--head-src {args.head_src}: no inferstack_gateway package in it")
    base_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], check=True,
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
    head_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                                 capture_output=True, text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "images/gateway"], check=True,
                           capture_output=True, text=True).stdout.strip() != ""  # fmt: skip
    head_label = f"{head_commit}{' + uncommitted changes' if dirty else ''}"
    if args.head_src is not None:
        head_label = f"the package in {args.head_src}"
    if head_env:
        head_label += f" with {' '.join(args.head_env)}"
    if args.head_python:
        version = subprocess.run([args.head_python, "-c", "import platform; print(platform.python_version())"],
                                 check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
        head_label += f" on Python {version}"

    workdir = Path(tempfile.mkdtemp(prefix="gateway-ab-"))
    servers = bench.Servers()
    start = servers.start
    load_before = os.getloadavg()
    rows: dict[str, list[dict[str, Any]]] = {}
    try:
        ports = {name: bench.free_port() for name in ("upstream", "relay")}
        upstream = f"http://127.0.0.1:{ports['upstream']}/v1"
        me = [sys.executable, bench.__file__]
        start([*me, "--serve-upstream", str(ports["upstream"])], ports["upstream"])
        relay = start([*me, "--serve-relay", str(ports["relay"]), "--relay-to", upstream], ports["relay"])
        gateways = start_gateways(args.base, workdir, upstream, start, args.head_src, head_env, args.head_python)
        urls = {
            "direct": upstream,
            "relay": f"http://127.0.0.1:{ports['relay']}/v1",
            **{name: f"http://127.0.0.1:{port}/v1" for name, (_, port) in gateways.items()},
        }
        tracked = {"relay": relay.pid, **{name: pid for name, (pid, _) in gateways.items()}}

        async def run() -> None:
            import openai

            clients = {
                name: openai.AsyncOpenAI(
                    base_url=url,
                    api_key=bench.API_KEY,
                    max_retries=0,
                    timeout=60,
                    http_client=openai.DefaultAioHttpClient(),
                )
                for name, url in urls.items()
            }
            for each in clients.values():
                await bench.one(each, bench.chat("warm up", 1.0))
            names = list(urls)
            for concurrency in args.concurrency:
                n = args.requests or max(300, 50 * concurrency)
                for round_ in range(args.rounds):
                    order = names[round_ % len(names) :] + names[: round_ % len(names)]
                    if concurrency == 1:
                        # Request by request in turn, so that a slow moment of the machine falls on every path alike.
                        await bench.settle(list(tracked.values()))
                        jobs = {
                            name: (
                                clients[name],
                                [bench.chat(f"ab {name} 1 {round_} {i}", 1.0) for i in range(n)],
                                tracked.get(name),
                            )
                            for name in order
                        }
                        for name, row in (await bench.run_in_turn(jobs)).items():
                            rows.setdefault(f"{name}/c1", []).append(row)
                            print(f"c=1 round {round_ + 1}/{args.rounds} {name}: {bench.summary(row)}", flush=True)
                        continue
                    for name in order:
                        await bench.settle(list(tracked.values()))
                        client = clients[name]
                        await asyncio.gather(
                            *(bench.one(client, bench.chat(f"warm {round_} {i}", 1.0)) for i in range(concurrency))
                        )
                        bodies = [bench.chat(f"ab {concurrency} {round_} {i}", 1.0) for i in range(n)]
                        row = await bench.run_load(client, bodies, concurrency, tracked.get(name))
                        rows.setdefault(f"{name}/c{concurrency}", []).append(row)
                        print(
                            f"c={concurrency} round {round_ + 1}/{args.rounds} {name}: {bench.summary(row)}", flush=True
                        )
            for each in clients.values():
                await each.close()

        import uvloop

        uvloop.run(run())
    finally:
        servers.stop()
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(workdir / "base-tree")],
                       capture_output=True)  # fmt: skip
        shutil.rmtree(workdir, ignore_errors=True)

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    results = {
        key: {
            measure: spread([row[measure] for row in runs])
            for measure in ("ttft_p50_ms", "ttft_p99_ms", "rps", "cpu_ms_per_request")
            if all(measure in row for row in runs)
        }
        for key, runs in rows.items()
    }
    report = {
        **bench.run_header(load_before),
        "head": head_label,
        "base": f"{args.base} ({base_commit})",
        "rounds": args.rounds,
        "results": results,
        "per_round": rows,
    }
    title = (
        f"Gateway A/B, {report['date']}, {report['machine']}, Python "
        f"{report['python']}: head = {head_label}, base = {args.base} ({base_commit}). Relay path (no cache), "
        f"{args.rounds} rounds per concurrency (at c=1 the paths take turns request by request; above it, whole rounds "
        "alternate); median [min..max] over rounds."
    )

    def cell(entry: dict[str, float] | None, digits: int = 2) -> str:
        if entry is None:
            return "-"
        return f"{entry['median']:.{digits}f} [{entry['min']:.{digits}f}..{entry['max']:.{digits}f}]"

    lines = [
        title,
        "",
        "| conc. | path | TTFT p50 ms | TTFT p99 ms | req/s | CPU ms/req |",
        "|---|---|---|---|---|---|",
    ]
    for concurrency in args.concurrency:
        for name in ("direct", "relay", "base", "head"):
            entry = results[f"{name}/c{concurrency}"]
            lines.append(
                f"| {concurrency} | {name} | {cell(entry['ttft_p50_ms'])} | {cell(entry['ttft_p99_ms'])} | "
                f"{cell(entry['rps'], 0)} | {cell(entry.get('cpu_ms_per_request'), 3)} |"
            )
    print()
    bench.write_results(args.out, report, "\n".join(lines))  # prints the table too
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
