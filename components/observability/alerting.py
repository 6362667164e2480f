"""Alertmanager routing: where the kit's alerts, and kube-prometheus-stack's own, reach a person.

Without it the chart's Alertmanager routes every alert to its ``null`` receiver: the SLO, XID and cache alerts fire
and notify no one. Each destination's URL or key is a secret. The component writes them into one Secret that
Alertmanager mounts (kube-prometheus-stack ``alertmanager.alertmanagerSpec.secrets``: each listed Secret appears
under ``/etc/alertmanager/secrets/<name>/``), and the config names the files: ``routing_key_file`` (PagerDuty),
``api_url_file`` (Slack) and ``url_file`` (webhook), which Alertmanager reads on every config load (its
configuration reference, "pagerduty_config", "slack_config", "webhook_config"; the pinned chart 88.0.0 runs
Alertmanager v0.33.1). Nothing secret is in the chart's values, which Helm keeps in the release's own Secret and
Pulumi in its state.

Routing is by the ``severity`` label every kit alert carries (``alerts.py``), as kube-prometheus-stack's own rules
do: ``critical`` pages (PagerDuty), ``critical`` and ``warning`` go to chat (Slack) and to the webhook. Everything
else, the chart's always-firing ``Watchdog`` and its ``InfoInhibitor`` included, stays on the ``null`` receiver.
The chart's ``inhibit_rules``, ``global`` and ``templates`` are kept: Helm merges these values into its defaults.
"""

from __future__ import annotations

from typing import Any, Final

import pulumi
from pydantic import model_validator

from components.specs import Args, StrInput

ALERT_RECEIVERS_SECRET: Final = "inferstack-alert-receivers"
"""The Secret, in Alertmanager's namespace, that holds each destination's URL or key."""
MOUNT: Final = f"/etc/alertmanager/secrets/{ALERT_RECEIVERS_SECRET}"
"""Where the operator mounts it in the Alertmanager pod (``alertmanagerSpec.secrets``)."""
PAGERDUTY_KEY: Final = "pagerduty-routing-key"
SLACK_KEY: Final = "slack-webhook-url"
WEBHOOK_KEY: Final = "webhook-url"

GROUP_BY: Final = ("alertname", "namespace", "inferstack_model")
"""One notification per alert, namespace and model: a model's burn and its queue are separate pages."""
PAGED: Final = 'severity = "critical"'
NOTIFIED: Final = 'severity =~ "critical|warning"'


class AlertDestinations(Args):
    """Where alerts go; each URL or key a Pulumi secret (``pulumi.Output.secret``), or a plain string in tests."""

    pagerduty_routing_key: StrInput | None = None
    """A PagerDuty Events API v2 integration key: critical alerts page."""
    slack_webhook_url: StrInput | None = None
    """A Slack incoming webhook: critical and warning alerts, and their resolution."""
    slack_channel: str | None = None
    """Overrides the webhook's own channel (``#channel`` or ``@user``)."""
    webhook_url: StrInput | None = None
    """Any receiver of Alertmanager's webhook JSON (an incident tool, a chat bridge): critical and warning alerts."""

    @model_validator(mode="after")
    def _somewhere(self) -> AlertDestinations:
        if self.slack_channel is not None and self.slack_webhook_url is None:
            raise ValueError("slack_channel without slack_webhook_url: set the webhook too, or drop the channel")
        if not self.secrets():
            raise ValueError("no destination: set pagerduty_routing_key, slack_webhook_url or webhook_url")
        return self

    def secrets(self) -> dict[str, pulumi.Input[str]]:
        """The Secret's data: one key per destination given."""
        given = {
            PAGERDUTY_KEY: self.pagerduty_routing_key,
            SLACK_KEY: self.slack_webhook_url,
            WEBHOOK_KEY: self.webhook_url,
        }
        return {key: value for key, value in given.items() if value is not None}


def alertmanager_config(destinations: AlertDestinations) -> dict[str, Any]:
    """kube-prometheus-stack ``alertmanager.config``: the route tree and its receivers (secrets as files)."""
    receivers: list[dict[str, Any]] = [{"name": "null"}]
    routes: list[dict[str, Any]] = []
    if destinations.pagerduty_routing_key is not None:
        receivers.append(
            {
                "name": "pagerduty",
                "pagerduty_configs": [{"routing_key_file": f"{MOUNT}/{PAGERDUTY_KEY}", "send_resolved": True}],
            }
        )
        routes.append({"receiver": "pagerduty", "matchers": [PAGED], "continue": True})
    if destinations.slack_webhook_url is not None:
        slack: dict[str, Any] = {
            "api_url_file": f"{MOUNT}/{SLACK_KEY}",
            "send_resolved": True,
            # Alertmanager's notification template language (Go templates), read by Alertmanager, not Helm: the
            # chart renders alertmanager.config with toYaml unless alertmanager.tplConfig is true (false here).
            "title": "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}",
            "text": "{{ range .Alerts }}{{ .Annotations.summary }}\n{{ .Annotations.description }}\n{{ end }}",
        }
        if destinations.slack_channel is not None:
            slack["channel"] = destinations.slack_channel
        receivers.append({"name": "slack", "slack_configs": [slack]})
        routes.append({"receiver": "slack", "matchers": [NOTIFIED], "continue": True})
    if destinations.webhook_url is not None:
        receivers.append(
            {"name": "webhook", "webhook_configs": [{"url_file": f"{MOUNT}/{WEBHOOK_KEY}", "send_resolved": True}]}
        )
        routes.append({"receiver": "webhook", "matchers": [NOTIFIED], "continue": True})
    return {
        "route": {
            "receiver": "null",
            "group_by": list(GROUP_BY),
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": routes,
        },
        "receivers": receivers,
    }
