"""A stack output that is a secret is exported as a Pulumi secret: `pulumi stack output` prints plain ones to anyone
who can read the stack. The rule runs in `inferstack plan`, which knows which outputs are secret; CrossGuard does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from inferstack_cli.plan import Plan
from policies.rules import check_plan
from policy_builders import stack_outputs, violations

RULE = "stack-no-plain-secret-output"


@pytest.mark.parametrize(
    ("outputs", "says"),
    [
        ({"burst_api_key": "sk-" + "a" * 32}, "stack output burst_api_key is named like a secret"),
        ({"gateway": {"admin_token": "hunter22"}}, "stack output gateway.admin_token is named like a secret"),
        ({"cache_url": "rediss://default:hunter22@cache:6379"}, "stack output cache_url holds a credential"),
        ({"keys": ["AKIA" + "A" * 16]}, "stack output keys[0] holds a credential"),
    ],
)
def test_a_plain_secret_output_is_caught(outputs: dict[str, Any], says: str) -> None:
    # GIVEN an output exported in plain text, by its name or by what it holds, nested or not
    (found,) = violations([stack_outputs(**outputs)], RULE)
    # THEN the finding names the output and the fix, about the stack as a whole
    assert found["message"].startswith(says) and "pulumi.Output.secret" in found["message"]
    assert found["urn"] is None


def test_secrets_references_and_plain_facts_pass() -> None:
    outputs = stack_outputs(
        kubeconfig="[secret]",
        grafana_admin_password="[secret]",
        api_key_secret_name="gateway-api-keys",
        token_budget=4000,
        cache_url="redis://cache.inferstack-cache.svc.cluster.local:6379",
        gateway_url="http://gateway.inferstack-gateway.svc/v1",
    )
    assert violations([outputs], RULE) == []


def test_a_bundled_stack_whose_secret_output_goes_plain_is_caught(plan_of: Callable[[str], Plan]) -> None:
    # GIVEN the dev plan, whose Grafana password is a secret output, and the same plan with it in plain text
    plan = plan_of("dev")
    assert plan.outputs["grafana_admin_password"] == "[secret]"
    leaked = {**plan.outputs, "grafana_admin_password": "generated-but-plain"}
    # WHEN the pack runs on each THEN only the plain one is caught
    assert [
        v for v in check_plan(plan.resources, plan.tier, plan.environment, plan.outputs) if v["policy"] == RULE
    ] == []
    (found,) = [v for v in check_plan(plan.resources, plan.tier, plan.environment, leaked) if v["policy"] == RULE]
    assert "grafana_admin_password" in found["message"]


def test_crossguard_hands_the_root_stacks_outputs_with_secrets_unmarked() -> None:
    """Why the rule is not in the CrossGuard pack: the root stack resource and its outputs reach a stack policy, but
    pulumi_policy's AnalyzeStack decrypts every secret into a plain value (pulumi/pulumi-policy#241). If this fails,
    the SDK now keeps secrets marked and the rule can join the pack."""
    from google.protobuf import struct_pb2
    from pulumi.runtime import proto
    from pulumi_policy import EnforcementLevel, StackValidationArgs, StackValidationPolicy
    from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
    from pulumi_policy.policy import _PolicyAnalyzerServicer

    from policies.model import plain

    seen: dict[str, Any] = {}

    def look(args: StackValidationArgs, _report: object) -> None:
        seen.update({r.resource_type: plain(r.props) for r in args.resources})

    # GIVEN the engine's request: the root stack with a plain output and a secret one, as the CLI marshals them
    props = struct_pb2.Struct()
    props.update({"tier": "cloud", "kubeconfig": {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": "apiVersion: v1"}})
    root = proto.AnalyzerResource(
        type="pulumi:pulumi:Stack",
        urn="urn:pulumi:dev::inferstack::pulumi:pulumi:Stack::inferstack-dev",
        properties=props,
    )
    probe = StackValidationPolicy(name="probe", description="what a stack policy sees", validate=look)
    # WHEN the pack's analyzer runs a stack policy on it
    _PolicyAnalyzerServicer("p", "0.0.1", [probe], EnforcementLevel.ADVISORY).AnalyzeStack(
        proto.AnalyzeStackRequest(resources=[root]), None
    )
    # THEN the outputs arrive, and the secret one is indistinguishable from a plain one
    assert seen == {"pulumi:pulumi:Stack": {"tier": "cloud", "kubeconfig": "apiVersion: v1"}}
