"""Alertmanager routing: severities to destinations, secrets as mounted files, and the stacks that set it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from components.catalog.charts import CHARTS
from components.observability.alerting import AlertDestinations, alertmanager_config
from components.observability.alerts import prometheus_rule
from components.observability.observability import prometheus_values
from components.specs import ObservabilitySpec
from helm_values import explain, load_defaults, unknown_paths
from helpers import config_errors, helm_release, only, plan_with

MOUNT = "/etc/alertmanager/secrets/inferstack-alert-receivers"
EVERYWHERE = AlertDestinations(
    pagerduty_routing_key="pd-key", slack_webhook_url="https://hooks.slack.invalid/x", webhook_url="https://hook"
)


def _route_of(config: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """The receivers an alert with ``labels`` reaches, as Alertmanager walks the tree (matchers of the kit's forms)."""

    def matches(matcher: str) -> bool:
        name, op, value = matcher.replace(" =~ ", " ~ ").split(" ", 2)
        wanted = value.strip('"')
        got = labels.get(name, "")
        return got in wanted.split("|") if op == "~" else got == wanted

    reached = []
    for route in config["route"]["routes"]:
        if all(matches(m) for m in route["matchers"]):
            reached.append(route["receiver"])
            if not route.get("continue"):
                break
    return reached or [config["route"]["receiver"]]


@pytest.mark.parametrize(
    ("severity", "receivers"),
    [("critical", ["pagerduty", "slack", "webhook"]), ("warning", ["slack", "webhook"]), ("none", ["null"])],
)
def test_critical_alerts_page_warnings_notify_and_the_rest_stay_quiet(severity: str, receivers: list[str]) -> None:
    # GIVEN PagerDuty, Slack and a webhook
    config = alertmanager_config(EVERYWHERE)
    # WHEN an alert of a severity is routed (the chart's Watchdog and InfoInhibitor carry severity "none")
    # THEN critical ones page and reach chat and the webhook; warnings skip the page; the rest reach no one
    assert _route_of(config, {"alertname": "X", "severity": severity}) == receivers


def test_every_kit_alert_reaches_a_person() -> None:
    # GIVEN every alert the kit defines, and a stack with only a Slack webhook
    config = alertmanager_config(AlertDestinations(slack_webhook_url="https://hooks.slack.invalid/x"))
    alerts = [r for g in prometheus_rule([])["spec"]["groups"] for r in g["rules"] if "alert" in r]
    # WHEN / THEN each one is routed to Slack, none to the null receiver
    assert alerts
    for alert in alerts:
        assert _route_of(config, {"alertname": alert["alert"], **alert["labels"]}) == ["slack"], alert["alert"]


def test_destinations_are_files_the_secret_mounts_never_values() -> None:
    # GIVEN every destination, with recognisable secret values
    values = prometheus_values(ObservabilitySpec(), alerting=EVERYWHERE)
    alertmanager = values["alertmanager"]
    # WHEN the chart's values are rendered
    rendered = json.dumps(values)
    # THEN the operator mounts the kit's Secret, each receiver reads its file there, and no secret is in the values
    assert alertmanager["alertmanagerSpec"]["secrets"] == ["inferstack-alert-receivers"]
    receivers = {r["name"]: r for r in alertmanager["config"]["receivers"]}
    assert receivers["pagerduty"]["pagerduty_configs"] == [
        {"routing_key_file": f"{MOUNT}/pagerduty-routing-key", "send_resolved": True}
    ]
    assert receivers["slack"]["slack_configs"][0]["api_url_file"] == f"{MOUNT}/slack-webhook-url"
    assert receivers["webhook"]["webhook_configs"] == [{"url_file": f"{MOUNT}/webhook-url", "send_resolved": True}]
    for secret in ("pd-key", "hooks.slack.invalid", 'https://hook"'):
        assert secret not in rendered
    # and every key is one the pinned chart's values.yaml has (Helm ignores a misspelled one)
    defaults = load_defaults(CHARTS["kube-prometheus-stack"])
    unknown = unknown_paths(values, defaults)
    assert unknown == [], explain("kube-prometheus-stack", defaults, unknown)


def test_without_destinations_the_charts_alertmanager_config_is_left_alone() -> None:
    # GIVEN no destination
    alertmanager = prometheus_values(ObservabilitySpec())["alertmanager"]
    # WHEN / THEN the chart keeps its own config (its null receiver) and mounts nothing
    assert "config" not in alertmanager
    assert "secrets" not in alertmanager["alertmanagerSpec"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({}, "no destination"), ({"slack_channel": "#x", "webhook_url": "u"}, "slack_channel without slack_webhook_url")],
)
def test_destinations_refuse_what_routes_nowhere(kwargs: dict[str, Any], message: str) -> None:
    # GIVEN destinations a library user might pass
    # WHEN / THEN nothing to send to, or a channel for no webhook, is refused by name
    with pytest.raises(ValidationError, match=message):
        AlertDestinations(**kwargs)


def test_a_stack_sends_alerts_to_its_secret_destinations(tmp_path: Path) -> None:
    # GIVEN the prod stack paging through PagerDuty and notifying a Slack channel, the key and URL secret config values
    def edit(env: dict[str, Any]) -> None:
        env.setdefault("observability", {})["alerting"] = {
            "pagerdutyRoutingKeySecret": "pagerdutyKey",
            "slackWebhookSecret": "slackWebhook",
            "slackChannel": "#inference-alerts",
        }

    # WHEN it is planned (offline, the secret config values are marked stand-ins)
    plan = plan_with(tmp_path, "prod", edit)
    # THEN the receivers Secret lands in the monitoring namespace with secret data, and the chart routes to both
    secret = only(plan.resources, "kubernetes:core/v1:Secret", "observability-alert-receivers")
    assert secret.inputs["metadata"] == {"name": "inferstack-alert-receivers", "namespace": "monitoring"}
    assert secret.inputs["stringData"] == "[secret]"
    release = helm_release(plan.resources, "kube-prometheus-stack")
    config = release.inputs["values"]["alertmanager"]["config"]
    assert [r["name"] for r in config["receivers"]] == ["null", "pagerduty", "slack"]
    assert config["receivers"][2]["slack_configs"][0]["channel"] == "#inference-alerts"


def test_a_slack_channel_without_its_webhook_is_one_line() -> None:
    # GIVEN a channel but no webhook
    def edit(env: dict[str, Any]) -> None:
        env.setdefault("observability", {})["alerting"] = {"slackChannel": "#alerts"}

    # WHEN / THEN the config error names both keys
    (line,) = config_errors(edit)
    assert "observability.alerting" in line and "slackWebhookSecret" in line
