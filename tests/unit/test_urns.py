"""Logical names and type tokens are a public contract: every bundled stack (each tier) plans the same URNs.

A component moved between modules keeps its type token and its children's names, so an existing stack's
``pulumi up`` sees no replacement. The golden lists change only on purpose: refresh with
``UPDATE_SNAPSHOT=1 pytest tests/unit/test_urns.py`` and review the diff (a removed URN is a destroy on
``pulumi up``: ship ``aliases`` for a rename).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import bundled_stacks
from inferstack_cli.plan import Plan

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "urns"


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stacks_plan_the_golden_urns(stack: str, plan_of: Callable[[str], Plan]) -> None:
    # GIVEN a bundled stack of any tier (cloud dev and prod, onprem, edge) WHEN it is planned
    urns = sorted(r.urn for r in plan_of(stack).resources)
    path = GOLDEN / f"{stack}.txt"
    if os.environ.get("UPDATE_SNAPSHOT") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(urns) + "\n")
    # THEN every URN is the one the last reviewed plan had: nothing renamed, nothing silently dropped
    assert path.exists(), f"{path} is missing: run UPDATE_SNAPSHOT=1 pytest tests/unit/test_urns.py and review it"
    golden = path.read_text().split()
    assert sorted(set(golden) - set(urns)) == [], "URNs gone from the plan (a destroy on pulumi up)"
    assert sorted(set(urns) - set(golden)) == [], "new URNs: refresh the golden list on purpose"
