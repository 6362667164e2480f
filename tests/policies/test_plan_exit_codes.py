"""`inferstack plan` runs the whole pack offline: a mandatory stack-rule violation exits 3, advisories print only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import policies.rules
from inferstack_cli.main import EXIT_VIOLATION, main


def test_plan_exits_3_on_a_mandatory_stack_violation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN every rule at its declared level (as after issue 12 merges: KNOWN_UNTIL_ISSUE_12 emptied)
    monkeypatch.setattr(policies.rules, "KNOWN_UNTIL_ISSUE_12", frozenset())
    out = tmp_path / "plan.json"
    # WHEN today's prod stack is planned
    code = main(["plan", "--stack", "prod", "--json", str(out)])
    # THEN its wiring defects fail the plan, printed and written with both ends named
    assert code == EXIT_VIOLATION
    violations = json.loads(out.read_text())["violations"]
    upload = [v for v in violations if v["policy"] == "stack-object-store-permissions"]
    assert upload and upload[0]["enforcement"] == "mandatory"
    assert "publish-engine" in upload[0]["message"] and "role model-loader" in upload[0]["message"]
    assert "[mandatory] stack-load-balancer-controller: Service inferstack-gateway/gateway" in capsys.readouterr().out
