"""Autoscaling and observability as planned for the bundled stacks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components.catalog.charts import CHARTS
from crdcheck import validate as validate_cr
from helpers import bundled_stacks, config_errors, plan_with
from inferstack_cli import render
from inferstack_cli.main import main
from inferstack_cli.mocks import _digest
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
QUEUE_METRIC = {"vllm": "vllm:num_requests_waiting", "triton": 'nv_trt_llm_request_metrics{request_type="waiting"'}


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def test_every_scaled_object_reads_its_engines_queue_metric_at_the_profiles_threshold(plan_of: PlanOf) -> None:
    # GIVEN the bundled stacks' autoscaled models: all ultra-low-latency (1 waiting request per replica, the profile's
    # KEDA target in facts.md), none with autoscaling.queueDepth
    scaled: dict[tuple[str, str], str] = {}
    for stack in bundled_stacks():
        plan = plan_of(stack)
        scalers = {m["metadata"]["name"]: m for m in manifests(plan) if m["kind"] == "ScaledObject"}
        for model in (m for m in plan.environment.models if m.autoscaling.enabled):
            (trigger,) = scalers[model.name]["spec"]["triggers"]
            assert trigger["type"] == "prometheus"
            assert QUEUE_METRIC[model.engine] in trigger["metadata"]["query"]
            assert trigger["metadata"]["serverAddress"].startswith("http://kube-prometheus-stack-prometheus.monitoring")
            scaled[stack, model.name] = trigger["metadata"]["threshold"]
    assert scaled == {
        ("dev", "llama-3b"): "1",
        ("onprem", "llama-70b"): "1",
        ("onprem", "llama-8b"): "1",
        ("prod", "llama-70b"): "1",
        ("prod", "llama-8b"): "1",
    }


def test_autoscaling_queue_depth_replaces_the_profiles_threshold(tmp_path: Path) -> None:
    # GIVEN prod's 70B model with autoscaling.queueDepth 8 (its profile's target is 1)
    def deeper(env: dict[str, Any]) -> None:
        env["models"][1]["autoscaling"] = {**env["models"][1]["autoscaling"], "queueDepth": 8}

    plan = plan_with(tmp_path, "prod", deeper)
    thresholds = {
        m["metadata"]["name"]: m["spec"]["triggers"][0]["metadata"]["threshold"]
        for m in manifests(plan)
        if m["kind"] == "ScaledObject"
    }
    # WHEN planned THEN its scaler waits for 8 requests per replica, and the 8B model keeps its profile's 1
    assert thresholds == {"llama-70b": "8", "llama-8b": "1"}


def test_every_gpu_workload_has_a_scaled_object_or_a_deliberate_fixed_size(plan_of: PlanOf) -> None:
    for stack in bundled_stacks():
        plan = plan_of(stack)
        objects = manifests(plan)
        scaled = {m["spec"]["scaleTargetRef"]["name"] for m in objects if m["kind"] == "ScaledObject"}
        fixed = {m.name for m in plan.environment.models if not m.autoscaling.enabled}
        gpu_workloads = {
            m["metadata"]["name"]
            for m in objects
            if m["kind"] in ("Deployment", "LeaderWorkerSet")
            and "nvidia.com/gpu" in str(m["spec"].get("template") or m["spec"].get("leaderWorkerTemplate"))
        }
        assert gpu_workloads, stack
        assert gpu_workloads <= scaled | fixed


def test_interactive_models_keep_warm_capacity(plan_of: PlanOf) -> None:
    scalers = {m["metadata"]["name"]: m for m in manifests(plan_of("prod")) if m["kind"] == "ScaledObject"}
    # GIVEN prod's two interactive (ultra-low-latency) models, each scaled by KEDA
    assert sorted(scalers) == ["llama-70b", "llama-8b"]
    for m in scalers.values():
        assert m["spec"]["minReplicaCount"] >= 1
        behavior = m["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 60


def test_fixed_size_model_gets_no_scaled_object(plan_of: PlanOf, tmp_path: Path) -> None:
    plan = plan_with(tmp_path, "prod", lambda env: env["models"][0].update(autoscaling={"enabled": False}))
    names = {m["metadata"]["name"] for m in manifests(plan) if m["kind"] == "ScaledObject"}
    assert names == {"llama-70b"}


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_custom_resource_validates_against_its_pinned_crd(plan_of: PlanOf, stack: str) -> None:
    custom = [
        m
        for m in manifests(plan_of(stack))
        if "." in m["apiVersion"].split("/")[0]
        and not m["apiVersion"].startswith(
            (
                "apps/",
                "batch/",
                "policy/",
                "networking.k8s.io/",
                "scheduling.k8s.io/",
                "autoscaling/",
                "storage.k8s.io/",
            )
        )
    ]
    kinds = {m["kind"] for m in custom}
    # An edge site's replicas are fixed (no KEDA), so it renders no ScaledObject.
    scaled = set() if plan_of(stack).tier == "edge" else {"ScaledObject"}
    assert scaled | {"PodMonitor", "ServiceMonitor", "PrometheusRule"} <= kinds
    for manifest in custom:
        assert validate_cr(manifest, strict=True) == [], manifest["kind"]


def test_dev_gpu_pool_is_karpenter_with_the_managed_pool_guarantees(plan_of: PlanOf) -> None:
    objects = manifests(plan_of("dev"))
    node_class = next(m for m in objects if m["kind"] == "EC2NodeClass")
    node_pool = next(m for m in objects if m["kind"] == "NodePool")
    assert validate_cr(node_class) == [] and validate_cr(node_pool) == []
    assert node_class["spec"]["instanceStorePolicy"] == "RAID0"
    # The AMI is the pinned release of cluster.amiReleaseVersion (1.33.5-20251120), never @latest.
    assert node_class["spec"]["amiSelectorTerms"] == [{"alias": "al2023@v20251120"}]
    assert node_class["spec"]["metadataOptions"]["httpTokens"] == "required"
    template = node_pool["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in template["taints"]
    assert node_pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert node_pool["spec"]["limits"]["nvidia.com/gpu"] == 2  # maxSize 2 x 1 GPU


def test_karpenter_controller_has_interruption_queue_rules_and_pod_identity(plan_of: PlanOf) -> None:
    plan = plan_of("dev")
    rules = [r.inputs["eventPattern"] for r in plan.of_type("aws:cloudwatch/eventRule:EventRule")]
    assert any("Spot Instance Interruption" in rule for rule in rules) and len(rules) == 5
    assert len(plan.of_type("aws:cloudwatch/eventTarget:EventTarget")) == 5
    assert any(
        r.inputs["serviceAccount"] == "karpenter"
        for r in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    )
    entry = next(r for r in plan.of_type("aws:eks/accessEntry:AccessEntry"))
    assert entry.inputs["type"] == "EC2_LINUX"
    helm = next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "karpenter")
    assert helm.inputs["values"]["settings"]["featureGates"]["reservedCapacity"] is True


def test_karpenter_hears_every_interruption_upstream_routes_to_its_queue(plan_of: PlanOf) -> None:
    # GIVEN the prod stack (Karpenter 1.14.1, pools on reservations) WHEN it is planned
    plan = plan_of("prod")
    patterns = [json.loads(r.inputs["eventPattern"]) for r in plan.of_type("aws:cloudwatch/eventRule:EventRule")]
    heard = {(p["source"][0], t) for p in patterns for t in p["detail-type"]}
    # THEN every rule of upstream's v1.14.1 CloudFormation feeds the queue, the capacity-reservation warning (an
    # interruptible ODCR reclaimed by its owner) included
    assert heard == {
        ("aws.health", "AWS Health Event"),
        ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
        ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
        ("aws.ec2", "EC2 Instance State-change Notification"),
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
    }


def test_karpenter_efa_nodes_carry_a_self_referencing_security_group(plan_of: PlanOf) -> None:
    # GIVEN the prod stack, whose EFA pools are Karpenter pools
    plan = plan_of("prod")
    groups = {g.name: g.inputs for g in plan.of_type(SECURITY_GROUP)}
    node_classes = {m["metadata"]["name"]: m for m in manifests(plan) if m["kind"] == "EC2NodeClass"}
    efa_pools = [p.name for p in plan.environment.gpu_pools if p.efa_enabled]
    assert efa_pools
    for pool in efa_pools:
        # WHEN its EC2NodeClass is planned
        terms = node_classes[pool]["spec"]["securityGroupSelectorTerms"]
        # THEN it selects the pool's EFA group, which admits all traffic from and to itself: the EKS cluster group's
        # egress to 0.0.0.0/0 does not cover EFA traffic (EC2 user guide, "Prepare an EFA-enabled security group")
        name = f"karpenter-{pool}-efa"
        assert {"id": f"sg-{_digest(f'{SECURITY_GROUP}::{name}')}"} in terms
        every = {"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}
        assert every in groups[name]["ingress"] and every in groups[name]["egress"]


def test_prod_gpu_pools_have_a_node_autoscaler_and_system_nodes_stay_managed(plan_of: PlanOf) -> None:
    # GIVEN the bundled prod stack WHEN it is planned
    plan = plan_of("prod")
    # THEN every GPU pool that can grow is a Karpenter NodePool (issue 12, point 5) ...
    growable = {p.name for p in plan.environment.gpu_pools if p.max_size > p.min_size}
    pools = {r.inputs["metadata"]["name"] for r in plan.of_type("kubernetes:karpenter.sh/v1:NodePool")}
    assert growable and growable <= pools
    assert [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "karpenter"]
    # ... and the only managed node group is the system pool.
    groups = plan.of_type("aws:eks/nodeGroup:NodeGroup")
    assert [g.inputs["labels"] for g in groups] == [{"inferstack.io/pool": "system"}]
    assert all(g.inputs["releaseVersion"] == "1.33.5-20251120" for g in groups)


def test_every_helm_release_uses_the_pinned_chart_version(plan_of: PlanOf) -> None:
    for stack in bundled_stacks():
        for release in plan_of(stack).of_type("kubernetes:helm.sh/v3:Release"):
            pin = CHARTS[release.inputs["name"]]
            assert (release.inputs["chart"], release.inputs["version"], release.inputs["namespace"]) == (
                pin.chart_ref,
                pin.version,
                pin.namespace,
            )


def test_prometheus_scrapes_every_15_seconds_or_faster_with_retention(plan_of: PlanOf) -> None:
    release = next(
        r
        for r in plan_of("prod").of_type("kubernetes:helm.sh/v3:Release")
        if r.inputs["name"] == "kube-prometheus-stack"
    )
    spec = release.inputs["values"]["prometheus"]["prometheusSpec"]
    assert int(spec["scrapeInterval"].rstrip("s")) <= 15
    assert spec["retention"] == "15d"
    assert spec["resources"]["limits"]["memory"]


def test_efa_device_plugin_runs_only_on_efa_nodes(plan_of: PlanOf) -> None:
    prod = {r.inputs["name"]: r.inputs for r in plan_of("prod").of_type("kubernetes:helm.sh/v3:Release")}
    assert prod["aws-efa-k8s-device-plugin"]["values"]["nodeSelector"] == {"inferstack.io/efa": "true"}
    dev = {r.inputs["name"] for r in plan_of("dev").of_type("kubernetes:helm.sh/v3:Release")}
    assert "aws-efa-k8s-device-plugin" not in dev


@pytest.mark.parametrize("stack", bundled_stacks())
def test_dashboards_and_rules_render_as_valid_objects(plan_of: PlanOf, stack: str) -> None:
    objects = manifests(plan_of(stack))
    dashboards = [
        m
        for m in objects
        if m["kind"] == "ConfigMap" and m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    assert len(dashboards) == 3
    for m in dashboards:
        kubernetes_validate.validate(m, "1.33.0", strict=True)
    (rule,) = [m for m in objects if m["kind"] == "PrometheusRule"]
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert any("Ttft" in a or "TTFT" in a.upper() for a in alerts)


def test_plan_prints_the_pinned_chart_versions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--stack", "dev"]) == 0
    charts = capsys.readouterr().out.split("Helm charts")[1].split("Outputs:")[0]
    rows = {line.split()[0]: line.split()[1:] for line in charts.splitlines()[3:] if line.strip()}
    # Every release the dev stack installs is listed with its pinned chart, version and namespace.
    for name in ("karpenter", "keda", "kube-prometheus-stack", "lws"):
        pin = CHARTS[name]
        assert rows[name] == [pin.chart_ref, pin.version, pin.namespace]


def test_a_scale_to_zero_model_behind_a_route_alias_wakes_on_that_alias(tmp_path: Path) -> None:
    # GIVEN the prod stack's llama-70b opted into scale to zero; the route alias "chat" sends complex prompts to it
    def scale_70b_to_zero(env: dict[str, Any]) -> None:
        model = next(m for m in env["models"] if m["name"] == "llama-70b")
        model["autoscaling"] = {**model.get("autoscaling", {}), "scaleToZero": True}

    plan = plan_with(tmp_path, "prod", scale_70b_to_zero)
    # WHEN its ScaledObject is rendered
    scaler = next(m for m in manifests(plan) if m["kind"] == "ScaledObject" and m["metadata"]["name"] == "llama-70b")
    (wake,) = [t for t in scaler["spec"]["triggers"] if t["name"] == "gateway-requests"]
    # THEN the gateway's requests for "chat" wake it, not only requests that name llama-70b itself
    assert (
        'inferstack_gateway_model_requests_total{model=~"chat|llama-70b",inferstack_site="",namespace="inferstack-gateway"}'
        in wake["metadata"]["query"]
    )


def test_scale_to_zero_without_a_gateway_is_refused() -> None:
    # GIVEN a scale-to-zero model and no gateway, whose request count is the only thing that wakes a model at zero
    def no_gateway(env: dict[str, Any]) -> None:
        env["gateway"] = {"enabled": False}
        env["models"][0]["autoscaling"] = {**env["models"][0].get("autoscaling", {}), "scaleToZero": True}

    # WHEN / THEN the config is refused, naming the key
    (line,) = config_errors(no_gateway)
    assert "models[0].autoscaling.scaleToZero: got true with gateway.enabled: false" in line


def test_scale_to_zero_with_autoscaling_off_is_refused() -> None:
    # GIVEN a model at zero replicas that opts into scale to zero but turns autoscaling off: no ScaledObject is made,
    # so nothing would ever start a replica and the gateway's requests for it would fail for good
    def idle_and_unscaled(env: dict[str, Any]) -> None:
        env["models"][0].update(replicas=0, autoscaling={"enabled": False, "scaleToZero": True})

    # WHEN / THEN the config is refused, naming the key and both ways out
    (line,) = config_errors(idle_and_unscaled)
    assert "models[0].autoscaling.scaleToZero: got true with autoscaling.enabled: false" in line
    assert "fix: remove `enabled: false`" in line


def test_zero_replicas_with_autoscaling_off_is_told_to_turn_autoscaling_on() -> None:
    # GIVEN a fixed-size model (autoscaling off) at zero replicas
    def zero_and_fixed(env: dict[str, Any]) -> None:
        env["models"][0].update(replicas=0, autoscaling={"enabled": False})

    # WHEN / THEN the fix names autoscaling as well as scaleToZero: scaleToZero alone would still leave it unscaled
    (line,) = config_errors(zero_and_fixed)
    assert "models[0].replicas: got 0 without autoscaling.scaleToZero" in line
    assert "opt in with autoscaling.scaleToZero: true and remove autoscaling.enabled: false" in line
