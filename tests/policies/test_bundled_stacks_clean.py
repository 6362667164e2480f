"""Every bundled stack plans with no mandatory violation of the policy pack, every rule at its declared level."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from helpers import bundled_stacks
from inferstack_cli.plan import Plan
from policies.rules import RULES_BY_ID, check_plan


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_is_clean(plan_of: Callable[[str], Plan], stack: str) -> None:
    plan = plan_of(stack)
    found = check_plan(plan.resources, plan.tier, plan.environment)
    mandatory = [v for v in found if RULES_BY_ID[v["policy"]].enforcement.value == "mandatory"]
    assert mandatory == [], "\n".join(f"{v['policy']}: {v['message']}" for v in mandatory)
