"""Each wiring defect of the prod review, re-introduced one at a time on today's bundled prod plan.

GIVEN the real ``prod`` plan (issue 12's fixes in place, no mandatory violation) WHEN one fix is undone in
its plan JSON THEN that link's rule reports it as mandatory, naming both ends and the fix.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from inferstack_cli.plan import Plan
from policies.rules import check_plan

PlanOf = Callable[[str], Plan]
Resources = list[dict[str, Any]]


@pytest.fixture
def prod(plan_of: PlanOf) -> Resources:
    return copy.deepcopy(plan_of("prod").to_json()["resources"])


def find(plan: Resources, name: str, suffix: str) -> dict[str, Any]:
    """The resource of type ``…suffix`` named ``name``: a Helm release by its release name (``helm list``'s)."""
    (found,) = [
        r
        for r in plan
        if r["type"].endswith(suffix) and name == (r["inputs"]["name"] if suffix == "Release" else r["name"])
    ]
    return found


def mandatory(plan: Resources, rule: str) -> list[dict[str, Any]]:
    return [v for v in check_plan(plan, "cloud") if v["policy"] == rule and v["enforcement"] == "mandatory"]


def test_todays_prod_plan_is_clean(prod: Resources) -> None:
    assert [v for v in check_plan(prod, "cloud") if v["enforcement"] == "mandatory"] == []


def test_the_engine_build_uploading_with_the_read_only_loader_role(prod: Resources) -> None:
    find(prod, "llama-70b-engine-build", "Job")["inputs"]["spec"]["template"]["spec"]["serviceAccountName"] = (
        "model-loader"
    )
    (found, *_) = mandatory(prod, "stack-object-store-permissions")
    assert "llama-70b-engine-build" in found["message"] and "publish-engine" in found["message"]
    assert "model-loader" in found["message"] and "s3:PutObject" in found["message"]


def test_the_missing_ebs_csi_driver(prod: Resources) -> None:
    prod.remove(find(prod, "inferstack-prod-aws-ebs-csi-driver", "Addon"))
    found = mandatory(prod, "stack-storage-provisioner")
    assert found, "claims without a provisioner must be reported"
    assert any("kube-prometheus-stack" in v["message"] and "ebs.csi.aws.com" in v["message"] for v in found)


def test_the_missing_load_balancer_controller(prod: Resources) -> None:
    prod.remove(find(prod, "aws-load-balancer-controller", "Release"))
    (found,) = mandatory(prod, "stack-load-balancer-controller")
    assert "gateway-lb" in found["message"] and "AWS Load Balancer Controller" in found["message"]


def test_gpu_node_labels_the_device_plugin_does_not_select(prod: Resources) -> None:
    for name in ("karpenter-h100-nodepool", "karpenter-h200-nodepool"):
        labels = find(prod, name, "NodePool")["inputs"]["spec"]["template"]["metadata"]["labels"]
        del labels["inferstack.io/gpu-count"]  # the original defect: a NodePool without the daemons' label
    found = mandatory(prod, "stack-device-plugin-coverage")
    assert any(
        "llama-8b" in v["message"]
        and "nvidia-device-plugin" in v["message"]
        and "inferstack.io/gpu-count" in v["message"]
        for v in found
    ), found


def test_network_policies_without_enforcement(prod: Resources) -> None:
    addon = find(prod, "inferstack-prod-vpc-cni", "Addon")["inputs"]
    addon["configurationValues"] = json.dumps({})
    found = mandatory(prod, "stack-network-policy-enforced")
    assert any("NetworkPolicy inferstack-serving/llama-8b" in v["message"] and "vpc-cni" in v["message"] for v in found)


def test_an_unsupported_engine_flag(prod: Resources) -> None:
    container = find(prod, "llama-8b", "Deployment")["inputs"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = [*container["command"], "--otlp-traces-endpoint", "http://otel:4317"]
    (found,) = mandatory(prod, "stack-engine-args-supported")
    assert "llama-8b" in found["message"] and "--otlp-traces-endpoint" in found["message"]
    assert "vllm/vllm-openai:v0.11.0" in found["message"]
