"""Cloud stacks other than the bundled ones: other regions, instance types, provisioners and odd values.

Each test writes a variant of a bundled stack and plans it offline, as a user would: the plan either builds what
the variant asks for, or refuses it with one line naming the key and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, config_errors, plan_cli, plan_with, raw_environment, refused_line
from inferstack_cli import render
from inferstack_cli.main import main
from inferstack_cli.plan import Plan
from stacks.environment import load_environment, provider_region, provider_region_issues


def write_variant(tmp_path: Path, name: str, document: dict[str, Any]) -> None:
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def bundled_document(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def test_aws_region_that_differs_from_the_environment_region_is_refused(tmp_path: Path) -> None:
    # GIVEN the dev stack with its environment moved to eu-west-1 but the AWS provider left in us-west-2
    document = bundled_document("dev")
    env = document["config"]["inferstack:environment"]
    env.update(region="eu-west-1")
    env["network"]["availabilityZones"] = ["eu-west-1a", "eu-west-1b"]
    write_variant(tmp_path, "moved", document)

    # WHEN the user plans it
    line = refused_line(tmp_path, "moved")

    # THEN the plan names aws:region, both regions and the fix (the provider would create the VPC in us-west-2 with
    # subnets in eu-west-1's zones)
    assert ": aws:region: got 'us-west-2'" in line
    assert "eu-west-1" in line
    assert "aws:region: eu-west-1" in line


def test_a_stack_file_without_aws_region_plans(tmp_path: Path) -> None:
    # GIVEN the dev stack without aws:region: the shell's AWS_REGION or a Pulumi ESC environment may give it at
    # `pulumi up`, which the offline plan cannot see (`pulumi up` checks the region it will use: below)
    document = bundled_document("dev")
    del document["config"]["aws:region"]
    write_variant(tmp_path, "noregion", document)
    # WHEN the user plans it THEN it plans
    result = plan_cli(tmp_path, "noregion")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("configured", "environ", "region", "source"),
    [
        ("us-west-2", {"AWS_REGION": "eu-west-1"}, "us-west-2", "aws:region"),  # the stack's config comes first
        (None, {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"}, "eu-west-1", "AWS_REGION"),
        (None, {"AWS_DEFAULT_REGION": "us-east-1"}, "us-east-1", "AWS_DEFAULT_REGION"),
        (None, {}, None, "aws:region"),
    ],
)
def test_pulumi_up_checks_the_region_the_aws_provider_will_use(
    configured: str | None, environ: dict[str, str], region: str | None, source: str
) -> None:
    assert provider_region(configured, environ) == (region, source)


def test_pulumi_up_refuses_a_shell_region_that_differs_from_the_environments() -> None:
    # GIVEN the dev environment (us-west-2), no aws:region, and a shell whose AWS_REGION is eu-west-1
    env = load_environment(raw_environment("dev"), "stacks/Pulumi.dev.yaml")
    (issue,) = provider_region_issues(env, *provider_region(None, {"AWS_REGION": "eu-west-1"}))
    # THEN the line names the variable it came from, both regions and the fix
    line = issue.render("stacks/Pulumi.dev.yaml")
    assert line.startswith(
        "stacks/Pulumi.dev.yaml: aws:region: got 'eu-west-1' from AWS_REGION (the environment's region is 'us-west-2')"
    )
    assert "aws:region: us-west-2" in line


def test_preflight_refuses_a_provider_region_it_would_not_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the prod stack (us-east-1) whose AWS provider points at us-west-2
    document = bundled_document("prod")
    document["config"]["aws:region"] = "us-west-2"
    write_variant(tmp_path, "elsewhere", document)

    # WHEN the user runs preflight on it
    code = main(["preflight", "--stack", "elsewhere", "--stacks-dir", str(tmp_path)])

    # THEN it asks no account: its checks would answer for us-east-1 while `pulumi up` deploys to us-west-2
    assert code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{tmp_path}/Pulumi.elsewhere.yaml: aws:region: got 'us-west-2'")


@pytest.mark.parametrize("key", ["minSize", "desiredSize"])
def test_a_node_floor_on_a_karpenter_pool_is_refused_not_ignored(key: str) -> None:
    # GIVEN the dev stack's Karpenter L40S pool asked to keep two nodes
    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"][0].update({key: 2})

    # WHEN it is validated
    (line,) = config_errors(edit, stack="dev")

    # THEN the key is refused with the fix: a NodePool has no minimum, Karpenter launches nodes for pending pods only,
    # so the two warm nodes would silently never exist
    assert f"inferstack:environment.gpuPools[0].{key}: got 2 on a Karpenter pool" in line
    assert "models[].replicas" in line and "provisioner: managed" in line


def test_a_node_floor_on_a_capacity_block_pool_is_not_told_to_turn_managed() -> None:
    # GIVEN prod's Capacity Block pool (Karpenter's: a managed one is refused) asked to keep its block's two nodes,
    # as the README once said (min = max = the block's size)
    def edit(env: dict[str, Any]) -> None:
        (pool,) = [p for p in env["gpuPools"] if p.get("capacity", {}).get("type") == "capacity-block"]
        pool.update(minSize=2)

    (line,) = config_errors(edit, stack="prod")
    # THEN the fix is the replicas alone: provisioner: managed would be refused in turn
    assert ".minSize: got 2 on a Karpenter pool" in line
    assert "models[].replicas" in line and "provisioner: managed" not in line


def p4d_tp1(env: dict[str, Any]) -> None:
    """dev on one p4d.24xlarge (8 A100s, 4 EFA interfaces): an 8B model at TP1, one replica per GPU."""
    env["gpuPools"][0].update(name="a100", instanceType="p4d.24xlarge", maxSize=1)
    env["models"][0].update(
        model="meta-llama/Llama-3.1-8B-Instruct",
        pool="a100",
        precision="fp16",
        tensorParallel=1,
        replicas=8,
        autoscaling={"maxReplicas": 8},
        slo={"itlP99Ms": 60},
    )


def test_one_gpu_pods_on_a_node_with_fewer_efa_interfaces_than_gpus_fill_every_gpu(tmp_path: Path) -> None:
    # GIVEN eight one-GPU replicas on a p4d.24xlarge, which has 8 GPUs but 4 EFA interfaces
    plan = plan_with(tmp_path, "dev", p4d_tp1)
    spec = plan.environment.pool("a100").spec

    # WHEN the model's Deployment is rendered
    (deployment,) = [m for m in manifests(plan) if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-3b"]
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    limits = server["resources"]["limits"]

    # THEN the pods one node holds ask no more EFA interfaces than the node has: with one each, only four of the
    # eight would schedule and four GPUs would idle. A pod inside one node has no traffic for EFA to carry, so it
    # requests none, and does not tell libfabric to use a device it lacks.
    pods_per_node = spec.gpu_count // limits["nvidia.com/gpu"]
    assert pods_per_node * limits.get("vpc.amazonaws.com/efa", 0) <= spec.efa_interfaces
    assert "FI_PROVIDER" not in {e["name"] for e in server["env"]}
    assert deployment["spec"]["replicas"] == 8 == pods_per_node


def triton_on(instance_type: str, model: str) -> Any:
    """dev with its model on Triton + TensorRT-LLM, on a one-GPU instance type."""

    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"][0]["instanceType"] = instance_type
        env["models"][0].update(engine="triton", model=model, precision="fp16", slo={"itlP99Ms": 200})

    return edit


def test_the_engine_build_asks_no_more_host_memory_than_its_node_gives(tmp_path: Path) -> None:
    # GIVEN the 3B model on Triton on a g6e.xlarge (32 GiB of host memory; the serving pod takes 25 GiB of it)
    plan = plan_with(tmp_path, "dev", triton_on("g6e.xlarge", "meta-llama/Llama-3.2-3B-Instruct"))

    # WHEN the engine-build Job is rendered
    (job,) = [m for m in manifests(plan) if m["kind"] == "Job"]
    (build,) = [c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "trtllm-build"]

    # THEN it requests the share of the node a serving pod of the same GPUs gets, not a fixed 32 GiB the node does
    # not have (the Job would stay Pending and `pulumi up`, which waits for it, would never finish)
    assert build["resources"]["requests"]["memory"] == "25Gi"
    assert build["resources"]["limits"]["memory"] == "25Gi"


def test_a_checkpoint_too_big_to_quantize_on_the_node_is_refused(tmp_path: Path) -> None:
    # GIVEN the 8B model on Triton on a g5.xlarge: its BF16 checkpoint (16 GB, 18 GiB with the quantizer's quarter)
    # against 16 GiB of host memory, of which the GPU's share is 12 GiB
    document = bundled_document("dev")
    triton_on("g5.xlarge", "meta-llama/Llama-3.1-8B-Instruct")(document["config"]["inferstack:environment"])
    write_variant(tmp_path, "small", document)

    # WHEN the user plans it
    line = refused_line(tmp_path, "small")

    # THEN the plan names the model's engine and the numbers, instead of a build Job that never schedules
    assert "inferstack:environment.models[0].engine: got 'triton'" in line
    assert "18 GiB" in line and "12 GiB" in line and "g5.xlarge" in line
    assert "engine: vllm" in line


@pytest.mark.parametrize("section", ["gpuPools", "systemPool"])
def test_a_root_volume_larger_than_gp3_allows_is_refused(section: str) -> None:
    # GIVEN a root volume of 100,000 GiB, which EC2 refuses for gp3 at launch (a launch template's 1 to 16,384 GiB)
    def edit(env: dict[str, Any]) -> None:
        pool = env["gpuPools"][0] if section == "gpuPools" else env["systemPool"]
        pool["rootVolumeGib"] = 100_000

    # WHEN it is validated
    (line,) = config_errors(edit, stack="dev")

    # THEN the plan refuses it with the bound, instead of a launch template that never launches a node
    assert ".rootVolumeGib: got 100000; allowed: less than or equal to 16384" in line
