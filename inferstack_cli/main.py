"""``inferstack``: the command line. A thin layer: parse, call the planner, print, exit."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

from inferstack_cli import preflight, render
from inferstack_cli.output import EXIT_CONFIG, EXIT_VIOLATION
from inferstack_cli.output import table as _table
from inferstack_cli.plan import Plan, run_plan
from stacks import program
from stacks.environment import CloudEnvironment, ConfigError, EdgeEnvironment, OnpremEnvironment


def _gpu_rows(plan: Plan, env: CloudEnvironment) -> list[list[str]]:
    templates = {r.parent: r for r in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    components = {r.name: r.urn for r in plan.of_type("inferstack:aws_gpu_node_group:GpuNodeGroup")}
    rows = []
    for pool in env.gpu_pools:
        spec = pool.spec
        if pool.provisioner == "karpenter":
            node_class = next(
                (
                    r
                    for r in plan.of_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
                    if r.name.endswith(f"-{pool.name}-nodeclass")
                ),
                None,
            )
            interfaces = ((node_class.inputs.get("spec") or {}).get("networkInterfaces") if node_class else None) or []
            efa = sum(1 for i in interfaces if i.get("interfaceType") == "efa-only")
        else:
            template = templates.get(components.get(f"gpu-{pool.name}"))
            interfaces = (template.inputs.get("networkInterfaces") if template else None) or []
            efa = sum(1 for i in interfaces if i.get("interfaceType") == "efa-only")
        efa_text = f"1 ENA + {efa} efa-only" if efa else "off"
        placement = "cluster PG" if pool.placement_group_enabled else "no PG"
        capacity = pool.capacity.type + (f" {pool.capacity.reservation_id}" if pool.capacity.reservation_id else "")
        rows.append(
            [
                pool.name,
                pool.provisioner,
                pool.instance_type,
                f"{spec.gpu_count}x {spec.gpu.model} {spec.gpu.memory_gib:.0f}GiB",
                efa_text,
                f"{spec.nvme_disks}x{spec.nvme_disk_gb}GB RAID0",
                f"{pool.zone or env.network.availability_zones[0]} ({placement})",
                capacity,
                f"{pool.min_size}..{pool.max_size} (start {pool.initial_size})",
            ]
        )
    return rows


def _gb(value: float) -> str:
    """GB as the models table shows them: whole numbers, and a decimal under 10 (a small model's 0.03 is not 0)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _model_rows(plan: Plan) -> list[list[str]]:
    from components.serving._placement import place

    rows = []
    for spec in plan.environment.models:
        pool = plan.environment.pool(spec.pool)
        placed = place(spec, pool)
        gpus = pool.spec.gpu_count
        workload = f"LeaderWorkerSet x{placed.pods_per_group(gpus)} pods" if placed.multi_node(gpus) else "Deployment"
        runs_on = placed.fit.gpu if spec.engine == "llamacpp" or pool.spec.gpu is None else pool.spec.gpu.model
        # A llama.cpp server on the CPU (no GPU taken) fits the model in the node's RAM, not in a GPU's memory
        memory = "RAM" if placed.world_size == 0 else "per GPU"
        # An embedding model answers /v1/embeddings in one pass: it streams no tokens, so it has no ITL
        embeds = placed.model.is_embedding
        rows.append(
            [
                spec.name,
                spec.model.rsplit("/", 1)[-1],
                spec.engine,
                f"{spec.pool} ({runs_on})",
                placed.fit.precision if spec.engine == "llamacpp" else spec.precision,
                f"TP{placed.tp}{' (derived)' if placed.tp_derived else ''} PP{placed.pp}",
                f"{_gb(placed.fit.required_gb_per_gpu)}/{_gb(placed.fit.usable_gb_per_gpu)} GB {memory}",
                "- (embeddings)" if embeds else f"{placed.itl.total_ms:.1f} ms (target {spec.slo.itl_p99_ms:g})",
                f"{workload}, {spec.replicas} replica(s)",
                spec.profile,
            ]
        )
    return rows


def _onprem_pool_rows(env: OnpremEnvironment) -> list[list[str]]:
    fabric = env.fabric
    link = fabric.kind + (f" ({len(fabric.hcas)} HCAs)" if fabric.hcas else "")
    return [
        [
            p.name,
            f"{p.gpus_per_node}x {p.spec.gpu.model} {p.spec.gpu.memory_gib:.0f}GiB",
            f"{p.host_memory_gib} GiB",
            link,
            ", ".join(f"{k}={v}" for k, v in p.node_selector.items()),
            f"{p.nodes} (fixed)",
        ]
        for p in env.gpu_pools
    ]


def _edge_node_rows(env: EdgeEnvironment) -> list[list[str]]:
    from components.edge.budget import node_capacity, site_demand
    from components.kube.budget import total
    from stacks.tiers import EDGE

    demand = site_demand(
        env.nodes, env.models, env.cache, env.gateway, env.observability, rollout_surge=EDGE.grows_nodes
    )
    asked = total(demand)
    rows = [
        [n.name, str(n.cpu), f"{n.memory_gib} GiB", f"{n.gpu_count}x {n.gpu}" if n.gpu else "none",
         node_capacity(n).show()]
        for n in env.nodes
    ]  # fmt: skip
    rows.append(["(pods)", "", "", "", f"requested: {asked.show()}"])
    return rows


def _pool_section(plan: Plan) -> list[str]:
    env = plan.environment
    if isinstance(env, EdgeEnvironment):
        return ["Site nodes:", _table(_edge_node_rows(env), ["node", "CPU", "memory", "GPU", "for pods"])]
    if isinstance(env, CloudEnvironment):
        header = ["pool", "provisioner", "instance", "GPUs/node", "EFA", "NVMe", "zone", "capacity", "nodes min..max"]
        return ["GPU pools:", _table(_gpu_rows(plan, env), header)]
    header = ["pool", "GPUs/node", "host memory", "fabric", "node selector", "nodes"]
    return ["GPU pools:", _table(_onprem_pool_rows(env), header)]


def summary(plan: Plan, seconds: float) -> str:
    counts = plan.counts()
    custom = sum(n for t, n in counts.items() if not t.startswith("inferstack:"))
    env = plan.environment
    where = f"region {env.region}" if isinstance(env, CloudEnvironment) else "existing cluster"
    parts = [
        f"inferstack plan: stack {plan.stack} (tier {plan.tier}, {where}) "
        f"— {custom} resources in {sum(n for t, n in counts.items() if t.startswith('inferstack:'))} components, "
        f"planned offline in {seconds:.2f}s",
        "",
        "Resources by type:",
        _table([[t, str(n)] for t, n in sorted(counts.items())], ["type", "count"]),
        "",
        *_pool_section(plan),
        "",
        "Models:",
        _table(
            _model_rows(plan),
            [
                "model",
                "weights",
                "engine",
                "pool",
                "precision",
                "parallelism",
                "memory need/usable",
                "ITL floor",
                "workload",
                "profile",
            ],
        )
        if plan.environment.models
        else "  (none)",
        "",
        "Helm charts (pinned in components/catalog/charts.py):",
        _table(
            sorted(
                [
                    str(r.inputs.get("name")),
                    str(r.inputs.get("chart")),
                    str(r.inputs.get("version")),
                    str(r.inputs.get("namespace")),
                ]
                for r in plan.of_type("kubernetes:helm.sh/v3:Release")
            ),
            ["release", "chart", "version", "namespace"],
        ),
        "",
        "Outputs:",
    ]
    for key, value in plan.outputs.items():
        parts.append(f"  {key}: {json.dumps(value) if not isinstance(value, str) else value}")
    parts.append("")
    if plan.violations:
        mandatory = sum(v["enforcement"] == "mandatory" for v in plan.violations)
        parts.append(
            f"Policy violations ({len(plan.violations)}: {mandatory} mandatory, "
            f"{len(plan.violations) - mandatory} advisory, which print but do not fail):"
        )
        parts += [
            f"  [{v['enforcement']}] {v['policy']}: {v['message']}" + (f" ({v['urn']})" if v["urn"] else "")
            for v in plan.violations
        ]
    else:
        parts.append("Policy pack: no violations.")
    return "\n".join(parts)


def cmd_plan(args: argparse.Namespace) -> int:
    from policies.rules import check_plan

    problem = _output_problem(args)
    if problem:
        print(problem, file=sys.stderr)
        return EXIT_CONFIG
    started = time.perf_counter()
    try:
        plan = run_plan(args.stack, Path(args.stacks_dir) if args.stacks_dir else program.STACKS_DIR)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_CONFIG
    plan.violations += check_plan(plan.resources, plan.tier, plan.environment, plan.outputs)
    seconds = time.perf_counter() - started
    print(summary(plan, seconds))
    try:
        if args.json:
            Path(args.json).write_text(json.dumps(plan.to_json(), indent=2, sort_keys=False) + "\n")
            print(f"\nPlan JSON: {args.json}")
        if args.render:
            written = render.write(render.renders(plan.resources), Path(args.render))
            print(f"Rendered {len(written)} files under {args.render}")
    except BrokenPipeError:
        raise  # stdout's reader went away (`| head`), not a file: main() stops quietly
    except OSError as err:  # the checks above passed, then the disk filled or a path changed under us
        fix = "pick a path in a directory you can write"
        print(f"inferstack plan: cannot write {err.filename} ({err.strerror}); fix: {fix}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_VIOLATION if any(v["enforcement"] == "mandatory" for v in plan.violations) else 0


def _output_problem(args: argparse.Namespace) -> str | None:
    """Why ``--json`` or ``--render`` could not be written, found before the plan runs rather than after it."""
    if args.json:
        target = Path(args.json)
        if target.is_dir():
            return f"--json: got {args.json!r}, a directory; fix: name a file, e.g. {target / 'plan.json'}"
        parent = target.parent
        if not parent.is_dir():
            return f"--json: got {args.json!r}, but {parent} is not a directory; fix: create it or pick another path"
        if not os.access(parent, os.W_OK):
            return f"--json: got {args.json!r}, but {parent} is not writable; fix: pick a directory you can write"
    if args.render:
        target = Path(args.render)
        existing = next((p for p in (target, *target.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            return f"--render: got {args.render!r}, but {existing} is a file; fix: name a directory"
        if existing is not None and not os.access(existing, os.W_OK):
            return f"--render: got {args.render!r}, but {existing} is not writable; fix: pick a directory you can write"
    return None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="inferstack", description="inferstack: plan LLM serving platforms offline; preflight them against AWS."
    )
    sub = top.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="run the stack program under Pulumi's mock engine: no credentials, no CLI")
    plan.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.<stack>.yaml")
    plan.add_argument("--json", metavar="FILE", help="write the machine-readable plan (format in the README)")
    plan.add_argument("--render", metavar="DIR", help="write every rendered artifact (user data, manifests)")
    plan.add_argument("--stacks-dir", metavar="DIR", help="where the Pulumi.<stack>.yaml files live (default: bundled)")
    plan.set_defaults(func=cmd_plan)
    preflight.add_parser(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # pulumi-aws marks deprecated resources at import; they are not the user's concern in a plan.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    try:
        code = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`inferstack plan ... | head`): stop quietly, as other Unix tools do, and keep the
        # interpreter's own flush at exit from printing a traceback onto the terminal.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, the shell's status for a writer killed by a closed pipe
    return code


if __name__ == "__main__":
    sys.exit(main())
