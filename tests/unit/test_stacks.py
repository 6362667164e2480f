"""Whole-stack tests: each bundled stack plans offline, passes the policy pack, and has what it promises."""

from __future__ import annotations

import io
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, bundled_stacks, only, plan_with
from inferstack_cli import render
from inferstack_cli.main import main
from inferstack_cli.plan import Plan
from policies.rules import check

PlanOf = Callable[[str], Plan]


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_plans_with_no_policy_violations(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    violations = [v for r in plan.resources for v in check(r.type, r.inputs, r.urn, r.name)]
    # Advisory findings print without failing (tests/policies checks each rule and the bundled stacks).
    assert [v for v in violations if v["enforcement"] == "mandatory"] == []
    assert plan.outputs["tier"] == plan.tier
    if plan.tier == "cloud":
        assert plan.outputs["cluster_name"] == f"inferstack-{stack}"
        assert plan.outputs["kubeconfig"] == "[secret]"


def test_the_readmes_output_table_names_each_output_with_its_tiers(plan_of: PlanOf) -> None:
    # GIVEN the outputs each bundled stack exports, by tier
    exported: dict[str, set[str]] = {}
    for stack in bundled_stacks():
        plan = plan_of(stack)
        for name in plan.outputs:
            exported.setdefault(name, set()).add(plan.tier)
    # WHEN the README's `| output | tiers | what |` table is read
    lines = (ROOT / "README.md").read_text().split("| output | tiers | what |", 1)[1].splitlines()[2:]
    documented: dict[str, set[str]] = {}
    for row in itertools.takewhile(lambda line: line.startswith("|"), lines):
        names, tiers = (cell.strip() for cell in row.split("|")[1:3])
        for name in re.findall(r"`([a-z_]+)`", names):
            documented[name] = {"cloud", "onprem", "edge"} if tiers == "all" else set(tiers.split(", "))
    # THEN every output a user can read is there, with the tiers that export it, and nothing else is
    assert documented == exported


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_resource_except_components_has_a_parent(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    components = {r.urn for r in plan.resources if not r.custom}
    orphans = [r.name for r in plan.resources if r.custom and r.parent not in components]
    assert orphans == []


def test_prod_has_an_h100_and_an_h200_efa_pool_each_in_one_zone(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    pools = {
        r.inputs["metadata"]["name"]: r.inputs["spec"] for r in plan.of_type("kubernetes:karpenter.sh/v1:NodePool")
    }
    classes = {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in plan.of_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    }

    def requirement(pool: str, key: str) -> list[str]:
        reqs = pools[pool]["template"]["spec"]["requirements"]
        return next(r["values"] for r in reqs if r["key"] == key)

    assert requirement("h100", "node.kubernetes.io/instance-type") == ["p5.48xlarge"]
    assert requirement("h200", "node.kubernetes.io/instance-type") == ["p5en.48xlarge"]
    assert requirement("h100", "topology.kubernetes.io/zone") == ["us-east-1a"]
    assert requirement("h200", "topology.kubernetes.io/zone") == ["us-east-1b"]
    # The block first, on-demand when it is full or not active yet (capacity.onDemandFallback).
    assert requirement("h200", "karpenter.sh/capacity-type") == ["reserved", "on-demand"]
    assert classes["h200"]["capacityReservationSelectorTerms"] == [{"id": "cr-0a1b2c3d4e5f60718"}]
    efa_counts = sorted(sum(i["interfaceType"] == "efa-only" for i in c["networkInterfaces"]) for c in classes.values())
    assert efa_counts == [16, 32]
    # Only the on-demand pool is forced into a placement group: the Capacity Block pool is not.
    assert len(plan.of_type("aws:ec2/placementGroup:PlacementGroup")) == 1
    assert "placementGroupSelector" in classes["h100"] and "placementGroupSelector" not in classes["h200"]


def test_dev_gpu_pool_can_scale_to_zero_without_efa(plan_of: PlanOf) -> None:
    plan = plan_of("dev")
    # The pool is Karpenter's: no managed GPU node group, a NodePool whose nodes exist only on demand.
    assert not [r for r in plan.of_type("aws:eks/nodeGroup:NodeGroup") if "taints" in r.inputs]
    (node_pool,) = plan.of_type("kubernetes:karpenter.sh/v1:NodePool")
    requirements = node_pool.inputs["spec"]["template"]["spec"]["requirements"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6e.xlarge"]} in requirements
    assert plan.environment.gpu_pools[0].min_size == 0
    assert not plan.of_type("aws:ec2/placementGroup:PlacementGroup")


def test_plan_json_matches_the_documented_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", "--stack", "prod", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert set(plan) == {"project", "stack", "tier", "resources", "outputs", "violations"}
    assert (plan["project"], plan["stack"], plan["tier"]) == ("inferstack", "prod", "cloud")
    assert all(set(r) == {"urn", "type", "name", "parent", "inputs"} for r in plan["resources"])
    template = next(r for r in plan["resources"] if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate")
    assert "metadataOptions" in template["inputs"], "inputs are wire-format camelCase"
    assert template["urn"].startswith("urn:pulumi:prod::inferstack::")
    assert all(set(v) == {"policy", "enforcement", "urn", "message"} for v in plan["violations"])
    assert [v for v in plan["violations"] if v["enforcement"] == "mandatory"] == []
    summary = capsys.readouterr().out
    assert "p5.48xlarge" in summary and "1 ENA + 32 efa-only" in summary and "1 ENA + 16 efa-only" in summary
    assert "capacity-block cr-0a1b2c3d4e5f60718" in summary


def test_plan_json_parents_are_resources_of_the_plan_or_null(tmp_path: Path) -> None:
    # GIVEN the plan JSON of a bundled stack
    out = tmp_path / "plan.json"
    assert main(["plan", "--stack", "dev", "--json", str(out)]) == 0
    resources = json.loads(out.read_text())["resources"]
    urns = {r["urn"] for r in resources}
    # WHEN each resource's parent is looked up
    top_level = sorted(r["type"] for r in resources if r["parent"] is None)
    dangling = sorted({r["parent"] for r in resources if r["parent"] is not None and r["parent"] not in urns})
    # THEN a top-level component has `null` (README: the root Stack is not among the resources) and every other
    # parent is the URN of a resource in the list
    assert dangling == []
    assert "inferstack:aws_eks_cluster:EksCluster" in top_level
    assert all(t.startswith("inferstack:") for t in top_level)


def _managed_h100(env: dict[str, Any]) -> None:
    # One p5.48xlarge node holds llama-8b's 2 replicas and KEDA's default ceiling of 8 (nothing grows a managed group).
    env["gpuPools"][0].update(provisioner="managed", minSize=1)


def test_render_writes_the_user_data_of_every_launch_template(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, "prod", _managed_h100)
    written = render.write(render.renders(plan.resources), tmp_path / "out")
    tmp_path = tmp_path / "out"
    names = sorted(p.relative_to(tmp_path).as_posix() for p in written)
    assert [n for n in names if n.startswith("user-data/")] == ["user-data/gpu-h100.mime"]
    assert "manifests/inferstack-serving/deployment-llama-8b.yaml" in names
    assert "triton/llama-70b-triton/tensorrt_llm/config.pbtxt" in names
    assert "strategy: RAID0" in (tmp_path / "user-data/gpu-h100.mime").read_text()


def test_plan_fails_with_exit_3_on_a_mandatory_violation(tmp_path: Path) -> None:
    plan = plan_with(tmp_path, "prod", _managed_h100)
    template = only([r for r in plan.resources if r.name == "gpu-h100"], "aws:ec2/launchTemplate:LaunchTemplate")
    bad = {**template.inputs, "metadataOptions": {**template.inputs["metadataOptions"], "httpTokens": "optional"}}
    assert [v["policy"] for v in check(template.type, bad, template.urn)] == ["imdsv2-required"]


@pytest.mark.parametrize(
    ("flag", "target", "said"),
    [
        ("--json", "missing/plan.json", "missing is not a directory"),
        ("--json", ".", "a directory; fix: name a file"),
        ("--render", "a-file/out", "a-file is a file; fix: name a directory"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_before_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, target: str, said: str
) -> None:
    (tmp_path / "a-file").write_text("")
    assert main(["plan", "--stack", "edge", flag, str(tmp_path / target)]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # refused before the plan ran, in one line
    assert out.err.count("\n") == 1 and out.err.startswith(f"{flag}: got ") and said in out.err


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_system_node_groups_size_is_the_stacks(plan_of: PlanOf, stack: str) -> None:
    # GIVEN a cloud stack: its system nodes are a managed node group, on which no autoscaler runs
    plan = plan_of(stack)
    (system,) = [
        r for r in plan.of_type("aws:eks/nodeGroup:NodeGroup") if r.inputs["labels"]["inferstack.io/pool"] == "system"
    ]
    # WHEN / THEN its desired size is the config's, and a change to it is applied, not ignored
    assert system.inputs["scalingConfig"]["desiredSize"] == plan.environment.system_pool.initial_size
    assert system.ignore_changes == ()


def test_plan_piped_into_a_reader_that_stops_early_exits_quietly() -> None:
    # GIVEN `inferstack plan --stack prod | head -0`: the reader has closed the pipe before the plan writes its table
    command = [sys.executable, "-m", "inferstack_cli.main", "plan", "--stack", "prod"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        stderr = proc.stderr.read().decode()
    # THEN it stops with the shell's status for a closed pipe, and no traceback on the terminal
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr


def test_a_pipe_closed_while_the_plan_reports_its_json_file_is_not_a_file_that_could_not_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN `inferstack plan --stack edge --json F | head -1`: the summary went out, then the reader closed the pipe,
    # and the line naming the JSON file meets it
    class ClosingPipe(io.StringIO):
        def write(self, text: str) -> int:
            if "Plan JSON" in text:
                raise BrokenPipeError(32, "Broken pipe")
            return super().write(text)

        def fileno(self) -> int:
            return sink.fileno()

    with (tmp_path / "sink").open("w") as sink:
        monkeypatch.setattr(sys, "stdout", ClosingPipe())
        code = main(["plan", "--stack", "edge", "--json", str(tmp_path / "plan.json")])
    # THEN it stops as for any closed pipe, and does not blame the JSON file (it was written)
    assert code == 141
    assert "cannot write" not in capsys.readouterr().err
    assert json.loads((tmp_path / "plan.json").read_text())["stack"] == "edge"
