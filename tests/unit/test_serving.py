"""The serving layer as planned: schemas, placement (Deployment vs LeaderWorkerSet), policies, cache security."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import kubernetes_validate
import pytest
import yaml
from google.protobuf import text_format
from moto import mock_aws
from tritonclient.grpc import model_config_pb2

from components.catalog.instances import INSTANCES
from components.kube.labels import POOL_LABEL
from components.kube.requests import pod_requests
from crdcheck import validate as validate_cr
from helpers import ROOT, bundled_stacks, cloud_stacks, config_errors, only, plan_with, raw_environment, refused_by_plan
from inferstack_cli import render
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]
K8S_VERSION = "1.33.0"
BUILT_IN_GROUPS = (
    "",
    "apps",
    "batch",
    "policy",
    "networking.k8s.io",
    "scheduling.k8s.io",
    "autoscaling",
    "storage.k8s.io",
)


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [
        yaml.safe_load(text) for path, text in render.renders(plan.resources).items() if path.startswith("manifests/")
    ]


def is_built_in(manifest: dict[str, Any]) -> bool:
    api = manifest["apiVersion"]
    return ("/" not in api) or api.split("/")[0] in BUILT_IN_GROUPS


def add_405b(env: dict[str, Any]) -> None:
    env["models"].append(
        {
            "name": "llama-405b",
            "model": "meta-llama/Llama-3.1-405B-Instruct",
            "engine": "vllm",
            "pool": "h100",
            "precision": "bf16",
            "tensorParallel": 8,
            "pipelineParallel": 2,
            "slo": {"itlP99Ms": 50},
        }
    )


@pytest.fixture(scope="module")
def multi_node_plan(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    return plan_with(tmp_path_factory.mktemp("lws"), "prod", add_405b)


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_rendered_built_in_object_passes_strict_kubernetes_validation(plan_of: PlanOf, stack: str) -> None:
    objects = [m for m in manifests(plan_of(stack)) if is_built_in(m)]
    assert len(objects) > 10
    for manifest in objects:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def test_leaderworkerset_validates_against_the_pinned_crd(multi_node_plan: Plan) -> None:
    (lws,) = [m for m in manifests(multi_node_plan) if m["kind"] == "LeaderWorkerSet"]
    assert validate_cr(lws, strict=True) == []
    # The pod templates inside are core objects too: validate them as Pods.
    for template in ("leaderTemplate", "workerTemplate"):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "x"},
            "spec": lws["spec"]["leaderWorkerTemplate"][template]["spec"],
        }
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_model_that_fits_one_node_is_a_deployment(plan_of: PlanOf) -> None:
    kinds = {
        m["metadata"]["name"]: m["kind"]
        for m in manifests(plan_of("prod"))
        if m["kind"] in ("Deployment", "LeaderWorkerSet") and m["metadata"]["namespace"] == "inferstack-serving"
    }
    assert kinds == {"llama-8b": "Deployment", "llama-70b": "Deployment"}


def test_model_spanning_nodes_is_a_leaderworkerset_with_exclusive_topology_and_efa(multi_node_plan: Plan) -> None:
    (lws,) = [m for m in manifests(multi_node_plan) if m["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert "leaderworkerset.sigs.k8s.io/exclusive-topology" in lws["metadata"]["annotations"]
    server = template["workerTemplate"]["spec"]["containers"][0]
    assert server["resources"]["limits"]["vpc.amazonaws.com/efa"] == 32
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert {"name": "FI_PROVIDER", "value": "efa"} in server["env"]
    assert {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"} in server["env"]


def test_serving_pod_tolerates_the_gpu_taint_and_has_shm_probes_and_a_loader(plan_of: PlanOf) -> None:
    deployment = next(
        m for m in manifests(plan_of("prod")) if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-8b"
    )
    pod = deployment["spec"]["template"]["spec"]
    # Any value of the taint: the kit's pools carry nvidia.com/gpu=true, an existing cluster's GPU servers may carry
    # another value (nvidia.com/gpu=present) or none, where operator Equal with "true" would leave the model Pending.
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert all(t.get("operator") == "Exists" or t.get("key") != "nvidia.com/gpu" for t in pod["tolerations"])
    assert pod["nodeSelector"] == {"inferstack.io/pool": "h100"}
    assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in pod["volumes"])
    server = pod["containers"][0]
    assert server["startupProbe"]["httpGet"]["path"] == "/health"
    assert server["securityContext"]["runAsNonRoot"] is True
    assert "--enforce-eager" not in server["command"]
    loader = next(c for c in pod["initContainers"] if c["name"] == "fetch-model")
    assert loader["args"][:2] == ["--source", "s3://models-9b0f540/meta-llama/Llama-3.1-8B-Instruct/hf"]
    assert pod["priorityClassName"] == "inferstack-serving"


@pytest.fixture(scope="module")
def ec2_vcpus() -> dict[str, int]:
    """vCPUs per catalog instance type, from EC2's DescribeInstanceTypes data (as moto carries it)."""
    with mock_aws():
        described = boto3.client("ec2", region_name="us-east-1").describe_instance_types(InstanceTypes=list(INSTANCES))
    return {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in described["InstanceTypes"]}


@pytest.mark.parametrize("stack", cloud_stacks())
def test_every_gpu_pod_fits_the_vcpus_of_its_pools_instance(
    plan_of: PlanOf, ec2_vcpus: dict[str, int], stack: str
) -> None:
    # GIVEN a bundled cloud stack (dev serves from a g6e.xlarge: 4 vCPUs for its one GPU)
    plan = plan_of(stack)
    pools = {p.name: p.spec for p in plan.environment.gpu_pools}
    pods = [
        (m["metadata"]["name"], m["spec"]["template"]["spec"])
        for m in manifests(plan)
        if m["kind"] in ("Deployment", "Job")
        and m["spec"]["template"]["spec"].get("nodeSelector", {}).get(POOL_LABEL) in pools
    ]
    assert pods
    for name, pod in pods:
        # WHEN its effective request is read as the scheduler reads it
        spec = pools[pod["nodeSelector"][POOL_LABEL]]
        asked = pod_requests(pod)
        # THEN it asks for fewer CPUs than its GPUs' share of the instance, or no node Karpenter launches takes it
        share_m = ec2_vcpus[spec.instance_type] * 1000 * asked.gpus // spec.gpu_count
        assert asked.cpu_m < share_m, (name, spec.instance_type, asked.show())


def test_triton_model_gets_rendered_configs_an_engine_job_and_triton_health_probes(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    objects = manifests(plan)
    job = next(m for m in objects if m["kind"] == "Job")
    build = next(c for c in job["spec"]["template"]["spec"]["initContainers"] if c["name"] == "trtllm-build")
    assert "trtllm-build" in build["command"][-1]
    publish = job["spec"]["template"]["spec"]["containers"][0]
    assert publish["args"][0] == "--upload"
    server = next(m for m in objects if m["metadata"]["name"] == "llama-70b" and m["kind"] == "Deployment")
    container = server["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "http": 9000,
        "kserve-http": 8000,
        "grpc": 8001,
    }
    assert "--backend" in container["command"] and "tensorrtllm" in container["command"]
    configs = {k: v for k, v in render.renders(plan.resources).items() if k.endswith("config.pbtxt")}
    assert len(configs) == 4
    for text in configs.values():
        text_format.Parse(text, model_config_pb2.ModelConfig())


def test_network_policy_admits_only_the_gateway_and_prometheus(plan_of: PlanOf) -> None:
    policy = next(
        m for m in manifests(plan_of("prod")) if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "llama-70b"
    )
    ingress = policy["spec"]["ingress"]
    gateway, prometheus, group = ingress
    assert gateway["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "inferstack-gateway"
    }
    assert gateway["from"][0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "inferstack-gateway"}
    assert {p["port"] for p in gateway["ports"]} == {"http", "kserve-http", "grpc"}
    # Prometheus's own pods, not the whole monitoring namespace: the metrics port is the API port too (vLLM serves
    # /metrics beside /v1), so Grafana, Alertmanager or an exporter there could otherwise call the model past the
    # gateway's keys and rate limits
    (peer,) = prometheus["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert peer["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}
    assert prometheus["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert group["from"] == [{"podSelector": {"matchLabels": {"inferstack.io/model": "llama-70b"}}}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_elasticache_is_tls_auth_encrypted_multi_az_lru_and_cluster_only(plan_of: PlanOf) -> None:
    plan = plan_of("prod")
    group = only(plan.resources, "aws:elasticache/replicationGroup:ReplicationGroup").inputs
    assert group["engine"] == "valkey" and group["engineVersion"] == "8.2"
    assert group["transitEncryptionEnabled"] is True and group["transitEncryptionMode"] == "required"
    assert "authToken" not in group and len(group["userGroupIds"]) == 1
    assert group["atRestEncryptionEnabled"] is True and group["kmsKeyId"].startswith("arn:aws:kms:")
    assert group["multiAzEnabled"] is True and group["automaticFailoverEnabled"] is True
    assert group["numCacheClusters"] == 2
    params = only(plan.resources, "aws:elasticache/parameterGroup:ParameterGroup").inputs
    assert {"name": "maxmemory-policy", "value": "allkeys-lru"} in params["parameters"]
    cache_sg = next(r for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name == "cache").inputs
    (rule,) = cache_sg["ingress"]
    assert (rule["fromPort"], rule["toPort"], rule["protocol"]) == (6379, 6379, "tcp")
    assert "cidrBlocks" not in rule and len(rule["securityGroups"]) == 1
    assert plan.outputs["cache_url"].startswith("rediss://")


def test_the_readmes_cache_section_says_how_elasticache_authenticates(plan_of: PlanOf) -> None:
    # GIVEN prod's replication group, which authenticates its clients as ElastiCache users of one user group
    group = only(plan_of("prod").resources, "aws:elasticache/replicationGroup:ReplicationGroup").inputs
    users = plan_of("prod").of_type("aws:elasticache/user:User")
    # WHEN the README's "Cache" section is read
    section = (ROOT / "README.md").read_text().split("\n## Cache\n", 1)[1].split("\n## ", 1)[0]
    # THEN it describes those users, one per client, and no AUTH token the group does not have
    assert "authToken" not in group and group["userGroupIds"] and len(users) == 3  # default (off), gateway, exporter
    assert "auth token" not in section.lower() and "RBAC" in section


def test_in_cluster_redis_has_limits_pdb_and_a_network_policy(plan_of: PlanOf) -> None:
    objects = manifests(plan_of("dev"))
    sts = next(m for m in objects if m["kind"] == "StatefulSet")
    redis = sts["spec"]["template"]["spec"]["containers"][0]
    assert redis["image"].startswith("redis:8")
    assert redis["resources"]["limits"]["memory"] == "2Gi"
    assert "allkeys-lru" in redis["args"]
    assert any(m["kind"] == "PodDisruptionBudget" and m["metadata"]["name"] == "cache" for m in objects)
    policy = next(m for m in objects if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "cache")
    sources = policy["spec"]["ingress"][0]["from"]
    assert sources[0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "inferstack-gateway"}


@pytest.mark.parametrize("stack", ["dev", "onprem", "edge"])
def test_in_cluster_cache_admits_only_the_gateway_and_its_exporter(plan_of: PlanOf, stack: str) -> None:
    # GIVEN a stack with the in-cluster Redis, and the exporter release the stack installs to scrape it
    plan = plan_of(stack)
    policy = next(
        m for m in manifests(plan) if m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"] == "inferstack-cache"
    )
    exporter = next(
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "prometheus-redis-exporter"
    )
    # WHEN its ingress peers are read
    (rule,) = policy["spec"]["ingress"]
    peers = {p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]: p for p in rule["from"]}
    # THEN each names its pods: the gateway's, and from the exporter's namespace only the exporter's (the chart's
    # selector label), never every pod of monitoring (Grafana, Alertmanager, the collector)
    assert set(peers) == {"inferstack-gateway", exporter.inputs["namespace"]}
    assert peers["inferstack-gateway"]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "inferstack-gateway"}
    }
    assert peers[exporter.inputs["namespace"]]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": exporter.inputs["chart"]}
    }


def test_stateful_caches_are_protected_unless_config_says_otherwise(plan_of: PlanOf) -> None:
    assert only(plan_of("prod").resources, "aws:elasticache/replicationGroup:ReplicationGroup").protect is True
    assert only(plan_of("dev").resources, "kubernetes:apps/v1:StatefulSet").protect is False


# --- config errors for models ------------------------------------------------------------------


def test_model_that_does_not_fit_its_pool_names_the_numbers() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["models"][1].update(precision="bf16", tensorParallel=1)

    (line,) = config_errors(edit)
    assert "models[1].tensorParallel: got 1 with bf16 on H200" in line
    assert "GB of weights" in line and "GB per GPU" in line and "does not fit" in line
    assert "fix: raise tensorParallel" in line


@pytest.mark.parametrize("slo", [None, {"ttftP99Ms": 100, "itlP99Ms": 20}], ids=["default-slo", "written-slo"])
def test_an_explicit_tensor_parallel_whose_itl_floor_misses_the_slo_is_refused(
    tmp_path: Path, slo: dict[str, float] | None
) -> None:
    # GIVEN prod's 70B model (FP8, Triton, on H200) pinned to TP1: a full ultra-low-latency batch reads 70.6 GB of
    # weights and 65.7 GB of KV cache a step from one H200, a floor of 28.4 ms against a 20 ms target
    def edit(env: dict[str, Any]) -> None:
        env["models"][1].update(tensorParallel=1)
        env["models"][1].pop("slo")
        if slo is not None:
            env["models"][1]["slo"] = slo

    # WHEN planned THEN exit 2, one line at the key: the floor, the target (said to be the default when unwritten),
    # the TP the kit would derive on the pool, and every way out
    line = refused_by_plan(tmp_path, "prod", edit)
    assert "inferstack:environment.models[1].tensorParallel: got 1 with fp8 on H200, whose ITL floor is 28.4 ms" in line
    assert "allowed: a degree whose ITL floor meets slo.itlP99Ms, 20 ms" in line
    assert ("(the default: slo.itlP99Ms is not set)" in line) is (slo is None)
    assert "TP=2 meets it on p5en.48xlarge" in line
    assert "fix: remove tensorParallel to derive it (TP=2) or set it to 2; or use a bigger GPU pool" in line
    assert ("write a looser slo.itlP99Ms (it is not set: 20 ms is the default)" in line) is (slo is None)
    assert "fp8" not in line.split("; fix: ")[1]  # already in fp8: nothing to gain

    # AND the same model is placed with its TP left to the kit (as prod has it: TP2), or at TP1 with a target over
    # its floor
    from components.serving._placement import place
    from stacks.environment import load_environment

    for change, tp in (({}, 2), ({"tensorParallel": 1, "slo": {"itlP99Ms": 30}}, 1)):
        raw = copy.deepcopy(raw_environment("prod"))
        raw["models"][1].update(change)
        env = load_environment(raw, "stacks/Pulumi.prod.yaml")
        placed = place(env.models[1], env.pool(env.models[1].pool))
        assert (placed.tp, placed.tp_derived) == (tp, "tensorParallel" not in change)
        assert placed.itl.total_ms <= env.models[1].slo.itl_p99_ms


def test_tensor_parallel_must_divide_the_attention_heads() -> None:
    # Qwen2.5-1.5B has 12 attention heads and 2 KV heads: TP=4 splits neither evenly.
    (line,) = config_errors(lambda env: env["models"][0].update(model="Qwen/Qwen2.5-1.5B-Instruct", tensorParallel=4))
    assert "models[0].tensorParallel: got 4" in line and "divide" in line


def test_engine_precision_pair_the_engine_does_not_run_is_refused() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"][0]["instanceType"] = "p4d.24xlarge"

    lines = config_errors(edit)
    assert any("models[0].precision: got 'fp8'" in line and "A100 has none" in line for line in lines)


def test_model_on_a_pool_that_does_not_exist() -> None:
    (line,) = config_errors(lambda env: env["models"][0].update(pool="h1000"))
    assert "models[0].pool: got 'h1000'; allowed: one of gpuPools[].name: h100, h200" in line
    assert "did you mean 'h100'?" in line


def test_unknown_model_lists_the_catalog() -> None:
    (line,) = config_errors(lambda env: env["models"][0].update(model="meta-llama/Llama-3.1-8B"))
    assert "models[0].model: got 'meta-llama/Llama-3.1-8B' (not in the model catalog)" in line
    assert "did you mean 'meta-llama/Llama-3.1-8B-Instruct'?" in line


def test_derived_tensor_parallel_follows_the_roofline(tmp_path: Path) -> None:
    # GIVEN the 70B model in FP8 with a 20 ms ITL target on H100 (3.35 TB/s). A step of the ultra-low-latency
    # profile reads the weights (70.6 GB) and the KV cache of 64 sequences x 8,192 tokens (86 GB): TP=2 reads
    # 78 GB per GPU (23 ms), over the target; TP=4 reads 39 GB (12 ms + all-reduces). Counting batch 1 alone
    # (weights only) would have derived TP=2 (issue 12, point 10).
    plan = plan_with(tmp_path, "prod", lambda env: env["models"][1].update(pool="h100", engine="vllm", replicas=2))
    deployment = next(m for m in manifests(plan) if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-70b")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == "4"
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_plan_json_includes_kubernetes_objects_with_their_provider(plan_of: PlanOf, tmp_path: Path) -> None:
    plan = plan_of("prod")
    deployments = plan.of_type("kubernetes:apps/v1:Deployment")
    assert sorted(d.name for d in deployments) == ["gateway", "llama-70b", "llama-8b"]
    provider = next(r for r in plan.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.name == "inferstack-prod-k8s"
    assert json.dumps(plan.to_json())  # serializable


SURGE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
REPLACE = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


@pytest.mark.parametrize(
    ("stack", "strategy"), [("prod", SURGE), ("dev", SURGE), ("onprem", REPLACE), ("edge", REPLACE)]
)
def test_only_a_tier_whose_nodes_grow_surges_a_models_rollout(plan_of: PlanOf, stack: str, strategy: Any) -> None:
    # GIVEN each bundled stack WHEN planned THEN its model Deployments roll out as its tier's nodes allow: the cloud
    # (Karpenter adds the GPU node) brings the new pod up first; fixed hardware replaces a pod at a time
    models = [
        m
        for m in manifests(plan_of(stack))
        if m["kind"] == "Deployment" and m["metadata"]["namespace"] == "inferstack-serving"
    ]
    assert models and all(m["spec"]["strategy"] == strategy for m in models)


def test_replicated_models_keep_half_serving_through_a_drain_and_single_ones_may_be_evicted(plan_of: PlanOf) -> None:
    budgets = {
        m["metadata"]["name"]: m["spec"]
        for m in manifests(plan_of("prod"))
        if m["kind"] == "PodDisruptionBudget" and m["metadata"]["namespace"] == "inferstack-serving"
    }
    # GIVEN prod's llama-8b (2 replicas) and llama-70b (8): at least half stay up through voluntary evictions
    assert budgets["llama-8b"]["minAvailable"] == budgets["llama-70b"]["minAvailable"] == "50%"
    # AND dev's single replica: minAvailable 50% would round up to 1 and block every drain
    (single,) = [
        m["spec"] for m in manifests(plan_of("dev"))
        if m["kind"] == "PodDisruptionBudget" and m["metadata"]["namespace"] == "inferstack-serving"
    ]  # fmt: skip
    assert single["maxUnavailable"] == 1 and "minAvailable" not in single


EAGLE3_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _speculate(env: dict[str, Any]) -> None:
    model = next(m for m in env["models"] if m["name"] == "llama-8b")
    model["speculative"] = {"method": "eagle3", "numSpeculativeTokens": 3, "model": EAGLE3_HEAD}


def _server_pod(plan: Plan, name: str) -> dict[str, Any]:
    (deployment,) = [m for m in manifests(plan) if m["kind"] == "Deployment" and m["metadata"]["name"] == name]
    return deployment["spec"]["template"]["spec"]


def test_a_speculative_draft_is_fetched_from_the_store_to_where_vllm_reads_it(tmp_path: Path) -> None:
    # GIVEN the prod 8B model speculating with an EAGLE-3 head named by its Hugging Face id
    pod = _server_pod(plan_with(tmp_path, "prod", _speculate), "llama-8b")
    # WHEN its pod is planned THEN a fetch-draft init container copies the head from the store's <id>/hf/ folder, with
    # the same image and account as the model's own loader
    loaders = {c["name"]: c for c in pod["initContainers"]}
    draft = loaders["fetch-draft"]
    source, dest = draft["args"][draft["args"].index("--source") + 1], draft["args"][draft["args"].index("--dest") + 1]
    assert source == f"s3://models-9b0f540/{EAGLE3_HEAD}/hf"
    assert draft["image"] == loaders["fetch-model"]["image"]
    # AND vLLM's --speculative-config names exactly the folder the draft was copied to
    command = pod["containers"][0]["command"]
    config = json.loads(command[command.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "model": dest, "num_speculative_tokens": 3}
    assert dest.endswith(f"/{EAGLE3_HEAD}/hf")
    assert any(m["mountPath"] in dest for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model-cache")


def test_a_speculative_draft_is_copied_from_a_volume_store(tmp_path: Path) -> None:
    # GIVEN an on-prem site whose store is a pre-filled volume (vLLM models only), the 8B model speculating
    def edit(env: dict[str, Any]) -> None:
        env["modelStore"] = {"kind": "volume", "claimName": "models-nfs"}
        env["models"] = [m for m in env["models"] if m["engine"] == "vllm"]
        env["gateway"]["routes"][0]["large"] = "llama-405b"
        _speculate(env)

    pod = _server_pod(plan_with(tmp_path, "onprem", edit), "llama-8b")
    # WHEN planned THEN fetch-draft copies <id>/hf from the mounted volume (not from S3) onto the pod's NVMe volume
    draft = next(c for c in pod["initContainers"] if c["name"] == "fetch-draft")
    script = draft["command"][-1]
    assert f"/mnt/model-store/{EAGLE3_HEAD}/hf/." in script
    assert {"name": "model-store", "mountPath": "/mnt/model-store", "readOnly": True} in draft["volumeMounts"]


def test_no_draft_no_fetch_draft(plan_of: PlanOf) -> None:
    # GIVEN the bundled prod stack (no speculation) THEN no pod carries a fetch-draft step
    deployments = {m["metadata"]["name"]: m for m in manifests(plan_of("prod")) if m["kind"] == "Deployment"}
    assert sorted(deployments) == ["gateway", "llama-70b", "llama-8b"]
    for name, m in deployments.items():
        init = {c["name"] for c in m["spec"]["template"]["spec"].get("initContainers", [])}
        assert "fetch-draft" not in init, name
