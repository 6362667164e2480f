"""Golden renders of node user data per bundled stack, "to better track diffs across changes".

Refresh deliberately with ``UPDATE_SNAPSHOT=1 pytest tests/unit/test_golden_user_data.py`` and review the diff.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import ROOT, bundled_stacks, raw_environment
from inferstack_cli import render
from inferstack_cli.plan import Plan

GOLDEN = ROOT / "tests" / "golden"


def check_golden(path: Path, text: str) -> None:
    if os.environ.get("UPDATE_SNAPSHOT") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden file {path}; run with UPDATE_SNAPSHOT=1 and review it"
    assert text == path.read_text(), f"{path} changed; if intended, refresh with UPDATE_SNAPSHOT=1 and review the diff"


@pytest.mark.parametrize("stack", [s for s in bundled_stacks() if raw_environment(s)["tier"] == "cloud"])
def test_rendered_user_data_matches_golden(plan_of: Callable[[str], Plan], stack: str) -> None:
    plan = plan_of(stack)
    files = {k: v for k, v in render.renders(plan.resources).items() if k.startswith("user-data/")}
    managed = [p for p in plan.environment.gpu_pools if p.provisioner == "managed"]
    # Managed pools carry user data; Karpenter pools get RAID0 from EC2NodeClass.instanceStorePolicy.
    assert len(files) == len(managed)
    for relative, text in files.items():
        check_golden(GOLDEN / stack / relative, text)
    on_disk = {p.relative_to(GOLDEN / stack).as_posix() for p in (GOLDEN / stack / "user-data").glob("*")}
    assert on_disk == set(files), "a golden file exists for a pool that no longer renders: delete it"
