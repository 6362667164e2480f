"""Run the stack program under Pulumi's mock engine and collect what it would create.

No provisioning logic lives here: the program is ``stacks.program.run``, the same one
``pulumi up`` runs. This module only feeds it a stack's config and records the result.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import settings
from pulumi.runtime.stack import wait_for_rpcs

from inferstack_cli.mocks import PlanMocks, RecordingMonitor, Registration
from stacks import program
from stacks.environment import (
    AWS_REGION_KEY,
    CONFIG_KEY,
    ConfigError,
    ConfigIssue,
    Environment,
    load_environment,
    provider_region_issues,
)

PROJECT = "inferstack"
OFFLINE_SECRET = "<inferstack plan: offline stand-in, not a real secret>"


@dataclass
class Plan:
    project: str
    stack: str
    tier: str
    environment: Environment
    resources: list[Registration]
    outputs: dict[str, Any]
    violations: list[dict[str, Any]] = field(default_factory=list)
    renders: dict[str, str] = field(default_factory=dict)
    """Relative path → text of every rendered artifact (user data, manifests, templates)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "stack": self.stack,
            "tier": self.tier,
            "resources": [
                {"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent, "inputs": r.inputs}
                for r in self.resources
            ],
            "outputs": self.outputs,
            "violations": self.violations,
        }

    def of_type(self, token: str) -> list[Registration]:
        return [r for r in self.resources if r.type == token]

    def counts(self) -> Counter[str]:
        return Counter(r.type for r in self.resources)


def stack_config_path(stack: str, stacks_dir: Path) -> Path:
    return stacks_dir / f"Pulumi.{stack}.yaml"


def source_name(stack: str, stacks_dir: Path) -> str:
    """How errors name the stack file: as Pulumi users know it, or the path given with --stacks-dir."""
    if stacks_dir.resolve() == program.STACKS_DIR:
        return program.stack_file(stack)
    return str(stack_config_path(stack, stacks_dir))


def read_stack_config(stack: str, stacks_dir: Path) -> dict[str, Any]:
    path = stack_config_path(stack, stacks_dir)
    source = source_name(stack, stacks_dir)
    if not path.is_file():
        known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml") if p.is_file())
        raise ConfigError(
            source,
            [
                ConfigIssue(
                    "--stack",
                    repr(stack),
                    ", ".join(known) or "no stacks found",
                    f"create {source} or pick a known stack",
                )
            ],
        )
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        line = err.object[: err.start].count(b"\n") + 1
        issue = ConfigIssue(f"line {line}", "text that is not UTF-8", "a UTF-8 YAML file", "save it as UTF-8")
        raise ConfigError(source, [issue]) from None
    except OSError as err:
        issue = ConfigIssue("(the file)", f"unreadable ({err.strerror})", "a readable file", "check its permissions")
        raise ConfigError(source, [issue]) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "the file"
        problem = getattr(err, "problem", None) or "unparsable"
        issue = ConfigIssue(where, f"invalid YAML ({problem})", "a YAML mapping", "fix the indentation or syntax there")
        raise ConfigError(source, [issue]) from None
    if not isinstance(document, dict):
        raise ConfigError(
            source,
            [
                ConfigIssue(
                    "(top level)",
                    f"{_yaml_kind(document)}, not a mapping",
                    "a mapping with a `config:` section",
                    "start the file with `config:` and put `inferstack:environment:` under it",
                )
            ],
        )
    config = document.get("config")
    if not isinstance(config, dict):
        got, fix = (
            ("nothing", "add a `config:` section")
            if config is None
            else (f"{_yaml_kind(config)}, not a mapping", "write `inferstack:environment:` indented under `config:`")
        )
        raise ConfigError(source, [ConfigIssue("config", got, "a mapping of config keys", fix)])
    return config


def _yaml_kind(value: Any) -> str:
    """What a YAML node is, as a config error says it: ``a list``, ``the string 'hello'``, ``the number 5``."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    return f"a {type(value).__name__}"


def _config_values(config: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Pulumi config as the engine passes it: strings, objects as JSON, secure values masked."""
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            values[key] = "[secret]"
            secret_keys.append(key)
        elif isinstance(value, str):
            values[key] = value
        else:
            values[key] = json.dumps(value)
    return values, secret_keys


async def _resolve(value: Any) -> Any:
    output = pulumi.Output.from_input(value)
    if await output.is_secret():
        return "[secret]"
    return await output.future()


@contextmanager
def mock_engine(stack: str, config: dict[str, str], secret_keys: list[str], region: str) -> Iterator[MockEngine]:
    """Pulumi's mock engine with a fresh event loop, torn down afterwards (facts.md's gotchas)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    mocks = PlanMocks(region=region)
    monitor = RecordingMonitor(mocks)
    try:
        pulumi.runtime.set_all_config(config, secret_keys)
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
        yield MockEngine(loop, monitor)
    finally:
        settings.reset_options()
        pulumi.runtime.set_all_config({})
        # A program that stopped part-way (a refused input, a test's assertion) leaves Pulumi's tasks pending: end them
        # on this loop, or their coroutines are collected unawaited in whatever test runs next.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        # The mock monitor runs in executor threads that each open an event loop; end them with ours.
        loop.run_until_complete(loop.shutdown_default_executor())
        monitor.close()
        loop.close()
        asyncio.set_event_loop(None)


@dataclass
class MockEngine:
    loop: asyncio.AbstractEventLoop
    monitor: RecordingMonitor

    def settle(self) -> list[Registration]:
        """Wait for every outstanding registration; return all recorded so far."""
        self.loop.run_until_complete(wait_for_rpcs())
        return list(self.monitor.registrations)

    def resolve(self, value: Any) -> Any:
        """The plain value of an input or output (``[secret]`` for secrets)."""
        result = self.loop.run_until_complete(_resolve(value))
        self.settle()
        return result


def load_stack(stack: str, stacks_dir: Path) -> tuple[dict[str, Any], Environment]:
    """A stack file's config and its validated environment, ``aws:region`` included; ``ConfigError`` otherwise."""
    config = read_stack_config(stack, stacks_dir)
    source = source_name(stack, stacks_dir)
    env = load_environment(config.get(CONFIG_KEY), source, f"{PROJECT}/{stack}")
    region_issues = provider_region_issues(env, config.get(AWS_REGION_KEY))
    if region_issues:
        raise ConfigError(source, region_issues)
    return config, env


def run_plan(stack: str, stacks_dir: Path = program.STACKS_DIR) -> Plan:
    """Plan ``stack`` offline. Raises ``ConfigError`` for bad config, before any resource exists."""
    config, env = load_stack(stack, stacks_dir)
    values, secret_keys = _config_values(config)
    for name in env.secret_keys() if hasattr(env, "secret_keys") else ():
        key = f"{PROJECT}:{name}"
        if key not in values:
            # Offline there is no kubeconfig or store credential: a marked stand-in, secret like the real one.
            values[key] = OFFLINE_SECRET
            secret_keys.append(key)
    with (
        mock_engine(stack, values, secret_keys, getattr(env, "region", "us-east-1")) as engine,
        program.config_read_from(source_name(stack, stacks_dir)),
    ):
        program.run()
        resources = engine.settle()
        root = settings.get_root_resource()
        outputs = {k: engine.resolve(v) for k, v in (getattr(root, "outputs", None) or {}).items()}
    return Plan(project=PROJECT, stack=stack, tier=env.tier, environment=env, resources=resources, outputs=outputs)
