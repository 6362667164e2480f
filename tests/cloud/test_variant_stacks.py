"""Cloud stacks other than the bundled ones: other regions, instance types, provisioners and odd values.

Each test writes a variant of a bundled stack and plans it offline, as a user would: the plan either builds what
the variant asks for, or refuses it with one line naming the key and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, config_errors, plan_cli
from inferstack_cli.main import main


def write_variant(tmp_path: Path, name: str, document: dict[str, Any]) -> None:
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def bundled_document(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())


def refused_line(tmp_path: Path, name: str) -> str:
    """`inferstack plan` on the variant: exit 2, no traceback, one line for the stack file. Returns that line."""
    result = plan_cli(tmp_path, name)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{tmp_path}/Pulumi.{name}.yaml: ")
    assert "; allowed: " in line and "; fix: " in line
    return line


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


def test_missing_aws_region_is_refused(tmp_path: Path) -> None:
    # GIVEN the dev stack without aws:region
    document = bundled_document("dev")
    del document["config"]["aws:region"]
    write_variant(tmp_path, "noregion", document)

    # WHEN the user plans it
    line = refused_line(tmp_path, "noregion")

    # THEN the plan asks for aws:region equal to the environment's region, rather than deploying wherever the
    # shell's AWS_REGION points
    assert ": aws:region: got nothing" in line
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
