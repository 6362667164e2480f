"""Each wiring defect of the prod review, re-introduced one at a time, is caught and named at both ends.

GIVEN a minimal cloud plan with the review's fixes in place (``fixed_cloud_plan``: an engine-build
role that may write, the EBS CSI driver and a default gp3 class, the AWS Load Balancer Controller,
GPU node labels the device plugin selects, an enforcing vpc-cni, supported engine flags), WHEN one
fix is undone, THEN exactly that link's rule reports it, and the message names both ends.

The fixes live on the issue-12 branch; the lead adds the same cases against the real prod plan
after the merge (see README, "Policy pack").
"""

from __future__ import annotations

import json

from policy_builders import BUCKET, edit, fixed_cloud_plan, gpu_node_pool, server, violations, without

POD = ("spec", "template", "spec")


def _pod(plan: list[dict], name: str, kind: str) -> dict:
    node = edit(plan, name, kind)["inputs"]
    for key in POD:
        node = node[key]
    return node


def test_the_fixed_plan_has_none_of_the_defects() -> None:
    plan = fixed_cloud_plan()
    for rule in (
        "stack-object-store-permissions",
        "stack-storage-provisioner",
        "stack-load-balancer-controller",
        "stack-device-plugin-coverage",
        "stack-network-policy-enforced",
        "stack-engine-args-supported",
    ):
        assert violations(plan, rule) == [], rule


def test_upload_with_a_read_only_role_names_the_job_and_the_role() -> None:
    plan = fixed_cloud_plan()
    # The defect: the engine build runs `--upload` as the loader's service account (read-only role).
    _pod(plan, "llama-engine-build", "Job")["serviceAccountName"] = "model-loader"
    (found,) = violations(plan, "stack-object-store-permissions")
    message = found["message"]
    assert "Job serving/llama-engine-build container publish-engine" in message
    assert "role model-loader" in message and "s3:PutObject" in message
    assert f"s3://{BUCKET}/engines/llama" in message
    assert found["urn"] == edit(plan, "llama-engine-build", "Job")["urn"]


def test_upload_role_without_put_object_is_caught_too() -> None:
    plan = fixed_cloud_plan()
    policy = edit(plan, "engine-builder", "RolePolicy")["inputs"]
    policy["policy"] = json.dumps({"Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": ["*"]}]})
    (found,) = violations(plan, "stack-object-store-permissions")
    assert "role engine-builder" in found["message"] and "publish-engine" in found["message"]


def test_missing_csi_driver_names_the_claim_and_the_storage_class() -> None:
    plan = without(fixed_cloud_plan(), "aws-ebs-csi-driver")
    (found,) = violations(plan, "stack-storage-provisioner")
    message = found["message"]
    assert "StatefulSet apps/cache volumeClaimTemplate data" in message
    assert "StorageClass gp3" in message and "ebs.csi.aws.com" in message
    assert "aws-ebs-csi-driver" in message


def test_missing_load_balancer_controller_names_the_service_and_the_controller() -> None:
    plan = without(fixed_cloud_plan(), "aws-load-balancer-controller")
    (found,) = violations(plan, "stack-load-balancer-controller")
    message = found["message"]
    assert "Service apps/gateway" in message
    assert "AWS Load Balancer Controller" in message and "aws-load-balancer-type: external" in message
    assert found["urn"] == edit(plan, "gateway")["urn"]


def test_label_mismatch_names_the_gpu_pod_the_device_plugin_and_the_pool() -> None:
    plan = without(fixed_cloud_plan(), "gpu", "NodePool")
    plan.append(gpu_node_pool({"inferstack.io/pool": "gpu"}))  # the NodePool forgets inferstack.io/gpu-count
    (found,) = violations(plan, "stack-device-plugin-coverage")
    message = found["message"]
    assert "Deployment serving/llama requests nvidia.com/gpu" in message
    assert "Helm release nvidia-device-plugin" in message and "inferstack.io/gpu-count Exists" in message
    assert "Karpenter NodePool gpu" in message
    # The plugin's own placement matches no pool either: the scheduling rule says so from its side.
    assert any("nvidia-device-plugin" in v["message"] for v in violations(plan, "stack-node-selectors-match-pools"))


def test_network_policy_without_enforcement_names_the_policy_and_the_cni() -> None:
    plan = fixed_cloud_plan()
    del edit(plan, "vpc-cni", "Addon")["inputs"]["configurationValues"]
    (found,) = violations(plan, "stack-network-policy-enforced")
    message = found["message"]
    assert "NetworkPolicy serving/llama" in message
    assert "vpc-cni add-on vpc-cni" in message and 'enableNetworkPolicy: "true"' in message


def test_unsupported_engine_flag_names_the_workload_the_flag_and_the_image() -> None:
    plan = fixed_cloud_plan()
    args = ["--tensor-parallel-size", "1", "--otlp-traces-endpoint", "http://otel:4317"]
    _pod(plan, "llama", "Deployment")["containers"] = [server(args)]
    (found,) = violations(plan, "stack-engine-args-supported")
    message = found["message"]
    assert "Deployment serving/llama container server" in message
    assert "--otlp-traces-endpoint" in message and "vllm/vllm-openai:v0.11.0" in message


def test_an_unsupported_engine_flag_inside_a_groups_ray_script_is_found_and_rays_flags_are_not() -> None:
    # GIVEN the leader and worker scripts a multi-node vLLM group runs (Ray's CLI, a wait, then `exec vllm serve`)
    from components.serving.inference_server import ray_group_script

    def scripted(role: str, args: list[str]) -> dict:
        container = server(args)
        container["command"] = ["/bin/sh", "-c", ray_group_script(role, container["command"])]
        return container

    supported = ["--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    plan = fixed_cloud_plan()
    _pod(plan, "llama", "Deployment")["containers"] = [scripted("leader", supported)]
    assert violations(plan, "stack-engine-args-supported") == []  # --head, --port, --block are Ray's
    _pod(plan, "llama", "Deployment")["containers"] = [scripted("worker", supported)]
    assert violations(plan, "stack-engine-args-supported") == []
    # WHEN the engine's own line carries a flag the pinned image lacks THEN it is named
    _pod(plan, "llama", "Deployment")["containers"] = [scripted("leader", [*supported, "--otlp-traces-endpoint", "x"])]
    (found,) = violations(plan, "stack-engine-args-supported")
    assert "--otlp-traces-endpoint" in found["message"]
