"""What a real `pulumi up` needs beyond valid objects: the pieces must fit together (issue 12).

Each test names the point of the issue it guards; each fails on the code before that fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.aws.load_balancer_controller import POLICY_FILE
from components.kube.labels import EFA_LABEL, GPU_NODE_SELECTOR_KEY, POOL_LABEL
from helpers import bundled_stacks, cloud_stacks, plan_with
from inferstack_cli import render
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def policy_of(plan: Plan, role: str) -> dict[str, Any]:
    (policy,) = [r for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == role]
    return json.loads(policy.inputs["policy"])


def actions(statement: dict[str, Any]) -> list[str]:
    value = statement["Action"]
    return [value] if isinstance(value, str) else list(value)


def helm_values(plan: Plan, release: str) -> dict[str, Any]:
    (found,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == release]
    return dict(found.inputs["values"])


# --- 1: the engine build can upload its engine, and only it can ---------------------------------------------


def test_engine_build_job_runs_as_its_own_account_that_may_write_engines_only(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    (job,) = [m for m in manifests(plan) if m["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "engine-builder"
    association = next(
        r
        for r in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if r.inputs["serviceAccount"] == "engine-builder"
    )
    assert association.inputs["namespace"] == "inferstack-serving"
    builder = policy_of(plan, "engine-builder")["Statement"]
    writes = [s for s in builder if "s3:PutObject" in actions(s)]
    assert len(writes) == 1 and all(r.endswith("/*/trtllm/*") for r in writes[0]["Resource"])
    assert any("kms:GenerateDataKey" in actions(s) for s in builder)
    # The serving pods' loader stays read-only.
    loader = policy_of(plan, "model-loader")["Statement"]
    assert not any(a in actions(s) for s in loader for a in ("s3:PutObject", "kms:GenerateDataKey"))


# --- 2: a provisioner behind every claim ---------------------------------------------------------------------


def _claims(plan: Plan) -> list[dict[str, Any]]:
    claims = []
    for m in manifests(plan):
        if m["kind"] == "StatefulSet":
            claims += [c.get("spec", {}) for c in m["spec"].get("volumeClaimTemplates", [])]
        if m["kind"] == "PersistentVolumeClaim":
            claims.append(m["spec"])
    prometheus = helm_values(plan, "kube-prometheus-stack")["prometheus"]["prometheusSpec"]
    claims.append(prometheus["storageSpec"]["volumeClaimTemplate"]["spec"])
    return claims


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_claim_has_a_provisioner(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    classes = {m["metadata"]["name"]: m for m in manifests(plan) if m["kind"] == "StorageClass"}
    default = [
        c
        for c in classes.values()
        if c["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    ]
    assert len(default) == 1
    (gp3,) = default
    assert gp3["provisioner"] == "ebs.csi.aws.com"
    assert gp3["parameters"]["type"] == "gp3" and gp3["parameters"]["encrypted"] == "true"
    assert gp3["volumeBindingMode"] == "WaitForFirstConsumer"
    claims = _claims(plan)
    assert claims
    for claim in claims:
        assert claim.get("storageClassName", gp3["metadata"]["name"]) in classes
    # The provisioner itself: the EBS CSI add-on, with its Pod Identity role and AWS's managed policy.
    (driver,) = [r for r in plan.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "aws-ebs-csi-driver"]
    (association,) = driver.inputs["podIdentityAssociations"]
    assert association["serviceAccount"] == "ebs-csi-controller-sa"
    attachments = [r.inputs["policyArn"] for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")]
    assert "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy" in attachments


# --- 3: a controller behind every LoadBalancer annotation ----------------------------------------------------


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_load_balancer_annotation_has_its_controller(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    annotated = [
        m
        for m in manifests(plan)
        if m["kind"] == "Service"
        and any(
            k.startswith("service.beta.kubernetes.io/aws-load-balancer") for k in m["metadata"].get("annotations") or {}
        )
    ]
    releases = {r.inputs["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    assert ("aws-load-balancer-controller" in releases) == bool(annotated)
    for service in annotated:
        # TLS on the load balancer: only 443, with a certificate.
        assert [p["port"] for p in service["spec"]["ports"]] == [443]
        assert service["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-ssl-cert"]
    if annotated:
        values = helm_values(plan, "aws-load-balancer-controller")
        # IMDS is closed to pods (hop limit 1): the controller is told its VPC and region.
        assert values["vpcId"] and values["region"] == plan.environment.region
        upstream = json.loads(POLICY_FILE.read_text())
        assert policy_of(plan, "aws-load-balancer-controller-controller") == upstream


def test_prod_has_a_load_balancer_and_its_controller(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    assert any(m["kind"] == "Service" and m["spec"].get("type") == "LoadBalancer" for m in manifests(plan))
    assert "aws-load-balancer-controller" in {r.inputs["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")}


# --- 4: the deployer reaches the private endpoint ------------------------------------------------------------


@pytest.mark.parametrize("stack", cloud_stacks())
def test_deployer_network_is_admitted_on_443(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    rules = plan.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    cidrs = [str(c) for c in plan.environment.cluster.deployer_cidrs]
    assert cidrs and sorted(r.inputs["cidrIpv4"] for r in rules) == sorted(cidrs)
    assert all((r.inputs["fromPort"], r.inputs["toPort"], r.inputs["ipProtocol"]) == (443, 443, "tcp") for r in rules)
    cluster = plan.of_type("aws:eks/cluster:Cluster")[0]
    assert cluster.inputs["vpcConfig"]["endpointPublicAccess"] is False


def test_deployer_security_group_and_admin_roles(tmp_path: Path) -> None:
    role = "arn:aws:iam::111122223333:role/platform-admins"

    def edit(env: dict[str, Any]) -> None:
        env["cluster"].update(deployerSecurityGroupIds=["sg-0123456789abcdef0"], adminRoleArns=[role])

    plan = plan_with(tmp_path, "prod", edit)
    rules = plan.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert [r.inputs.get("referencedSecurityGroupId") for r in rules if "referencedSecurityGroupId" in r.inputs] == [
        "sg-0123456789abcdef0"
    ]
    entries = [r.inputs["principalArn"] for r in plan.of_type("aws:eks/accessEntry:AccessEntry")]
    assert role in entries
    (association,) = plan.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert association.inputs["policyArn"].endswith("AmazonEKSClusterAdminPolicy")


# --- 5: pinned AMI release -------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_node_runs_the_pinned_ami_release(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    release = plan.environment.cluster.ami_release_version
    assert release == "1.33.5-20251120"
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        assert group.inputs["releaseVersion"] == release
    for node_class in plan.of_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"):
        assert node_class.inputs["spec"]["amiSelectorTerms"] == [{"alias": "al2023@v20251120"}]


def test_capacity_block_nodes_are_drained_before_the_block_ends(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    pools = {
        r.inputs["metadata"]["name"]: r.inputs["spec"] for r in plan.of_type("kubernetes:karpenter.sh/v1:NodePool")
    }
    # Karpenter >= 1.6 drains block nodes 10 min before EC2 reclaims them; a PDB may hold a drain at most 9 min.
    assert pools["h200"]["template"]["spec"]["terminationGracePeriod"] == "9m"
    assert pools["h200"]["limits"]["nvidia.com/gpu"] == 16
    assert helm_values(plan, "karpenter")["settings"]["featureGates"]["reservedCapacity"] is True


# --- 8: one source of truth for GPU node labels ------------------------------------------------------------------


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_gpu_node_carries_the_labels_its_daemons_and_pods_select(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    node_labels: dict[str, dict[str, str]] = {}
    for pool in plan.of_type("kubernetes:karpenter.sh/v1:NodePool"):
        labels = pool.inputs["spec"]["template"]["metadata"]["labels"]
        node_labels[labels[POOL_LABEL]] = labels
    for group in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        if "taints" in group.inputs:
            node_labels[group.inputs["labels"][POOL_LABEL]] = group.inputs["labels"]
    assert set(node_labels) == {p.name for p in plan.environment.gpu_pools}
    for name in ("nvidia-device-plugin", "dcgm-exporter"):
        terms = helm_values(plan, name)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        (expression,) = terms["nodeSelectorTerms"][0]["matchExpressions"]
        assert expression == {"key": GPU_NODE_SELECTOR_KEY, "operator": "Exists"}
        assert all(GPU_NODE_SELECTOR_KEY in labels for labels in node_labels.values()), name
    efa_pools = {p.name for p in plan.environment.gpu_pools if p.efa_enabled}
    if efa_pools:
        selector = helm_values(plan, "aws-efa-k8s-device-plugin")["nodeSelector"]
        assert selector == {EFA_LABEL: "true"}
        assert {n for n, labels in node_labels.items() if labels.get(EFA_LABEL) == "true"} == efa_pools
    for m in manifests(plan):
        if m["kind"] == "Deployment" and m["metadata"]["namespace"] == "inferstack-serving":
            selector = m["spec"]["template"]["spec"]["nodeSelector"]
            assert any(selector.items() <= labels.items() for labels in node_labels.values())


# --- 9: NetworkPolicies enforced, add-ons pinned -------------------------------------------------------------


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_addon_is_pinned_and_the_cni_enforces_network_policies(plan_of: PlanOf, stack: str) -> None:
    addons = {r.inputs["addonName"]: r.inputs for r in plan_of(stack).of_type("aws:eks/addon:Addon")}
    assert {"vpc-cni", "kube-proxy", "eks-pod-identity-agent", "coredns", "aws-ebs-csi-driver"} <= set(addons)
    for name, inputs in addons.items():
        assert inputs.get("addonVersion", "").startswith("v") and "-eksbuild." in inputs["addonVersion"], name
    assert json.loads(addons["vpc-cni"]["configurationValues"])["enableNetworkPolicy"] == "true"


# --- 10: the 70B model meets its SLO, survives a drain, uses the reservation ---------------------------------


def test_prod_runs_every_model_at_least_twice_behind_min_available(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    objects = manifests(plan)
    for model in plan.environment.models:
        assert model.replicas >= 2, model.name
        (pdb,) = [m for m in objects if m["kind"] == "PodDisruptionBudget" and m["metadata"]["name"] == model.name]
        assert "minAvailable" in pdb["spec"] and "maxUnavailable" not in pdb["spec"]


def test_prod_serves_on_all_the_capacity_it_reserves(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    reserved = [pool for pool in plan.environment.gpu_pools if pool.capacity.reserved]
    # GIVEN prod's one reserved pool (its H200 capacity block): the check below runs on it, not on no pool at all
    assert [pool.name for pool in reserved] == ["h200"]
    for pool in reserved:
        gpus = 0
        for m in manifests(plan):
            if m["kind"] == "Deployment" and m["spec"]["template"]["spec"]["nodeSelector"].get(POOL_LABEL) == pool.name:
                per_pod = m["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                gpus += per_pod * m["spec"]["replicas"]
        assert gpus == pool.max_size * pool.spec.gpu_count, pool.name


@pytest.mark.parametrize("stack", cloud_stacks())
def test_pods_on_efa_pools_request_efa(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    efa_pools = {p.name for p in plan.environment.gpu_pools if p.efa_enabled}
    for m in manifests(plan):
        if m["kind"] != "Deployment" or m["metadata"]["namespace"] != "inferstack-serving":
            continue
        spec = m["spec"]["template"]["spec"]
        limits = spec["containers"][0]["resources"]["limits"]
        on_efa = spec["nodeSelector"][POOL_LABEL] in efa_pools
        assert ("vpc.amazonaws.com/efa" in limits) == on_efa, m["metadata"]["name"]
        if on_efa:
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            assert env["FI_PROVIDER"] == "efa"


def test_prod_70b_is_sized_for_a_full_batch(plan_of: PlanOf) -> None:
    # 70B FP8 on H200 at TP1 reads 70 GB of weights (14.6 ms) plus 86 GB of KV cache at 64 x 8,192 tokens:
    # far over 20 ms. TP2 halves both.
    servers = {m.name: m for m in plan_of("prod").environment.models}
    assert servers["llama-70b"].tensor_parallel is None  # derived
    objects = manifests(plan_of("prod"))
    (deployment,) = [m for m in objects if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-70b"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2


# --- 11: the smaller ones -----------------------------------------------------------------------------------------


def test_engine_build_requests_cpu_and_memory_for_quantization(plan_of: PlanOf) -> None:
    (job,) = [m for m in manifests(plan_of("prod")) if m["kind"] == "Job"]
    (builder,) = [c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "trtllm-build"]
    requests = builder["resources"]["requests"]
    assert int(requests["cpu"]) >= 8
    assert int(requests["memory"].removesuffix("Gi")) >= 140  # the BF16 70B checkpoint is loaded on the host


def test_triton_liveness_is_not_its_readiness(plan_of: PlanOf) -> None:
    (deployment,) = [
        m for m in manifests(plan_of("prod")) if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-70b"
    ]
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert server["livenessProbe"]["httpGet"] != server["readinessProbe"]["httpGet"]
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"


@pytest.mark.parametrize("stack", cloud_stacks())
def test_serving_pods_do_not_mount_the_api_token(plan_of: PlanOf, stack: str) -> None:
    serving = [m for m in manifests(plan_of(stack)) if m["metadata"].get("namespace") == "inferstack-serving"]
    pods = [m for m in serving if m["kind"] in ("Deployment", "Job")]
    accounts = [m for m in serving if m["kind"] == "ServiceAccount"]
    # GIVEN the stack's model servers and their service accounts (the model loader, the engine builder)
    assert pods and sorted(a["metadata"]["name"] for a in accounts) == ["engine-builder", "model-loader"]
    for m in pods:
        assert m["spec"]["template"]["spec"]["automountServiceAccountToken"] is False, m["metadata"]["name"]
    for m in accounts:
        assert m["automountServiceAccountToken"] is False, m["metadata"]["name"]


def test_karpenter_controller_policy_follows_upstream_scoping(plan_of: PlanOf) -> None:
    statements = policy_of(plan_of("dev"), "karpenter-controller")["Statement"]
    assert any("iam:ListInstanceProfiles" in actions(s) for s in statements)
    for action in ("ec2:RunInstances", "ec2:CreateTags", "iam:CreateInstanceProfile"):
        unscoped = [s for s in statements if action in actions(s) and s["Resource"] == "*" and "Condition" not in s]
        assert unscoped == [], action
    creates = [s for s in statements if "iam:CreateInstanceProfile" in actions(s)]
    assert all("aws:RequestTag/kubernetes.io/cluster/inferstack-dev" in s["Condition"]["StringEquals"] for s in creates)


# Every tier: on-prem and edge generated the password too, but exported nothing to log in with.
@pytest.mark.parametrize("stack", bundled_stacks())
def test_grafana_uses_a_generated_admin_password_and_reads_only_its_namespace(plan_of: PlanOf, stack: str) -> None:
    plan = plan_of(stack)
    grafana = helm_values(plan, "kube-prometheus-stack")["grafana"]
    secret_name = grafana["admin"]["existingSecret"]
    (secret,) = [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.inputs["metadata"]["name"] == secret_name]
    assert secret.inputs["metadata"]["namespace"] == "monitoring"
    assert plan.of_type("random:index/randomPassword:RandomPassword")
    assert grafana["sidecar"]["dashboards"]["searchNamespace"] == "monitoring"
    assert plan.outputs["grafana_admin_password"] == "[secret]"


def test_gateway_and_exporter_authenticate_as_separate_cache_users(plan_of: PlanOf) -> None:
    # issue 12, point 11: one shared auth token let a metrics scraper write the cache.
    plan = plan_of("prod")
    users = {r.inputs["userName"]: r for r in plan.of_type("aws:elasticache/user:User")}
    assert set(users) == {"default", "gateway", "exporter"}
    assert users["default"].inputs["accessString"].startswith("off")
    assert (
        "-@all" in users["exporter"].inputs["accessString"]
        and "+@write" not in users["exporter"].inputs["accessString"]
    )
    (group,) = plan.of_type("aws:elasticache/userGroup:UserGroup")
    assert group.inputs["engine"] == "valkey" and len(group.inputs["userIds"]) == 3
    passwords = plan.of_type("random:index/randomPassword:RandomPassword")
    assert len({r.name for r in passwords if r.name.startswith("cache-")}) == 3
    secrets = {
        r.inputs["metadata"]["namespace"]: r.inputs["metadata"]["name"]
        for r in plan.of_type("kubernetes:core/v1:Secret")
        if r.name.startswith("cache-auth-")
    }
    assert secrets == {"inferstack-gateway": "cache-auth", "monitoring": "cache-exporter-auth"}
    exporter = helm_values(plan, "prometheus-redis-exporter")["auth"]
    assert exporter["secret"]["name"] == "cache-exporter-auth" and exporter["redisUser"] == "exporter"
    (gateway,) = [m for m in manifests(plan) if m["kind"] == "Deployment" and m["metadata"]["name"] == "gateway"]
    env = {e["name"]: e for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GATEWAY_REDIS_URL"]["value"].startswith("rediss://gateway:$(REDIS_PASSWORD)@")
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "cache-auth"


def test_removing_an_admin_role_or_deployer_network_leaves_the_others_in_place(tmp_path: Path) -> None:
    # GIVEN prod with two admin roles, two deployer networks and two deployer groups
    roles = ["arn:aws:iam::111122223333:role/platform-admins", "arn:aws:iam::111122223333:role/ops/sre"]
    cidrs, groups = ["10.20.0.0/16", "10.30.0.0/16"], ["sg-0123456789abcdef0", "sg-0fedcba9876543210"]

    def listing(keep: slice) -> Callable[[dict[str, Any]], None]:
        def edit(env: dict[str, Any]) -> None:
            env["cluster"].update(
                adminRoleArns=roles[keep], deployerCidrs=cidrs[keep], deployerSecurityGroupIds=groups[keep]
            )

        return edit

    def admitted(plan: Plan) -> dict[str, Any]:
        kinds = (
            "aws:eks/accessEntry:AccessEntry",
            "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        )
        return {r.urn: r.inputs for kind in kinds for r in plan.of_type(kind) if r.name.startswith("inferstack-")}

    (tmp_path / "before").mkdir(), (tmp_path / "after").mkdir()
    before = admitted(plan_with(tmp_path / "before", "prod", listing(slice(None))))
    # WHEN the operator removes the first of each and runs `pulumi up` again
    after = admitted(plan_with(tmp_path / "after", "prod", listing(slice(1, None))))
    # THEN what stays keeps its logical name and inputs: pulumi up deletes the removed ones and touches nothing else.
    # Keyed by index, the second role's entry became the first's, whose principal_arn forces a replacement that EKS
    # refused (one access entry per principal, and the second's still existed): the update failed.
    assert len(after) == 4 and len(before) == 8
    assert all(before.get(urn) == inputs for urn, inputs in after.items())


def test_access_entries_and_deployer_rules_carry_their_index_names_over(tmp_path: Path) -> None:
    # GIVEN a prod stack deployed before entries were named after their value (inferstack-prod-admin-0, -deployer-0)
    role = "arn:aws:iam::111122223333:role/platform-admins"

    def edit(env: dict[str, Any]) -> None:
        env["cluster"].update(adminRoleArns=[role], deployerSecurityGroupIds=["sg-0123456789abcdef0"])

    plan = plan_with(tmp_path, "prod", edit)
    (cluster,) = plan.of_type("aws:eks/cluster:Cluster")
    stack = cluster.name
    # WHEN planned THEN each resource names its old index name as an alias, so `pulumi up` keeps the existing one
    aliases = {
        r.name: r.aliases
        for kind in ("aws:eks/accessEntry:AccessEntry", "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
        for r in plan.of_type(kind)
        if r.name.startswith(stack)
    }
    assert aliases == {
        f"{stack}-admin-111122223333-platform-admins": (f"{stack}-admin-0",),
        f"{stack}-deployer-10.0.0.0-16": (f"{stack}-deployer-0",),
        f"{stack}-deployer-sg-0123456789abcdef0": (f"{stack}-deployer-sg-0",),
    }
