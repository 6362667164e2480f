"""The kit's rules read by Prometheus itself: every bundled stack's loads (``promtool check rules``), and the hub's
site rules evaluated over time on made-up series (``promtool test rules``).

promtool ships with Prometheus, not on PyPI: these tests run where it is on PATH (Debian: ``apt install
prometheus``) and are skipped elsewhere. The rules' text is checked without it in ``test_alert_rules.py``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.observability.alerts import site_rules
from inferstack_cli.plan import Plan

pytestmark = [
    pytest.mark.promtool,
    pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not on PATH"),
]

WATCHDOG = 'ALERTS{{alertname="Watchdog",alertstate="firing",severity="none"{site}}}'


def _silent(site: str, minutes: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": "warning", "inferstack_site": site},
        "exp_annotations": {
            "summary": f"Site {site} has forwarded nothing for {minutes}",
            "description": site_rules()[1]["annotations"]["description"],
        },
    }


def test_a_site_that_stops_forwarding_is_reported_after_10_minutes_and_forgotten_after_a_day(tmp_path: Path) -> None:
    # GIVEN the hub's site rules, evaluated every 30 s
    rules = {"groups": [{"name": "inferstack.sites", "interval": "30s", "rules": site_rules()}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    # and, one sample a minute: edge-1's heartbeat for its first 30 minutes only, edge-2's for two days, and the
    # hub's own Watchdog (no site label), which says nothing of any site
    series = [
        {"series": WATCHDOG.format(site=',inferstack_site="edge-1"'), "values": "1x30"},
        {"series": WATCHDOG.format(site=',inferstack_site="edge-2"'), "values": "1x2880"},
        {"series": WATCHDOG.format(site=""), "values": "1x10"},
    ]
    # WHEN Prometheus evaluates them over time
    # THEN edge-1 is not reported 5 minutes into its silence, is at 15 minutes and still after 19.5 hours, and is
    # forgotten after a day; edge-2, which keeps forwarding, and the hub itself never are
    checks = [("35m", []), ("45m", [_silent("edge-1", "15m 0s")]), ("20h", [_silent("edge-1", "19h 30m 0s")])]
    checks.append(("25h", []))
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": at, "alertname": "InferstackSiteSilent", "exp_alerts": expected}
                    for at, expected in checks
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem", "edge"])
def test_every_bundled_rule_is_one_prometheus_loads(stack: str, plan_of: Callable[[str], Plan], tmp_path: Path) -> None:
    # GIVEN a bundled stack's PrometheusRule (the hub's site rules included on onprem)
    (rule,) = [r for r in plan_of(stack).resources if r.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule.inputs["spec"]["groups"]}))
    # WHEN / THEN Prometheus's own parser loads every group. (Its lint is off: it calls one alert name with the same
    # static labels a duplicate, which is what one SLO alert per model is; each reads its own model's series.)
    result = subprocess.run(
        ["promtool", "check", "rules", "--lint=none", "rules.yaml"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
