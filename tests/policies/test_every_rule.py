"""Every rule of the pack, each with a violating input that it catches and a conforming one that passes.

Inputs are small synthetic resource lists in the plan JSON's wire format; a case changes one field
of a conforming object (``policy_builders``). The last tests check the table covers every rule and
that the pack is built from real CrossGuard classes.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from pulumi_policy import ResourceValidationPolicy, StackValidationPolicy

from helpers import ROOT
from policies.rules import POLICIES, RULES, RULES_BY_ID
from policy_builders import (
    DIGEST,
    INTERNAL_LB,
    container,
    deployment,
    edit,
    fixed_cloud_plan,
    gpu_node_pool,
    job,
    k8s,
    pod_spec,
    release,
    res,
    server,
    service,
    stack_outputs,
    violations,
    without,
)

Plan = list[dict[str, Any]]


def lt(**inputs: Any) -> Plan:
    good = {
        "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"encrypted": "true"}}],
        "networkInterfaces": [{"associatePublicIpAddress": "false"}],
    }
    return [res("aws:ec2/launchTemplate:LaunchTemplate", "lt", {**good, **inputs})]


def one(type_: str, **inputs: Any) -> Plan:
    return [res(type_, "x", inputs)]


def dep(**spec: Any) -> Plan:
    return [deployment("app", pod_spec(**spec))]


def with_container(**fields: Any) -> Plan:
    return [deployment("app", pod_spec(container(**fields)))]


def sc(**fields: Any) -> dict[str, Any]:
    base = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return {**base, **fields}


def plan_edit(change: Callable[[Plan], Plan | None]) -> Plan:
    plan = fixed_cloud_plan()
    return change(plan) or plan


def _set(plan: Plan, name: str, suffix: str, path: list[str], value: Any) -> Plan:
    node = edit(plan, name, suffix)["inputs"]
    for key in path[:-1]:
        node = node[key] if not isinstance(node, list) else node[int(key)]
    node[path[-1]] = value
    return plan


POD = ["spec", "template", "spec"]

# rule id → (violating plan, conforming plan, tier or None)
CASES: dict[str, tuple[Plan, Plan, str | None]] = {
    "imdsv2-required": (lt(metadataOptions={"httpTokens": "optional"}), lt(), None),
    "ebs-encrypted": (lt(blockDeviceMappings=[{"deviceName": "/dev/xvda", "ebs": {"encrypted": "false"}}]), lt(), None),
    "no-public-node-ip": (lt(networkInterfaces=[{"associatePublicIpAddress": "true"}]), lt(), None),
    "no-public-subnet-ip": (
        one("aws:ec2/subnet:Subnet", mapPublicIpOnLaunch=True),
        one("aws:ec2/subnet:Subnet", mapPublicIpOnLaunch=False),
        None,
    ),
    "eks-private-endpoint": (
        one("aws:eks/cluster:Cluster", vpcConfig={"endpointPrivateAccess": False}),
        one("aws:eks/cluster:Cluster", vpcConfig={"endpointPrivateAccess": True, "endpointPublicAccess": False}),
        None,
    ),
    "sg-no-internet-ingress": (
        one("aws:ec2/securityGroup:SecurityGroup", ingress=[{"protocol": "tcp", "cidrBlocks": ["0.0.0.0/0"]}]),
        one(
            "aws:ec2/securityGroup:SecurityGroup",
            ingress=[{"protocol": "tcp", "cidrBlocks": ["10.0.0.0/16"]}],
            egress=[{"protocol": "-1", "cidrBlocks": ["0.0.0.0/0"]}],
        ),
        None,
    ),
    "elb-internal": (
        one("aws:lb/loadBalancer:LoadBalancer", loadBalancerType="network"),
        one("aws:lb/loadBalancer:LoadBalancer", loadBalancerType="network", internal=True),
        None,
    ),
    "eks-secrets-kms": (
        one("aws:eks/cluster:Cluster", encryptionConfig={}),
        one("aws:eks/cluster:Cluster", encryptionConfig={"resources": ["secrets"], "provider": {"keyArn": "arn:k"}}),
        None,
    ),
    "s3-public-access-blocked": (
        one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", blockPublicAcls=True),
        one(
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            blockPublicAcls=True,
            blockPublicPolicy=True,
            ignorePublicAcls=True,
            restrictPublicBuckets=True,
        ),
        None,
    ),
    "s3-sse-kms": (
        one(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            rules=[{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}],
        ),
        one(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            rules=[{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}],
        ),
        None,
    ),
    "ecr-immutable-scanned": (
        one("aws:ecr/repository:Repository", imageTagMutability="MUTABLE"),
        one(
            "aws:ecr/repository:Repository",
            imageTagMutability="IMMUTABLE",
            imageScanningConfiguration={"scanOnPush": True},
        ),
        None,
    ),
    "iam-no-wildcard-inline": (
        one("aws:iam/rolePolicy:RolePolicy", policy=json.dumps({"Statement": [{"Effect": "Allow", "Action": "*"}]})),
        one(
            "aws:iam/rolePolicy:RolePolicy",
            policy=json.dumps({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject"}]}),
        ),
        None,
    ),
    "iam-no-wildcard-managed": (
        one("aws:iam/policy:Policy", policy=json.dumps({"Statement": [{"Effect": "Allow", "Action": ["*:*"]}]})),
        one(
            "aws:iam/policy:Policy", policy=json.dumps({"Statement": [{"Effect": "Allow", "Action": ["s3:GetObject"]}]})
        ),
        None,
    ),
    "iam-no-admin-attachment": (
        one(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment", policyArn="arn:aws:iam::aws:policy/AdministratorAccess"
        ),
        one(
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            policyArn="arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
        ),
        None,
    ),
    "gpu-node-taint": (
        one("aws:eks/nodeGroup:NodeGroup", amiType="AL2023_x86_64_NVIDIA", taints=[]),
        one(
            "aws:eks/nodeGroup:NodeGroup",
            amiType="AL2023_x86_64_NVIDIA",
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
        ),
        None,
    ),
    "elasticache-encrypted-authenticated": (
        one(
            "aws:elasticache/replicationGroup:ReplicationGroup",
            atRestEncryptionEnabled=False,
            transitEncryptionEnabled=True,
            userGroupIds=["cache"],
        ),
        one(
            "aws:elasticache/replicationGroup:ReplicationGroup",
            atRestEncryptionEnabled=True,
            transitEncryptionEnabled=True,
            transitEncryptionMode="required",
            userGroupIds=["cache"],
        ),
        None,
    ),
    # Kubernetes objects
    "pss-run-as-non-root": (
        with_container(securityContext=sc(runAsNonRoot=False, runAsUser=0)),
        with_container(),
        None,
    ),
    "pss-no-privilege-escalation": (
        with_container(securityContext=sc(allowPrivilegeEscalation=True)),
        with_container(),
        None,
    ),
    "pss-drop-all-capabilities": (
        with_container(securityContext=sc(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})),
        with_container(securityContext=sc(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})),
        None,
    ),
    "pss-seccomp-runtime-default": (dep(securityContext={}), dep(), None),
    "pss-no-host-namespaces-or-privileged": (dep(hostNetwork=True), dep(), None),
    "pss-restricted-volume-types": (
        dep(volumes=[{"name": "etc", "hostPath": {"path": "/etc"}}]),
        dep(volumes=[{"name": "cache", "hostPath": {"path": "/mnt/k8s-disks/0/inferstack/models"}}]),
        None,
    ),
    "k8s-read-only-root-filesystem": (with_container(securityContext=sc()), with_container(), None),
    "k8s-cpu-memory-requests": (
        [job("build", pod_spec(container(resources={"limits": {"nvidia.com/gpu": 1}})))],
        [job("build", pod_spec(container(resources={"limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": 1}})))],
        None,
    ),
    "k8s-image-pinned-by-digest": (
        with_container(image="redis:8.2.2"),
        with_container(image="redis:8.2.2" + DIGEST),
        None,
    ),
    "k8s-no-latest-tag": (with_container(image="redis:latest"), with_container(image="redis:8.2.2" + DIGEST), None),
    "k8s-automount-token-off": (dep(automountServiceAccountToken=True), dep(), None),
    "k8s-no-internet-facing-service": (
        [service("web", "LoadBalancer", {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing"})],
        [
            service("web", "LoadBalancer", INTERNAL_LB),
            service(
                "public",
                "LoadBalancer",
                {
                    "service.beta.kubernetes.io/aws-load-balancer-scheme": "internet-facing",
                    "inferstack.io/internet-facing": "true",
                },
            ),
        ],
        None,
    ),
    "k8s-no-secret-in-configmap": (
        [k8s("core/v1", "ConfigMap", "cfg", data={"app.yaml": "redis:\n  password: hunter22\n"})],
        [
            k8s(
                "core/v1",
                "ConfigMap",
                "cfg",
                data={"app.yaml": "limits:\n  tokens_per_minute: 4000\npassword: ${REDIS_PASSWORD}\n"},
            )
        ],
        None,
    ),
    "k8s-no-secret-in-env": (
        with_container(env=[{"name": "REDIS_PASSWORD", "value": "hunter22"}]),
        with_container(
            env=[
                {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "auth", "key": "password"}}},
                {"name": "REDIS_URL", "value": "rediss://:$(REDIS_PASSWORD)@cache:6379"},
            ]
        ),
        None,
    ),
    "helm-chart-pinned": ([release("keda", version=None), release("lws", version="^0.10")], [release("keda")], None),
    "helm-no-default-admin-credentials": (
        [release("kube-prometheus-stack", values={"grafana": {"resources": {}}})],
        [release("kube-prometheus-stack", values={"grafana": {"admin": {"existingSecret": "grafana-admin"}}})],
        None,
    ),
    "helm-alerts-reach-a-person": (
        [
            release("kube-prometheus-stack", values={"grafana": {"admin": {"existingSecret": "grafana-admin"}}}),
            release("kube-prometheus-stack", values={"alertmanager": {"config": {"receivers": [{"name": "null"}]}}}),
        ],
        [
            release(
                "kube-prometheus-stack",
                values={
                    "alertmanager": {
                        "config": {"receivers": [{"name": "null"}, {"name": "slack", "slack_configs": [{}]}]}
                    }
                },
            ),
            release("kube-prometheus-stack", values={"alertmanager": {"enabled": False}}),
            release("keda"),
        ],
        None,
    ),
    # The stack's outputs
    "stack-no-plain-secret-output": (
        [stack_outputs(cluster_name="inferstack-dev", grafana_admin_password="hunter22")],
        [
            stack_outputs(
                cluster_name="inferstack-dev",
                grafana_admin_password="[secret]",
                gateway_api_key_secret_name="gateway-api-keys",
            )
        ],
        None,
    ),
    # The whole stack
    "stack-storage-provisioner": (
        plan_edit(lambda p: without(p, "aws-ebs-csi-driver")),
        fixed_cloud_plan(),
        None,
    ),
    "stack-load-balancer-controller": (
        plan_edit(lambda p: without(p, "aws-load-balancer-controller")),
        fixed_cloud_plan(),
        None,
    ),
    "stack-load-balancer-annotations": (
        plan_edit(
            lambda p: [
                *without(p, "aws-load-balancer-controller"),
                service("legacy", "LoadBalancer", {"service.beta.kubernetes.io/aws-load-balancer-scheme": "internal"}),
            ]
        ),
        plan_edit(
            lambda p: [
                *p,
                service("legacy", "LoadBalancer", {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}),
            ]
        ),
        None,
    ),
    "stack-node-selectors-match-pools": (
        plan_edit(lambda p: _set(p, "llama", "Deployment", [*POD, "nodeSelector"], {"inferstack.io/pool": "h200"})),
        fixed_cloud_plan(),
        None,
    ),
    "stack-device-plugin-coverage": (
        plan_edit(lambda p: [*without(p, "gpu", "NodePool"), gpu_node_pool({"inferstack.io/pool": "gpu"})]),
        fixed_cloud_plan(),
        None,
    ),
    "stack-object-store-permissions": (
        plan_edit(lambda p: _set(p, "llama-engine-build", "Job", [*POD, "serviceAccountName"], "model-loader")),
        fixed_cloud_plan(),
        None,
    ),
    "k8s-names-valid": ([deployment("Llama_8B")], [deployment("llama-8b")], None),
    "stack-kube-objects-unique": (
        plan_edit(lambda p: [*p, deployment("llama", ns="serving")]),
        plan_edit(lambda p: [*p, deployment("llama", ns="serving-canary")]),
        None,
    ),
    "stack-workload-selectors-disjoint": (
        [deployment("gw-a", labels={"app": "gw"}), deployment("gw-b", labels={"app": "gw"})],
        [deployment("gw-a", labels={"app": "gw-a"}), deployment("gw-b", labels={"app": "gw-b"})],
        None,
    ),
    "stack-service-account-exists": (
        plan_edit(lambda p: without(p, "engine-builder", "ServiceAccount")),
        fixed_cloud_plan(),
        None,
    ),
    "stack-network-policy-enforced": (
        plan_edit(lambda p: _set(p, "vpc-cni", "Addon", ["configurationValues"], "{}")),
        fixed_cloud_plan(),
        None,
    ),
    "stack-s3-bucket-protected": (
        [res("aws:s3/bucket:Bucket", "models", {})],
        [
            res("aws:s3/bucket:Bucket", "models", {}),
            res(
                "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                "models",
                {
                    "bucket": "models-9b0f540",
                    "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}],
                },
            ),
            res("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "models", {"bucket": "models-9b0f540"}),
        ],
        None,
    ),
    "stack-network-policy-guards-cache-and-servers": (
        plan_edit(lambda p: without(p, "llama", "NetworkPolicy")),
        fixed_cloud_plan(),
        None,
    ),
    "stack-gpu-capacity-fits-pool": (
        plan_edit(lambda p: _set(p, "llama", "Deployment", ["spec", "replicas"], 17)),
        fixed_cloud_plan(),
        None,
    ),
    "stack-parallelism-matches-gpus": (
        plan_edit(
            lambda p: _set(p, "llama", "Deployment", [*POD, "containers"], [server(["--tensor-parallel-size", "2"])])
        ),
        plan_edit(
            lambda p: _set(
                p, "llama", "Deployment", [*POD, "containers"], [server(["--tensor-parallel-size", "2"], gpus=2)]
            )
        ),
        None,
    ),
    "stack-fabric-device-requested": (
        plan_edit(
            lambda p: _set(
                p, "llama", "Deployment", [*POD, "containers", "0", "env"], [{"name": "FI_PROVIDER", "value": "efa"}]
            )
        ),
        plan_edit(
            lambda p: _set(
                p,
                "llama",
                "Deployment",
                [*POD, "containers", "0", "resources"],
                {
                    "limits": {"nvidia.com/gpu": 1, "vpc.amazonaws.com/efa": 32},
                    "requests": {"cpu": "8", "memory": "8Gi"},
                },
            )
        ),
        None,
    ),
    "stack-engine-args-supported": (
        plan_edit(
            lambda p: _set(
                p,
                "llama",
                "Deployment",
                [*POD, "containers"],
                [server(["--tensor-parallel-size", "1", "--otlp-traces-endpoint", "http://otel:4317"])],
            )
        ),
        fixed_cloud_plan(),
        None,
    ),
    "stack-host-memory-stages-weights": (
        plan_edit(
            lambda p: _set(
                p,
                "gpu",
                "NodePool",
                ["spec", "template", "spec", "requirements"],
                [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g6e.xlarge"]}],
            )
        ),
        fixed_cloud_plan(),
        None,
    ),
    "stack-autoscaler-max-fits-pool": (
        plan_edit(
            lambda p: [
                *p,
                k8s(
                    "keda.sh/v1alpha1",
                    "ScaledObject",
                    "llama",
                    {"scaleTargetRef": {"name": "llama"}, "maxReplicaCount": 40},
                    ns="serving",
                ),
            ]
        ),
        plan_edit(
            lambda p: [
                *p,
                k8s(
                    "keda.sh/v1alpha1",
                    "ScaledObject",
                    "llama",
                    {"scaleTargetRef": {"name": "llama"}, "maxReplicaCount": 16},
                    ns="serving",
                ),
            ]
        ),
        None,
    ),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_catches_its_violation(rule: str) -> None:
    bad, _, tier = CASES[rule]
    found = violations(bad, rule, tier)
    assert found, f"{rule} missed its violating input"
    assert all(v["message"] for v in found)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_passes_a_conforming_input(rule: str) -> None:
    _, good, tier = CASES[rule]
    assert violations(good, rule, tier) == []


def test_every_rule_has_a_catch_and_a_pass_case() -> None:
    assert set(CASES) == set(RULES_BY_ID)
    assert len(RULES) >= 30


def test_the_readme_has_a_row_for_every_rule_at_its_kind_and_enforcement() -> None:
    # GIVEN the README's table of rules (`| id | kind | enforcement | what it checks |`)
    table = (ROOT / "README.md").read_text().split("| id | kind | enforcement | what it checks |", 1)[1]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| (\w+)[^|]* \| (\w+) \|", table, re.M)
    # THEN each rule of the pack has one row, with its kind and the enforcement it runs at, and nothing else has one
    assert sorted(rows) == sorted((r.id, r.kind, r.effective.value) for r in RULES)


def test_the_fixed_stack_is_clean_under_every_rule() -> None:
    from policies.rules import check_plan

    assert check_plan(fixed_cloud_plan()) == []


def test_pack_is_built_from_crossguard_classes_one_per_rule() -> None:
    # Output rules run in `inferstack plan` only: under CrossGuard a secret output looks like a plain one.
    kinds = {p.name: type(p) for p in POLICIES}
    assert len(kinds) == len([r for r in RULES if r.kind != "outputs"])
    for rule in RULES:
        expected = {"stack": StackValidationPolicy, "resource": ResourceValidationPolicy}.get(rule.kind)
        assert kinds.get(rule.id) is expected, rule.id
    stack_rules = [r for r in RULES if r.kind == "stack"]
    assert len(stack_rules) >= 10


def test_stack_policy_runs_under_crossguard_args() -> None:
    """The pack's StackValidationPolicy works on CrossGuard's own argument types, as under `pulumi preview`."""
    from pulumi_policy import StackValidationArgs
    from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions

    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    plan = without(fixed_cloud_plan(), "aws-load-balancer-controller")
    resources = [PolicyResource(r["type"], r["inputs"], r["urn"], r["name"], opts, None, None, [], {}) for r in plan]
    policy = next(p for p in POLICIES if p.name == "stack-load-balancer-controller")
    reported: list[tuple[str, str | None]] = []
    policy.validate(StackValidationArgs(resources), lambda message, urn=None: reported.append((message, urn)))
    assert len(reported) == 1 and reported[0][1] == edit(plan, "gateway")["urn"]


def test_exceptions_drop_a_named_violation(monkeypatch: pytest.MonkeyPatch) -> None:
    import policies.exceptions as exc

    bad = dep(automountServiceAccountToken=True)
    assert violations(bad, "k8s-automount-token-off")
    monkeypatch.setattr(exc, "EXCEPTIONS", {("k8s-automount-token-off", "ap*"): "talks to the API server"})
    assert violations(bad, "k8s-automount-token-off") == []


def test_pod_security_allowances_are_narrow() -> None:
    # IPC_LOCK is allowed only with an rdma/ device request; the model cache hostPath only at its path.
    ipc = sc(capabilities={"drop": ["ALL"], "add": ["IPC_LOCK"]})
    rdma = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"rdma/rdma_shared_device_a": 1}}
    assert violations(with_container(securityContext=ipc), "pss-drop-all-capabilities")
    assert violations(with_container(securityContext=ipc, resources=rdma), "pss-drop-all-capabilities") == []


def test_a_writable_root_is_allowed_only_to_the_engine_images_it_names() -> None:
    # GIVEN the pinned vLLM image as the "server" container, its root filesystem writable (its caches live there)
    from components.catalog.images import VLLM

    writable = sc(readOnlyRootFilesystem=False)
    engine = [deployment("llama", pod_spec(container("server", VLLM, securityContext=writable)))]
    assert violations(engine, "k8s-read-only-root-filesystem") == []
    # WHEN another image runs under that name, or the engine image under another name THEN it is caught
    other = [
        deployment("llama", pod_spec(container("server", "example.com/app:1.0" + DIGEST, securityContext=writable)))
    ]
    renamed = [deployment("llama", pod_spec(container("sidecar", VLLM, securityContext=writable)))]
    (found,) = violations(other, "k8s-read-only-root-filesystem")
    assert "container server may write to its root filesystem" in found["message"]
    assert violations(renamed, "k8s-read-only-root-filesystem")


def test_rules_skip_values_unknown_during_preview() -> None:
    from policies.model import UNKNOWN

    plan = fixed_cloud_plan()
    edit(plan, "engine-builder", "PodIdentityAssociation")["inputs"]["roleArn"] = UNKNOWN
    found = violations(plan, "stack-object-store-permissions")
    # Unknown role ARN: the rule cannot resolve the role and says so, naming the service account.
    assert all("engine-builder" in v["message"] for v in found)


def test_tier_guarantees_serve_the_edge() -> None:
    """k3s ships local-path storage, ServiceLB and network policy enforcement: no chart needed."""
    plan = [
        k8s(
            "apps/v1",
            "StatefulSet",
            "cache",
            {"template": {"spec": pod_spec()}, "volumeClaimTemplates": [{"metadata": {"name": "d"}, "spec": {}}]},
        ),
        service("gateway", "LoadBalancer", {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}),
        k8s("networking.k8s.io/v1", "NetworkPolicy", "np", {"podSelector": {}}),
    ]
    for rule in ("stack-storage-provisioner", "stack-network-policy-enforced"):
        assert violations(plan, rule, "edge") == [], rule
        # EKS guarantees neither a default class nor enforcement: the stack must install them.
        assert violations(plan, rule, "cloud"), rule
    assert violations(copy.deepcopy(plan), "stack-load-balancer-controller", "edge") == []


def test_resource_policy_runs_under_crossguard_args() -> None:
    """A resource rule through CrossGuard's own ResourceValidationArgs, as under `pulumi preview`."""
    from pulumi_policy import ResourceValidationArgs
    from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions

    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    (bad,) = with_container(image="redis:latest")
    args = ResourceValidationArgs(bad["type"], bad["inputs"], bad["urn"], bad["name"], opts, None)
    policy = next(p for p in POLICIES if p.name == "k8s-no-latest-tag")
    reported: list[str] = []
    policy.validate(args, lambda message, urn=None: reported.append(message))
    assert reported and "redis:latest" in reported[0]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        out += _paths(value, (*prefix, key))
    return out


def test_no_rule_crashes_on_any_value_unknown_during_preview() -> None:
    """Every input of the fixed plan, in turn, replaced by Pulumi's unknown sentinel: no rule raises."""
    from policies.model import UNKNOWN
    from policies.rules import check_plan

    base = fixed_cloud_plan()
    for index, resource in enumerate(base):
        for path in _paths(resource["inputs"]):
            plan = copy.deepcopy(base)
            node = plan[index]["inputs"]
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = UNKNOWN
            check_plan(plan)


def test_stack_policies_see_through_crossguards_unknown_checking_proxies() -> None:
    """Under `pulumi preview` props arrive wrapped; an unknown ARN must not stop a whole-stack rule."""
    from pulumi_policy import StackValidationArgs
    from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions
    from pulumi_policy.proxy import unknown_checking_proxy

    from policies.model import UNKNOWN

    plan = without(fixed_cloud_plan(), "aws-load-balancer-controller")
    edit(plan, "engine-builder", "PodIdentityAssociation")["inputs"]["roleArn"] = UNKNOWN
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    resources = [
        PolicyResource(r["type"], unknown_checking_proxy(r["inputs"]), r["urn"], r["name"], opts, None, None, [], {})
        for r in plan
    ]
    # The engine passes each input's dependencies: the unknown roleArn comes from the engine-builder role.
    by_name = {(r.resource_type.rsplit(":", 1)[-1], r.name): r for r in resources}
    by_name["PodIdentityAssociation", "engine-builder"].property_dependencies = {
        "roleArn": [by_name["Role", "engine-builder"]]
    }
    reported: dict[str, list[str]] = {}
    for policy in POLICIES:
        if isinstance(policy, StackValidationPolicy):
            policy.validate(
                StackValidationArgs(resources), lambda m, urn=None, n=policy.name: reported.setdefault(n, []).append(m)
            )
    assert list(reported) == ["stack-load-balancer-controller"]


def test_a_gpu_pod_that_may_land_on_a_pool_without_the_plugin_is_caught() -> None:
    """With a node autoscaler, any matching pool may be chosen: each must run the device plugin."""
    plan = fixed_cloud_plan()
    second = gpu_node_pool({"inferstack.io/pool": "gpu"})
    second["name"] = "gpu-spot"
    second["inputs"]["metadata"]["name"] = "gpu-spot"
    (found,) = violations([*plan, second], "stack-device-plugin-coverage")
    assert "Karpenter NodePool gpu-spot" in found["message"] and "NodePool gpu " not in found["message"]


def test_a_default_admin_password_is_reported_once_and_a_generic_one_too() -> None:
    literal = release("kube-prometheus-stack", values={"grafana": {"adminPassword": "prom-operator"}})
    assert len(violations([literal], "helm-no-default-admin-credentials")) == 1
    other = release("minio", values={"auth": {"rootPassword": "admin"}})
    assert len(violations([other], "helm-no-default-admin-credentials")) == 1


def test_the_load_balancer_controller_reads_its_own_and_the_generic_annotations() -> None:
    plan = fixed_cloud_plan()
    annotations = {**INTERNAL_LB, "service.beta.kubernetes.io/load-balancer-source-ranges": "10.0.0.0/8"}
    plan.append(service("api", "LoadBalancer", annotations))
    assert violations(plan, "stack-load-balancer-annotations") == []
    plan.append(service("odd", "LoadBalancer", {**INTERNAL_LB, "metallb.universe.tf/address-pool": "x"}))
    (found,) = violations(plan, "stack-load-balancer-annotations")
    assert "Service apps/odd" in found["message"] and "AWS Load Balancer Controller" in found["message"]


def test_an_onprem_storage_class_counts_only_when_the_stack_config_declares_it(plan_of: object) -> None:
    # GIVEN the on-prem plan, whose claims name the config's persistentStorageClass
    import copy

    from policies.rules import check_plan

    plan = plan_of("onprem")  # type: ignore[operator]
    env = plan.environment.model_copy(update={"persistent_storage_class": "ceph-rbd"})
    resources = copy.deepcopy(plan.to_json()["resources"])
    for r in resources:
        if r["type"].endswith("StatefulSet"):
            r["inputs"]["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "ceph-rbd"
    # WHEN the config declares it THEN the claim is served; WHEN nothing declares it THEN it is a violation
    declared = [v for v in check_plan(resources, "onprem", env) if v["policy"] == "stack-storage-provisioner"]
    for r in resources:  # nor the namespaces' copy of the declaration, which `pulumi preview` reads
        if r["type"] == "kubernetes:core/v1:Namespace":
            r["inputs"]["metadata"].pop("annotations", None)
    undeclared = [v for v in check_plan(resources, "onprem") if v["policy"] == "stack-storage-provisioner"]
    assert declared == []
    assert any("ceph-rbd" in v["message"] for v in undeclared)


def test_a_kms_key_the_preview_cannot_know_yet_counts_as_set() -> None:
    """On a stack's first `pulumi preview` the KMS key is not created yet: its ARN is unknown, not missing."""
    from pulumi_policy import ResourceValidationArgs
    from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions
    from pulumi_policy.proxy import unknown_checking_proxy

    from policies.model import UNKNOWN
    from policies.rules import check

    def cluster(provider: dict[str, Any]) -> dict[str, Any]:
        return {"encryptionConfig": {"resources": ["secrets"], "provider": provider}}

    def crossguard(props: dict[str, Any]) -> list[str]:
        opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
        args = ResourceValidationArgs(
            "aws:eks/cluster:Cluster", unknown_checking_proxy(props), "urn:x", "eks", opts, None
        )
        reported: list[str] = []
        next(p for p in POLICIES if p.name == "eks-secrets-kms").validate(args, lambda m, urn=None: reported.append(m))
        return reported

    assert crossguard(cluster({"keyArn": UNKNOWN})) == []

    def rule(props: dict[str, Any]) -> list[str]:
        return [v["message"] for v in check("aws:eks/cluster:Cluster", props) if v["policy"] == "eks-secrets-kms"]

    assert rule(cluster({"keyArn": UNKNOWN})) == []
    # a key that is really absent is still caught, on both paths
    assert crossguard(cluster({})) and rule(cluster({}))


def test_a_chart_volume_template_inside_a_list_of_values_is_a_claim_too() -> None:
    """A chart's claim template can sit in a list (a volume under ``extraVolumes``), not only under a map's key."""
    from policies.rules import check_plan

    # GIVEN the fixed cloud plan plus a chart whose values carry an ephemeral volume asking for a class nobody makes
    volume = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "nope"}}}}
    plan = [*fixed_cloud_plan(), release("scratchy", values={"server": {"extraVolumes": [volume]}})]
    # WHEN the stack rules run
    found = [v["message"] for v in check_plan(plan, "cloud") if v["policy"] == "stack-storage-provisioner"]
    # THEN the claim is found in the list, by its path, and refused
    assert any("values server.extraVolumes[0].ephemeral.volumeClaimTemplate" in m and "nope" in m for m in found)
