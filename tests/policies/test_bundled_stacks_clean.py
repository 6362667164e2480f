"""Every bundled stack plans with no mandatory violation of the policy pack, every rule at its declared level."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from helpers import bundled_stacks
from inferstack_cli.plan import Plan
from policies.model import from_plan
from policies.rules import POLICIES, RULES_BY_ID, check_plan
from policies.tiers import tier_of


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_is_clean(plan_of: Callable[[str], Plan], stack: str) -> None:
    plan = plan_of(stack)
    found = check_plan(plan.resources, plan.tier, plan.environment, plan.outputs)
    mandatory = [v for v in found if RULES_BY_ID[v["policy"]].enforcement.value == "mandatory"]
    assert mandatory == [], "\n".join(f"{v['policy']}: {v['message']}" for v in mandatory)


def _under_crossguard(plan: Plan) -> dict[str, list[str]]:
    """Every whole-stack policy as `pulumi preview` runs it: the resources' inputs, no tier and no stack config."""
    from pulumi_policy import StackValidationArgs, StackValidationPolicy
    from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions

    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    resources = [
        PolicyResource(r["type"], r["inputs"], r["urn"], r["name"], opts, None, None, [], {})
        for r in plan.to_json()["resources"]
    ]
    reported: dict[str, list[str]] = {}
    for policy in POLICIES:
        if isinstance(policy, StackValidationPolicy) and policy.enforcement_level.value == "mandatory":
            policy.validate(
                StackValidationArgs(resources), lambda m, urn=None, n=policy.name: reported.setdefault(n, []).append(m)
            )
    return reported


@pytest.mark.parametrize("stack", bundled_stacks())
def test_bundled_stack_is_clean_under_crossguard_which_knows_neither_tier_nor_config(
    plan_of: Callable[[str], Plan], stack: str
) -> None:
    # The tier comes from the kit's namespaces (inferstack.io/tier); on-prem's persistentStorageClass, a class the
    # cluster already has, from their inferstack.io/cluster-storage-classes annotation.
    plan = plan_of(stack)
    assert tier_of(from_plan(plan.resources)) == plan.tier
    assert _under_crossguard(plan) == {}


def test_under_crossguard_an_undeclared_storage_class_is_still_caught(plan_of: Callable[[str], Plan]) -> None:
    plan = copy.deepcopy(plan_of("onprem"))
    for r in plan.resources:
        if r.type == "kubernetes:core/v1:Namespace":
            r.inputs["metadata"].pop("annotations")
    found = _under_crossguard(plan)
    assert list(found) == ["stack-storage-provisioner"]
    assert all("StorageClass ceph-rbd" in m for m in found["stack-storage-provisioner"])
