"""The cloud stack's ordering: what must exist before a pod that needs it is created."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi
import pytest

from components.aws.iam import PodIdentityRole
from helpers import only
from inferstack_cli.plan import run_plan
from stacks import shared


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_model_servers_wait_for_the_pod_identity_associations_their_pods_use(
    monkeypatch: pytest.MonkeyPatch, stack: str
) -> None:
    # GIVEN the cloud stack composing its model servers, with what each is told to wait for recorded
    waits: dict[str, list[pulumi.Resource]] = {}
    compose = shared.inference_server

    def recording(env: Any, model: Any, *args: Any, after: Sequence[pulumi.Resource], **kwargs: Any) -> Any:
        waits[model.name] = list(after)
        return compose(env, model, *args, after=after, **kwargs)

    monkeypatch.setattr(shared, "inference_server", recording)

    # WHEN the bundled stack is planned
    run_plan(stack)

    # THEN every server (its Deployment or LeaderWorkerSet, and a Triton model's engine-build Job) waits for the
    # model-loader and engine-builder Pod Identity roles, whose association the EKS Pod Identity webhook reads when
    # it admits a pod: a pod created before the association never gets AWS credentials (its env is fixed at admission)
    assert waits, f"{stack} composes no model server"
    for model, after in waits.items():
        roles = sorted(r._name for r in after if isinstance(r, PodIdentityRole))
        assert roles == ["engine-builder", "model-loader"], f"{model} waits for {roles}"


def test_the_interruption_queue_refuses_plain_http(plan_of: Any) -> None:
    # GIVEN the prod stack's Karpenter interruption queue policy
    policy = json.loads(only(plan_of("prod").resources, "aws:sqs/queuePolicy:QueuePolicy").inputs["policy"])

    # THEN, as upstream's v1.14.1 CloudFormation (KarpenterInterruptionQueuePolicy, Sid DenyHTTP), every SQS action over
    # a connection without TLS is denied, beside EventBridge's SendMessage
    (deny,) = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert deny["Action"] == "sqs:*"
    assert deny["Principal"] == "*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    (allow,) = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    assert deny["Resource"] == allow["Resource"]
