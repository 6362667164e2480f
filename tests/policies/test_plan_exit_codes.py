"""`inferstack plan` runs the whole pack offline: a mandatory stack-rule violation exits 3, advisories print only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferstack_cli.main import EXIT_VIOLATION, main


def test_plan_exits_3_on_a_mandatory_stack_violation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN today's prod stack, clean, and a pack that no longer counts the EBS CSI add-on as a provisioner
    import policies.stack_rules

    monkeypatch.setattr(policies.stack_rules, "CSI_DRIVERS", {})
    out = tmp_path / "plan.json"
    # WHEN it is planned
    code = main(["plan", "--stack", "prod", "--json", str(out)])
    # THEN the mandatory stack rule fails the plan, printed and written with both ends named
    assert code == EXIT_VIOLATION
    violations = json.loads(out.read_text())["violations"]
    found = [v for v in violations if v["policy"] == "stack-storage-provisioner"]
    assert found and all(v["enforcement"] == "mandatory" for v in found)
    assert any("kube-prometheus-stack" in v["message"] and "ebs.csi.aws.com" in v["message"] for v in found)
    assert "[mandatory] stack-storage-provisioner:" in capsys.readouterr().out


def test_plan_exits_3_on_a_secret_exported_in_plain_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the dev stack's program exporting one more output, a token, without pulumi.Output.secret
    import stacks.cloud

    compose = stacks.cloud.compose
    monkeypatch.setattr(stacks.cloud, "compose", lambda env, stack: {**compose(env, stack), "hub_token": "hunter22"})
    out = tmp_path / "plan.json"
    # WHEN it is planned
    code = main(["plan", "--stack", "dev", "--json", str(out)])
    # THEN the plan fails on that output alone, reported for the stack as a whole
    assert code == EXIT_VIOLATION
    mandatory = [v for v in json.loads(out.read_text())["violations"] if v["enforcement"] == "mandatory"]
    assert [(v["policy"], v["urn"]) for v in mandatory] == [("stack-no-plain-secret-output", None)]
    assert "[mandatory] stack-no-plain-secret-output: stack output hub_token" in capsys.readouterr().out
