"""``inferstack preflight``: the table, the verdict line and the exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, raw_environment
from inferstack_cli.main import main
from stacks.environment import Environment


def write_stack(directory: Path, name: str, env: dict[str, Any]) -> None:
    config = {"config": {"aws:region": env["region"], "inferstack:environment": env}}
    (directory / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def prod_with_block_in(zone: str) -> dict[str, Any]:
    raw = raw_environment("prod")
    pools = [dict(p) for p in raw["gpuPools"]]
    pools[1]["zone"] = zone
    return {**raw, "gpuPools": pools}


@pytest.fixture
def use_account(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point the CLI's AWS clients at a test account."""
    from stacks.preflight import aws

    def use(fake: Any) -> None:
        monkeypatch.setattr(aws, "AwsClients", lambda region, profile=None: fake.clients)

    return use


def test_blocker_prints_the_table_and_exits_4(
    tmp_path: Path, account: Any, prod_env: Any, use_account: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the prod stack with its H200 block in us-east-1c, and an account whose block is in us-east-1a
    write_stack(tmp_path, "prod", prod_with_block_in("us-east-1c"))
    fake = account("us-east-1")
    fake.ready_for(
        prod_env(),
        reservations=lambda: fake.reservation(
            "cr-0a1b2c3d4e5f60718", instance_type="p5en.48xlarge", zone="us-east-1a", count=2
        ),
    )
    use_account(fake)

    # WHEN the user runs `inferstack preflight --stack prod`
    code = main(["preflight", "--stack", "prod", "--stacks-dir", str(tmp_path)])

    # THEN a table with one row per check, a BLOCKER row naming the fix, the verdict line, exit 4
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "inferstack preflight: stack prod — account 123456789012, region us-east-1"
    header = next(line for line in lines if line.startswith("check"))
    assert header.split() == ["check", "subject", "verdict", "detail"]
    row = next(line for line in lines if "BLOCKER" in line)
    assert row.startswith("reservation")
    assert "pool h200: capacity-block cr-0a1b2c3d4e5f60718" in row
    assert "fix: set inferstack:environment.gpuPools[1].zone to us-east-1a" in row
    assert lines[-1] == "preflight: 1 blocker — not ready"
    assert code == 4


def test_ready_stack_exits_0(
    tmp_path: Path, account: Any, prod_env: Any, use_account: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an account that can run the stack
    write_stack(tmp_path, "prod", prod_with_block_in("us-east-1c"))
    fake = account("us-east-1")
    fake.ready_for(prod_env())
    use_account(fake)

    # WHEN preflight runs
    code = main(["preflight", "--stack", "prod", "--stacks-dir", str(tmp_path)])

    # THEN it says ready and exits 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("checks passed — ready")
    assert code == 0


def test_bad_config_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a stack whose pool asks for an instance type that does not exist
    env = prod_with_block_in("us-east-1c")
    env["gpuPools"][0] = {**env["gpuPools"][0], "instanceType": "p5.49xlarge"}
    write_stack(tmp_path, "prod", env)

    # WHEN preflight runs
    code = main(["preflight", "--stack", "prod", "--stacks-dir", str(tmp_path)])

    # THEN it stops before asking AWS anything: one line, exit 2 (as `inferstack plan`)
    err = capsys.readouterr().err.strip()
    assert "gpuPools[0].instanceType: got 'p5.49xlarge'" in err
    assert len(err.splitlines()) == 1
    assert code == 2


def test_non_cloud_tier_has_nothing_to_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a stack of a tier without an AWS account (edge)
    from inferstack_cli import plan

    real = plan.load_environment

    def as_edge(*args: Any) -> Environment:
        return real(*args).model_copy(update={"tier": "edge"})

    monkeypatch.setattr(plan, "load_environment", as_edge)

    # WHEN preflight runs
    code = main(["preflight", "--stack", "dev"])

    # THEN it says preflight covers the cloud tier only, and succeeds
    out = capsys.readouterr().out
    assert out.startswith("preflight covers the cloud tier only: stack dev is tier edge")
    assert code == 0


def test_without_credentials_one_line_names_the_fix(tmp_path: Path) -> None:
    # GIVEN a machine with no AWS credentials anywhere (a separate process: no moto, no inherited keys)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }

    # WHEN the user runs `inferstack preflight --stack dev`
    done = subprocess.run(
        [sys.executable, "-m", "inferstack_cli.main", "preflight", "--stack", "dev"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    # THEN one line on stderr with the fix, no traceback, exit 5
    assert done.stderr.strip() == (
        "inferstack preflight: no AWS credentials found; fix: `aws configure`, `aws sso login`, or export AWS_PROFILE"
    )
    assert done.returncode == 5


@pytest.mark.parametrize(
    ("profile", "environment", "expected"),
    [
        (
            "nosuch",
            {"AWS_PROFILE": "from-env"},
            "AWS profile 'nosuch' not found; fix: pick a profile from `aws configure list-profiles`",
        ),
        (
            None,
            {"AWS_PROFILE": "from-env"},
            "AWS profile 'from-env' (from AWS_PROFILE) not found; fix: pick a profile from `aws configure "
            "list-profiles`, or unset AWS_PROFILE",
        ),
        (
            None,
            {"AWS_DEFAULT_PROFILE": "old-style"},
            "AWS profile 'old-style' (from AWS_DEFAULT_PROFILE) not found; fix: pick a profile from `aws configure "
            "list-profiles`, or unset AWS_DEFAULT_PROFILE",
        ),
    ],
)
def test_an_unknown_profile_is_named_whether_from_the_flag_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str | None, environment: dict[str, str], expected: str
) -> None:
    # GIVEN a machine whose AWS config knows no profile, and the environment naming one that does not exist
    from stacks.preflight import aws

    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_PROFILE", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    # WHEN preflight sets up its clients with `--profile nosuch`, or with no --profile
    with pytest.raises(aws.AwsAccessError) as caught:
        aws.AwsClients("us-east-1", profile=profile)

    # THEN the one line names the profile boto3 looked for and where the name came from (never `None`)
    assert str(caught.value) == expected
