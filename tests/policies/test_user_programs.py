"""A user's own resources, written with pulumi_aws and pulumi_kubernetes beside the kit's components.

The README lets infra teams compose the components into their own stacks and add their own resources; the pack
must hold those to the security baseline too. Each program here is run under Pulumi's mock engine, so the rules
see the wire format the SDKs really send, and each case pairs the violation with the conforming spelling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi_aws as aws
import pytest

from inferstack_cli.plan import MockEngine
from policies.rules import check_plan

Run = Callable[[Callable[[], object], str], list[str]]

KMS_SECRETS: Any = {"resources": ["secrets"], "provider": {"key_arn": "arn:aws:kms:us-east-1:123456789012:key/k"}}


@pytest.fixture
def messages(engine: MockEngine) -> Run:
    """Run a user's program; the messages of one rule, each followed by the URN it names."""

    def run(program: Callable[[], object], rule: str) -> list[str]:
        program()
        found = check_plan(engine.settle(), "cloud")
        return [f"{v['message']} ({v['urn']})" for v in found if v["policy"] == rule]

    return run


def eks_cluster(**vpc: Any) -> aws.eks.Cluster:
    return aws.eks.Cluster(
        "team-eks",
        role_arn="arn:aws:iam::123456789012:role/eks",
        vpc_config={"subnet_ids": ["subnet-a", "subnet-b"], "endpoint_private_access": True, **vpc},
        encryption_config=KMS_SECRETS,
    )


def test_an_eks_endpoint_left_at_the_apis_default_is_public(messages: Run) -> None:
    # GIVEN a user's cluster that turns private access on and says nothing of public access, whose EKS API default
    # is true with publicAccessCidrs 0.0.0.0/0 (https://docs.aws.amazon.com/eks/latest/APIReference/API_VpcConfigRequest.html)
    # WHEN the pack runs THEN the endpoint is named as open to the internet, with the fix
    (found,) = messages(eks_cluster, "eks-private-endpoint")
    assert "endpointPublicAccess" in found and "team-eks" in found


def test_an_eks_endpoint_public_only_to_an_allowlist_or_not_at_all_passes(messages: Run) -> None:
    assert messages(lambda: eks_cluster(endpoint_public_access=False), "eks-private-endpoint") == []
    allowlisted = {"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24"]}
    assert messages(lambda: eks_cluster(**allowlisted), "eks-private-endpoint") == []
