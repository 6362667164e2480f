"""The one Pulumi program: ``pulumi up`` (via ``__main__.py``) and ``inferstack plan`` both run ``run()``."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulumi

from components.observability.alerting import AlertDestinations
from components.specs import AlertingSpec, ObservabilitySpec
from stacks.environment import (
    CONFIG_KEY,
    ConfigError,
    Environment,
    load_environment,
    provider_region,
    provider_region_issues,
)
from stacks.tiers import TIER_PLUGINS

STACKS_DIR = Path(__file__).resolve().parent


_config_source: str | None = None
"""Where the running stack's config was read from, when not ``stacks/Pulumi.<stack>.yaml`` (``inferstack plan
--stacks-dir``): errors name the file the user wrote."""


def stack_file(stack: str) -> str:
    return _config_source or f"stacks/Pulumi.{stack}.yaml"


@contextlib.contextmanager
def config_read_from(source: str) -> Iterator[None]:
    """Name ``source`` in the errors of the program run inside this block."""
    global _config_source
    previous, _config_source = _config_source, source
    try:
        yield
    finally:
        _config_source = previous


def require_secret(name: str, what: str, guide: str) -> pulumi.Output[str]:
    """A secret config value the tier needs, or a ConfigError naming the command that sets it.

    An empty value is refused like a missing one: set from an empty file, a kubeconfig of ``""`` is one that
    pulumi-kubernetes reads as unset, and the provider would use the deployer's ambient ``~/.kube/config``."""
    from stacks.environment import ConfigIssue

    value = pulumi.Config("inferstack").get(name)  # the plaintext, to see it is there; handed on only as a secret
    if value is None or not value.strip():
        raise ConfigError(
            stack_file(pulumi.get_stack()),
            [
                ConfigIssue(
                    f"inferstack:{name}",
                    "nothing" if value is None else "an empty string",
                    f"{what}, as a Pulumi secret",
                    f"pulumi config set --secret inferstack:{name} ... (see the README's {guide})",
                )
            ],
        )
    return pulumi.Output.secret(value)


def alert_destinations(spec: AlertingSpec) -> AlertDestinations | None:
    """The stack's Alertmanager destinations, their URLs and keys read from secret config; ``None`` when none is set."""
    if not spec.secret_names():
        return None

    def secret(name: str | None, what: str) -> pulumi.Output[str] | None:
        return None if name is None else require_secret(name, what, '"What to watch" section, "Where alerts go"')

    return AlertDestinations(
        pagerduty_routing_key=secret(spec.pagerduty_routing_key_secret, "the PagerDuty integration key"),
        slack_webhook_url=secret(spec.slack_webhook_secret, "the Slack incoming webhook URL"),
        slack_channel=spec.slack_channel,
        webhook_url=secret(spec.webhook_url_secret, "the alert webhook URL"),
    )


def observability_secrets(spec: ObservabilitySpec) -> dict[str, Any]:
    """The ``ObservabilityArgs`` the stack's secret config holds: alert destinations and the remote-write credential."""
    target = spec.remote_write
    name = target.credential_secret() if target is not None else None
    credential = (
        None
        if name is None
        else require_secret(name, "the remote-write credential", "config reference, observability.remoteWrite")
    )
    return {"alerting": alert_destinations(spec.alerting), "remote_write_credential": credential}


def environment() -> Environment:
    """Read and validate ``inferstack:environment`` from the running stack's config."""
    raw = pulumi.Config("inferstack").get_object(CONFIG_KEY.split(":", 1)[1])
    stack = pulumi.get_stack()
    env = load_environment(raw, stack_file(stack), f"{pulumi.get_project()}/{stack}")
    region_issues = provider_region_issues(env, *provider_region(pulumi.Config("aws").get("region"), os.environ))
    if region_issues:
        raise ConfigError(stack_file(stack), region_issues)
    return env


def run() -> None:
    env = environment()
    compose: Callable[[Environment, str], dict[str, Any]] = importlib.import_module(
        TIER_PLUGINS[env.tier].compose_module
    ).compose
    for key, value in compose(env, pulumi.get_stack()).items():
        pulumi.export(key, value)


def main() -> None:
    """Entry for ``pulumi up``: config errors print one line each, no traceback, exit code 2."""
    try:
        run()
    except ConfigError as err:
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
