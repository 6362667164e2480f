"""A multi-node group as it runs on bare metal: its ranks wait for each other, it can take whole nodes, NCCL's
bootstrap interface is one the pods have, and the DCGM exporter runs under the nvidia runtime."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import config_errors, helm_release, plan_with, raw_environment
from inferstack_cli import render
from inferstack_cli.plan import Plan
from stacks.environment import load_environment

PlanOf = Callable[[str], Plan]


def _group(plan: Plan) -> dict[str, Any]:
    (lws,) = [
        yaml.safe_load(t)
        for p, t in render.renders(plan.resources).items()
        if p.startswith("manifests/") and yaml.safe_load(t)["kind"] == "LeaderWorkerSet"
    ]
    return lws


def _script(plan: Plan, role: str) -> str:
    (server,) = _group(plan)["spec"]["leaderWorkerTemplate"][f"{role}Template"]["spec"]["containers"]
    assert server["command"][:2] == ["/bin/sh", "-c"]
    return str(server["command"][2])


def _run_as_kubernetes_would(script: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Expand `$(VAR)` from the container's env as the kubelet does, then run under /bin/sh with stub `ray`, `vllm`
    and a stub `ray` Python module on the path."""
    expanded = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), script)
    return subprocess.run(
        ["/bin/sh", "-c", expanded],
        env={**os.environ, **env, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _stubs(tmp_path: Path, *, ray_start_failures: int, nodes_joining: list[int]) -> Path:
    """`ray start` fails its first N calls; `ray.nodes()` reports the given alive counts, one per call; `vllm` logs
    that it served. Every call is appended to calls.log."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(
        "#!/bin/sh\n"
        f'echo "ray $*" >> {log}\n'
        f"n=$(grep -c '^ray start' {log})\n"
        f'[ "$n" -gt {ray_start_failures} ] || exit 1\n'
    )
    (bin_dir / "vllm").write_text(f'#!/bin/sh\necho "vllm $*" >> {log}\n')
    for tool in ("ray", "vllm"):
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "ray.py").write_text(
        f"_counts = iter({nodes_joining!r} + [{nodes_joining[-1]}] * 1000)\n"
        "def init(**kwargs):\n"
        f"    open({str(log)!r}, 'a').write('ray.init\\n')\n"
        "def nodes():\n"
        "    alive = next(_counts)\n"
        f"    open({str(log)!r}, 'a').write(f'ray.nodes {{alive}}\\n')\n"
        "    return [{'Alive': True}] * alive + [{'Alive': False}]\n"
    )
    return log


def test_the_leader_serves_only_once_every_node_of_the_group_has_joined(plan_of: PlanOf, tmp_path: Path) -> None:
    # GIVEN the 405B group's leader script, and a Ray cluster that reaches the group's 2 nodes on the third look
    script = _script(plan_of("onprem"), "leader").replace("time.sleep(5)", "time.sleep(0)")
    log = _stubs(tmp_path, ray_start_failures=0, nodes_joining=[1, 1, 2])
    # WHEN it runs as the kubelet starts it
    done = _run_as_kubernetes_would(script, tmp_path, {"LWS_GROUP_SIZE": "2"})
    # THEN it started the head, waited through two incomplete looks, and only then served
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("ray start --head --port=6379")
    assert calls[1:5] == ["ray.init", "ray.nodes 1", "ray.nodes 1", "ray.nodes 2"]
    assert calls[5].startswith("vllm serve ") and "--pipeline-parallel-size 2" in calls[5]
    assert done.stdout.count("waiting for the group's Ray nodes, 1 of 2") == 2


def test_a_worker_retries_joining_until_the_head_answers(plan_of: PlanOf, tmp_path: Path) -> None:
    # GIVEN the worker script, and a head that refuses the first two attempts (its pod is still downloading)
    script = _script(plan_of("onprem"), "worker").replace("sleep 5", "sleep 0")
    log = _stubs(tmp_path, ray_start_failures=2, nodes_joining=[1])
    # WHEN it runs
    done = _run_as_kubernetes_would(script, tmp_path, {"LWS_LEADER_ADDRESS": "llama-405b-0.llama-405b"})
    # THEN it did not exit on the first refusal: it joined on the third attempt, at the leader's address
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    assert calls == ["ray start --address=llama-405b-0.llama-405b:6379 --disable-usage-stats --block"] * 3
    assert done.stdout.count("is not up yet; retrying") == 2


def test_a_locked_memory_limit_that_is_not_unlimited_is_reported_at_start(plan_of: PlanOf, tmp_path: Path) -> None:
    script = _script(plan_of("onprem"), "worker").replace("sleep 5", "sleep 0")
    _stubs(tmp_path, ray_start_failures=0, nodes_joining=[1])
    done = _run_as_kubernetes_would(f"ulimit -l 64; {script}", tmp_path, {"LWS_LEADER_ADDRESS": "leader"})
    assert done.returncode == 0 and "locked-memory limit 64 KiB" in done.stderr and "LimitMEMLOCK" in done.stderr


def test_a_group_can_take_whole_nodes_from_single_node_replicas(plan_of: PlanOf) -> None:
    # GIVEN the on-prem stack, whose 1-GPU llama-8b replicas spread one per node over the pool the 405B group needs
    plan = plan_of("onprem")
    priority_classes = plan.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    classes = {r.inputs["metadata"]["name"]: r.inputs for r in priority_classes}
    template = _group(plan)["spec"]["leaderWorkerTemplate"]
    group_class = {template[f"{role}Template"]["spec"]["priorityClassName"] for role in ("leader", "worker")}
    # THEN both ranks run at a class above the replicas', which may preempt them (equal priority never does)
    (name,) = group_class
    replica_classes = {
        yaml.safe_load(t)["spec"]["template"]["spec"]["priorityClassName"]
        for p, t in render.renders(plan.resources).items()
        if p.startswith("manifests/inferstack-serving/deployment-")
    }
    assert replica_classes == {"inferstack-serving"}
    assert classes[name]["value"] > classes["inferstack-serving"]["value"]
    assert classes[name]["preemptionPolicy"] == "PreemptLowerPriority"


@pytest.mark.parametrize(
    ("interface", "secondary", "refused"),
    [("bond0", False, True), ("net1", False, True), ("eth0", False, False), ("net1", True, False), ("ib0", True, True)],
)
def test_nccls_bootstrap_interface_must_be_one_the_pods_have(interface: str, secondary: bool, refused: bool) -> None:
    def edit(env: dict[str, Any]) -> None:
        env["fabric"]["socketInterface"] = interface
        if secondary:
            env["fabric"]["secondaryNetwork"] = {"kind": "ipoib", "master": "ibs3f1", "subnet": "192.168.100.0/22"}

    if not refused:
        env = copy.deepcopy(raw_environment("onprem"))
        edit(env)
        assert load_environment(env, "stacks/Pulumi.onprem.yaml").fabric.socket_interface == interface
        return
    (line,) = config_errors(edit, stack="onprem")
    assert "fabric.socketInterface" in line and "not on the host network" in line and "eth0" in line
    assert ("net1" in line.split("; allowed: ")[1]) == secondary  # offered only where the pods have it


def test_the_dcgm_exporter_runs_under_the_operators_nvidia_runtime(plan_of: PlanOf, tmp_path: Path) -> None:
    # GIVEN the operator's toolkit (CDI on by default: nvidia is not containerd's default runtime)
    release = helm_release(plan_of("onprem").resources, "dcgm-exporter")
    assert release.inputs["values"]["runtimeClassName"] == "nvidia"
    # AND with the host's own toolkit, the runtime set-up is the host's: no RuntimeClass is assumed
    plan = plan_with(tmp_path, "onprem", lambda env: env.setdefault("gpuOperator", {}).update(toolkit="host"))
    release = helm_release(plan.resources, "dcgm-exporter")
    assert "runtimeClassName" not in release.inputs["values"]


def test_a_model_cache_smaller_than_a_checkpoint_is_refused() -> None:
    # GIVEN 700 GiB local volumes and the bundled 405B model (a 794 GiB BF16 checkpoint with its files)
    (line,) = config_errors(lambda env: env["localStorage"].update(modelCacheGib=700), stack="onprem")
    # THEN the line names the key, the model and the size it needs
    assert "localStorage.modelCacheGib" in line and "'llama-405b'" in line and "794 GiB" in line
    lines = config_errors(lambda env: env["localStorage"].update(modelCacheGib=10), stack="onprem")
    # one per vLLM model (8B: 16 GiB, 405B); the Triton 70B copies only its tokenizer and engine
    assert [("'llama-8b'" in line, "'llama-405b'" in line) for line in lines] == [(True, False), (False, True)]


def _manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def test_the_groups_leader_address_is_left_to_the_headless_service_the_lws_controller_creates(plan_of: PlanOf) -> None:
    # With the default subdomainPolicy (Shared) the LWS controller creates a headless Service named after the
    # LeaderWorkerSet and gives every pod that subdomain; LWS_LEADER_ADDRESS is <lws>-0.<lws>.<namespace>
    # (kubernetes-sigs/lws pkg/controllers/leaderworkerset_controller.go reconcileHeadlessServices, and
    # pkg/utils/controller CreateHeadlessServiceIfNotExists, which leaves an existing Service of that name alone).
    # A Service of the kit's under that name either fails `pulumi up` (already exists) or, created first, takes the
    # name without being headless: the leader's DNS record never exists and the workers' `ray start` retries forever.
    plan = plan_of("onprem")
    manifests = _manifests(plan)
    lws = _group(plan)
    namespace, name = lws["metadata"]["namespace"], lws["metadata"]["name"]
    assert lws["spec"].get("networkConfig") is None  # Shared: the Service is named after the LeaderWorkerSet
    services = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Service"}
    in_namespace = {n for n, m in services.items() if m["metadata"]["namespace"] == namespace}
    assert name not in in_namespace, f"the kit's Service {namespace}/{name} takes the LWS controller's headless one"
    # The gateway still reaches the group's leader, under the Service the stack exports.
    endpoint = plan.outputs["model_endpoints"][name]
    host = endpoint.removeprefix("http://").split(":")[0]
    service = services[host.split(".")[0]]
    assert host == f"{service['metadata']['name']}.{namespace}.svc"
    assert service["spec"]["selector"] == {
        "inferstack.io/model": name,
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    (leader,) = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"]
    assert endpoint.endswith(f":{leader['ports'][0]['containerPort']}")
