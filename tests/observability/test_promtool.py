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

from components.observability.alerts import ModelSlo, gateway_alerts, recording_rules, site_rules
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


def _promtool_test(tmp_path: Path, groups: list[dict[str, Any]], tests: list[dict[str, Any]]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    document = {"rule_files": ["rules.yaml"], "evaluation_interval": "30s", "tests": tests}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _requests(status: str, per_minute: int) -> dict[str, str]:
    """The gateway's request counter for one status, growing by ``per_minute`` (30 minutes of it)."""
    labels = f'namespace="gateway",route="chat",status="{status}",cache="miss",model="chat",upstream_kind="local"'
    return {"series": f"inferstack_gateway_requests_total{{{labels}}}", "values": f"0+{per_minute}x30"}


def _fires(name: str, at: str, summary: str | None) -> dict[str, Any]:
    """An alert check: ``summary`` is the rendered summary of the alert expected to fire, ``None`` for none."""
    (rule,) = [r for r in gateway_alerts("gateway") if r["alert"] == name]
    annotations = {"summary": summary, "description": rule["annotations"]["description"]}
    labels = {"severity": "critical", "namespace": "gateway", "deployment": "gateway"}
    expected = [] if summary is None else [{"exp_labels": labels, "exp_annotations": annotations}]
    return {"eval_time": at, "alertname": name, "exp_alerts": expected}


@pytest.mark.parametrize(
    ("traffic", "fires"),
    [
        # 1 answer in 11 fails (9.091 %), at 0.18 req/s
        ({"200": 10, "503": 1}, "gateway/gateway: 9.091% of answers are server errors"),
        ({"200": 10, "429": 5, "499": 5}, None),  # a key's limits and clients that left are not the gateway failing
        ({"503": 1, "200": 2}, None),  # a third fails, but at 0.05 req/s: too little traffic to judge
        ({"200": 100, "500": 4}, None),  # under 5 %
    ],
    ids=["failing", "limits-and-disconnects", "too-little-traffic", "under-five-percent"],
)
def test_the_gateway_error_alert_judges_its_5xx_share_over_enough_traffic(
    traffic: dict[str, int], fires: str | None, tmp_path: Path
) -> None:
    # GIVEN the gateway's alerts, and its answers by status, per minute, for 30 minutes
    groups = [{"name": "inferstack.gateway", "rules": gateway_alerts("gateway")}]
    series = [_requests(status, n) for status, n in traffic.items()]
    # WHEN Prometheus evaluates them THEN the 5xx alert fires, held 5 minutes, exactly when a share over 5 % of
    # enough traffic fails
    checks = [_fires("InferstackGatewayErrors", "20m", fires), _fires("InferstackGatewayErrors", "3m", None)]
    _promtool_test(tmp_path, groups, [{"interval": "1m", "input_series": series, "alert_rule_test": checks}])


def test_the_gateway_pages_after_2_minutes_with_no_ready_replica_unless_scaled_to_none(tmp_path: Path) -> None:
    # GIVEN the gateway's Deployment in "gateway" wanting 2 replicas with none available from minute 10, and one in
    # "idle" scaled to none on purpose
    def deployment(namespace: str, available: str, wanted: str) -> list[dict[str, str]]:
        labels = f'namespace="{namespace}",deployment="gateway"'
        return [
            {"series": f"kube_deployment_status_replicas_available{{{labels}}}", "values": available},
            {"series": f"kube_deployment_spec_replicas{{{labels}}}", "values": wanted},
        ]

    series = [*deployment("gateway", "2x9 0x20", "2x30"), *deployment("idle", "0x30", "0x30")]
    groups = [
        {"name": f"inferstack.gateway.{ns}", "rules": [gateway_alerts(ns)[0]]} for ns in ("gateway", "idle")
    ]  # fmt: skip
    # WHEN Prometheus evaluates them THEN "gateway" pages from minute 12 on, and "idle" never
    checks = [
        {"eval_time": at, "alertname": "InferstackGatewayUnavailable", "exp_alerts": expected}
        for at, expected in (
            ("11m", []),
            (
                "13m",
                [
                    {
                        "exp_labels": {"severity": "critical", "namespace": "gateway", "deployment": "gateway"},
                        "exp_annotations": gateway_alerts("gateway")[0]["annotations"],
                    }
                ],
            ),
        )
    ]
    _promtool_test(tmp_path, groups, [{"interval": "1m", "input_series": series, "alert_rule_test": checks}])


def test_one_failing_gateway_of_two_fires_its_own_alert(tmp_path: Path) -> None:
    # GIVEN two teams' gateways, team-a failing 1 answer in 11 and team-b healthy. Without its gateway's labels the
    # error alert of each was {alertname, severity}: Alertmanager would take the two for one alert.
    groups = [
        {"name": "inferstack.gateway", "rules": [*gateway_alerts("team-a", "gw-a"), *gateway_alerts("team-b", "gw-b")]}
    ]

    def requests(namespace: str, status: str, per_minute: int) -> dict[str, str]:
        series = _requests(status, per_minute)
        return {**series, "series": series["series"].replace('namespace="gateway"', f'namespace="{namespace}"')}

    series = [requests("team-a", "200", 10), requests("team-a", "503", 1), requests("team-b", "200", 10)]
    (rule,) = [r for r in gateway_alerts("team-a", "gw-a") if r["alert"] == "InferstackGatewayErrors"]
    # WHEN Prometheus evaluates them THEN exactly team-a's fires, labelled with its namespace and Deployment
    expected = {
        "exp_labels": {"severity": "critical", "namespace": "team-a", "deployment": "gw-a"},
        "exp_annotations": {
            "summary": "team-a/gw-a: 9.091% of answers are server errors",
            "description": rule["annotations"]["description"],
        },
    }
    checks = [{"eval_time": "20m", "alertname": "InferstackGatewayErrors", "exp_alerts": [expected]}]
    _promtool_test(tmp_path, groups, [{"interval": "1m", "input_series": series, "alert_rule_test": checks}])


def test_a_model_behind_two_gateways_is_held_to_its_slo_on_the_streams_of_both(tmp_path: Path) -> None:
    # GIVEN a Triton model behind team-a's gateway, whose streams get their first token within 0.1 s, and team-b's,
    # whose streams get it between 0.1 and 0.5 s, 10 a minute each
    slo = ModelSlo(
        "llama", "triton", ttft_p99_ms=150, itl_p99_ms=25, namespace="ml", gateway_namespace=("team-a", "team-b")
    )

    def buckets(namespace: str, per_le: dict[str, int]) -> list[dict[str, str]]:
        metric = "inferstack_gateway_upstream_ttft_seconds_bucket"
        return [
            {"series": f'{metric}{{namespace="{namespace}",upstream="llama",le="{le}"}}', "values": f"0+{n}x30"}
            for le, n in per_le.items()
        ]

    series = [
        *buckets("team-a", {"0.1": 10, "0.5": 10, "+Inf": 10}),
        *buckets("team-b", {"0.1": 0, "0.5": 10, "+Inf": 10}),
    ]
    # WHEN Prometheus evaluates the recording rules
    # THEN the model's TTFT p99 is over both gateways' streams: 0.1 + 0.4 x (19.8 - 10) / 10 = 0.492 s, over its
    # 150 ms target; team-a's streams alone would give 0.099 s
    expected = [
        {
            "labels": "inferstack_model:ttft_seconds:p99_rate5m"
            '{engine="triton",inferstack_model="llama",namespace="ml",source="gateway"}',
            "value": 0.492,
        }
    ]
    check = {
        "eval_time": "20m",
        "expr": 'inferstack_model:ttft_seconds:p99_rate5m{source="gateway"}',
        "exp_samples": expected,
    }
    groups = [{"name": "inferstack.recording", "rules": recording_rules([slo])}]
    _promtool_test(tmp_path, groups, [{"interval": "1m", "input_series": series, "promql_expr_test": [check]}])


def test_the_semantic_cache_warning_fires_only_when_no_replica_reaches_the_embeddings_endpoint(tmp_path: Path) -> None:
    # GIVEN a gateway of two replicas: from minute 5 one of them, and from minute 20 both, report the embeddings
    # endpoint down; another team's gateway reports it down throughout, and a third has no embeddings endpoint at all
    # (no series)
    def up(namespace: str, pod: str, values: str) -> dict[str, str]:
        labels = f'namespace="{namespace}",pod="{pod}"'
        return {"series": f"inferstack_gateway_embeddings_up{{{labels}}}", "values": values}

    series = [up("gateway", "gw-1", "1x4 0x40"), up("gateway", "gw-2", "1x19 0x25"), up("team-b", "gw-1", "0x45")]
    groups = [
        {"name": f"inferstack.gateway.{ns}", "rules": gateway_alerts(ns)} for ns in ("gateway", "team-b", "plain")
    ]  # fmt: skip
    (rule,) = [r for r in gateway_alerts("gateway") if r["alert"] == "InferstackSemanticCacheOff"]

    def warning(namespace: str) -> dict[str, Any]:
        return {
            "exp_labels": {"severity": "warning", "namespace": namespace, "deployment": "gateway"},
            "exp_annotations": {
                "summary": f"{namespace}/gateway: no replica reaches the embeddings endpoint, so the semantic cache "
                "is skipped",
                "description": rule["annotations"]["description"],
            },
        }

    # WHEN Prometheus evaluates them THEN one replica down of two is no warning; both down for 10 minutes is; the
    # gateway with no embeddings endpoint never warns
    checks = [
        {"eval_time": "19m", "alertname": "InferstackSemanticCacheOff", "exp_alerts": [warning("team-b")]},
        {"eval_time": "28m", "alertname": "InferstackSemanticCacheOff", "exp_alerts": [warning("team-b")]},
        {
            "eval_time": "31m",
            "alertname": "InferstackSemanticCacheOff",
            "exp_alerts": [warning("gateway"), warning("team-b")],
        },
    ]
    _promtool_test(tmp_path, groups, [{"interval": "1m", "input_series": series, "alert_rule_test": checks}])
