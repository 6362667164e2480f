"""Small helpers the unit tests share: find resources in a plan, decode user data."""

from __future__ import annotations

import base64
import email
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from inferstack_cli.mocks import Registration
from inferstack_cli.plan import Plan, run_plan

ROOT = Path(__file__).resolve().parent.parent


def bundled_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def raw_environment(stack: str) -> dict[str, Any]:
    """A deep copy of a bundled stack's ``inferstack:environment`` object, to edit in a test."""
    config = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    return dict(config["inferstack:environment"])


def only(resources: list[Registration], token: str, name: str | None = None) -> Registration:
    found = [r for r in resources if r.type == token and (name is None or r.name == name)]
    assert len(found) == 1, f"expected one {token} {name or ''}, found {[r.name for r in found]}"
    return found[0]


def helm_release(resources: list[Registration], name: str) -> Registration:
    """The one planned Helm release named ``name`` (its release name; the Pulumi resource is ``<component>-<name>``)."""
    found = [r for r in resources if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("name") == name]
    assert len(found) == 1, f"expected one Helm release {name}, found {len(found)}"
    return found[0]


def children(resources: list[Registration], parent: Registration) -> list[Registration]:
    return [r for r in resources if r.parent == parent.urn]


def user_data_node_config(launch_template: Registration) -> tuple[str, dict[str, Any]]:
    """Decode a launch template's user data: (content type of the part, parsed NodeConfig)."""
    message = email.message_from_string(base64.b64decode(launch_template.inputs["userData"]).decode())
    assert message.is_multipart(), "user data must be MIME multi-part for EKS to merge it"
    (part,) = message.get_payload()
    return part.get_content_type(), yaml.safe_load(part.get_payload())


def plan_with(tmp_path: Path, stack: str, edit: Callable[[dict[str, Any]], None]) -> Plan:
    """Plan a bundled stack after ``edit`` changed its environment (written to ``tmp_path``)."""
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    edit(document["config"]["inferstack:environment"])
    (tmp_path / f"Pulumi.{stack}x.yaml").write_text(yaml.safe_dump(document))
    return run_plan(f"{stack}x", tmp_path)


def plan_cli(stacks_dir: Path, stack: str) -> subprocess.CompletedProcess[str]:
    """`inferstack plan --stack <stack>` on a stack file in `stacks_dir`, as a user runs it."""
    command = [sys.executable, "-m", "inferstack_cli.main", "plan", "--stack", stack, "--stacks-dir", str(stacks_dir)]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)


def refused_by_plan(tmp_path: Path, stack: str, edit: Callable[[dict[str, Any]], Any], name: str = "bad") -> str:
    """Write a bundled stack with ``edit`` applied as stack ``name`` and run `inferstack plan` on it: it must exit 2
    with one line for the stack file and no traceback. Returns that line."""
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    edit(document["config"]["inferstack:environment"])
    (tmp_path / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document))
    line = refused_line(tmp_path, name)
    assert line.startswith(f"{tmp_path}/Pulumi.{name}.yaml: inferstack:environment.")
    return line


def refused_line(stacks_dir: Path, name: str) -> str:
    """`inferstack plan` on the stack file ``name`` in ``stacks_dir``: exit 2, no traceback, one line for the stack
    file with what is allowed and the fix. Returns that line."""
    result = plan_cli(stacks_dir, name)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{stacks_dir}/Pulumi.{name}.yaml: ")
    assert "; allowed: " in line and "; fix: " in line
    return line


def releases_placed_on(plan: Plan, selector: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The planned Helm releases whose values put a pod on the nodes ``selector`` picks: release name -> values."""

    def placed(values: Any) -> bool:
        if isinstance(values, dict):
            return values.get("nodeSelector") == selector or any(placed(v) for v in values.values())
        return isinstance(values, list) and any(placed(v) for v in values)

    releases = plan.of_type("kubernetes:helm.sh/v3:Release")
    return {r.inputs["name"]: r.inputs["values"] for r in releases if placed(r.inputs.get("values") or {})}


def config_errors(edit: Callable[[dict[str, Any]], None], stack: str = "prod") -> list[str]:
    """Edit a bundled stack's environment; return the ConfigError lines, each checked for the common shape."""
    import copy

    import pytest

    from stacks.environment import ConfigError, load_environment

    source = f"stacks/Pulumi.{stack}.yaml"
    env = copy.deepcopy(raw_environment(stack))
    edit(env)
    with pytest.raises(ConfigError) as caught:
        load_environment(env, source)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{source}: inferstack:environment") for line in lines)
    assert all("; allowed: " in line and "; fix: " in line for line in lines)
    return lines


def cloud_stacks() -> list[str]:
    """Bundled stacks of the cloud tier (AWS-only checks run on these)."""
    return [s for s in bundled_stacks() if raw_environment(s).get("tier") == "cloud"]
