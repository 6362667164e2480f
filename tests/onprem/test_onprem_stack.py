"""The on-prem tier as planned from the bundled ``onprem`` stack: what a bare-metal InfiniBand cluster needs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from crdcheck import validate as validate_cr
from helpers import ROOT, only, plan_with
from inferstack_cli import render
from inferstack_cli.plan import OFFLINE_SECRET, Plan
from policies.rules import check_plan, check_stack

PlanOf = Callable[[str], Plan]


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def by_kind(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests(plan) if m["kind"] == kind]


def release_values(plan: Plan, name: str) -> dict[str, Any]:
    release = next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == name)
    return release.inputs.get("values") or {}


def test_onprem_plans_no_aws_resource(plan_of: PlanOf) -> None:
    # GIVEN the bundled on-prem stack WHEN planned THEN nothing on AWS is created
    plan = plan_of("onprem")
    assert plan.tier == "onprem"
    assert [r.type for r in plan.resources if r.type.startswith("aws:")] == []
    assert plan.violations == []


def test_a_non_cloud_tier_never_imports_pulumi_aws() -> None:
    # GIVEN a fresh interpreter WHEN it plans the on-prem stack THEN pulumi_aws was never imported
    code = (
        "import sys\n"
        "from inferstack_cli.plan import run_plan\n"
        "run_plan('onprem')\n"
        "print(sorted(m for m in sys.modules if m == 'pulumi_aws' or m.startswith('pulumi_aws.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_cloud_tier_does_import_pulumi_aws_so_the_probe_can_fail() -> None:
    code = "import sys\nfrom inferstack_cli.plan import run_plan\nrun_plan('dev')\nprint('pulumi_aws' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "True"


def test_one_explicit_provider_from_a_secret_kubeconfig_serves_every_kubernetes_object(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    (provider,) = plan.of_type("pulumi:providers:kubernetes")
    # The kubeconfig is a secret input; offline it is the marked stand-in, never a file path or ambient config.
    assert provider.inputs["kubeconfig"] == "[secret]"
    assert provider.inputs["context"] == "dc1-admin"
    assert OFFLINE_SECRET.startswith("<inferstack plan")


def test_a_real_run_without_the_kubeconfig_secret_stops_with_one_clear_line(tmp_path: Any) -> None:
    # GIVEN the on-prem program run as `pulumi up` would, with no inferstack:kubeconfig secret
    code = (
        "import json, yaml, pulumi\n"
        "from inferstack_cli.plan import mock_engine\n"
        "from stacks import program\n"
        "doc = yaml.safe_load(open('stacks/Pulumi.onprem.yaml'))['config']\n"
        "cfg = {'inferstack:environment': json.dumps(doc['inferstack:environment'])}\n"
        "with mock_engine('onprem', cfg, [], 'us-east-1'):\n"
        "    program.main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    # THEN it exits 2 naming the secret and the command that sets it, with no traceback
    assert out.returncode == 2, out.stderr
    assert "inferstack:kubeconfig: got nothing" in out.stderr
    assert "pulumi config set --secret inferstack:kubeconfig" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_405b_group_spans_two_servers_under_one_leaf_over_rdma(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    (lws,) = by_kind(plan, "LeaderWorkerSet")
    assert lws["metadata"]["name"] == "llama-405b"
    assert lws["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "fabric.topograph.run/tier-0"
    }
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    for role in ("leaderTemplate", "workerTemplate"):
        pod = template[role]["spec"]
        (server,) = pod["containers"]
        limits = server["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == 8
        assert limits["rdma/rdma_shared_device_a"] == 1
        assert server["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        env = {e["name"]: e.get("value") for e in server["env"]}
        assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7"
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0"  # the pod network: the pods are not on the host network
        assert "NCCL_DEBUG" not in env  # debug output stays out of production
        shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"]["medium"] == "Memory"
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert validate_cr(lws, strict=True) == []


def test_single_node_models_take_no_rdma_and_no_extra_capability(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    single = {d["metadata"]["name"]: d for d in by_kind(plan, "Deployment") if d["metadata"]["name"] != "gateway"}
    # GIVEN the bundled stack's single-node models (405B is the LeaderWorkerSet): both are checked, not skipped
    assert sorted(single) == ["llama-70b", "llama-8b"]
    for deployment in single.values():
        (server,) = deployment["spec"]["template"]["spec"]["containers"]
        assert not any(k.startswith("rdma/") for k in server["resources"]["limits"])
        assert "add" not in server["securityContext"]["capabilities"]


def test_model_caches_live_on_local_nvme_volumes_bound_on_the_pods_node(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    pods = [d["spec"]["template"]["spec"] for d in by_kind(plan, "Deployment") if d["metadata"]["name"] == "llama-8b"]
    (pod,) = pods
    (cache,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    claim = cache["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "local-nvme"
    assert claim["resources"]["requests"]["storage"] == "1500Gi"
    assert "hostPath" not in cache
    # No root chown step: the kubelet applies the pod's fsGroup to a PV.
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-model"]
    values = release_values(plan, "local-static-provisioner")
    (cls,) = values["classes"]
    assert cls["name"] == "local-nvme" and cls["hostDir"] == "/mnt/fast-disks"


def test_loaders_read_the_s3_compatible_store_with_keys_from_a_secret(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    (deployment,) = [d for d in by_kind(plan, "Deployment") if d["metadata"]["name"] == "llama-8b"]
    (loader,) = deployment["spec"]["template"]["spec"]["initContainers"]
    env = {e["name"]: e for e in loader["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "https://minio.storage.dc1.example.com:9000"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "model-store-credentials",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    assert "s3://models/meta-llama/Llama-3.1-8B-Instruct/hf" in loader["args"]
    secret = only(plan.resources, "kubernetes:core/v1:Secret", "model-store")
    assert secret.inputs["stringData"] == "[secret]"


def test_gpu_operator_leaves_the_dgx_os_driver_alone_and_the_fabric_policy_runs_the_rdma_plugin(
    plan_of: PlanOf,
) -> None:
    plan = plan_of("onprem")
    values = release_values(plan, "gpu-operator")
    assert values["driver"] == {"enabled": False}
    assert values["dcgmExporter"] == {"enabled": False}  # the kit's own dcgm-exporter release serves metrics
    assert values["nfd"] == {"enabled": False}  # with RDMA, the Network Operator's NFD is the cluster's one
    assert release_values(plan, "network-operator")["nfd"]["enabled"] is True
    (policy,) = by_kind(plan, "NicClusterPolicy")
    assert policy["metadata"]["name"] == "nic-cluster-policy"
    config = json.loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])
    (entry,) = config["configList"]
    assert entry["resourceName"] == "rdma_shared_device_a"
    assert entry["selectors"] == {"vendors": ["15b3"], "deviceIDs": ["1021"]}
    assert "ofedDriver" not in policy["spec"]  # MOFED is on the hosts
    assert validate_cr(policy, strict=True) == []


def test_the_gateway_gets_a_metallb_address_on_the_lan(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    services = [s for s in by_kind(plan, "Service") if s["metadata"]["name"] == "gateway-lb"]
    (service,) = services
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [{"name": "load-balancer", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert service["metadata"]["annotations"] == {"metallb.io/address-pool": "inferstack"}
    (pool,) = by_kind(plan, "IPAddressPool")
    assert pool["spec"]["addresses"] == ["10.40.8.240-10.40.8.250"]
    (l2,) = by_kind(plan, "L2Advertisement")
    assert l2["spec"]["ipAddressPools"] == ["inferstack"]
    assert validate_cr(pool) == [] and validate_cr(l2) == []


@pytest.mark.parametrize(("port", "listens"), [(None, 443), (8443, 8443)])
def test_with_a_tls_secret_the_load_balancer_listens_on_443_unless_a_port_is_written(
    tmp_path: Any, port: int | None, listens: int
) -> None:
    # GIVEN the on-prem gateway serving HTTPS itself (gateway.tlsSecret), its load balancer's port written or not
    def tls(env: dict[str, Any]) -> None:
        env["gateway"].update(tlsSecret="gateway-tls", **({"loadBalancerPort": port} if port else {}))

    plan = plan_with(tmp_path, "onprem", tls)
    # THEN the load balancer listens on HTTPS's own port (not 80, where https://host:80 is what clients would dial)
    (service,) = [s for s in by_kind(plan, "Service") if s["metadata"]["name"] == "gateway-lb"]
    assert service["spec"]["ports"] == [
        {"name": "load-balancer", "port": listens, "targetPort": "http", "protocol": "TCP"}
    ]


def test_controllers_and_cache_run_on_the_configured_system_nodes(plan_of: PlanOf) -> None:
    plan = plan_of("onprem")
    system = {"node-role.inferstack.io/system": "true"}
    (redis,) = by_kind(plan, "StatefulSet")
    assert redis["spec"]["template"]["spec"]["nodeSelector"] == system
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "ceph-rbd"
    assert release_values(plan, "keda")["nodeSelector"] == system
    prometheus = release_values(plan, "kube-prometheus-stack")["prometheus"]["prometheusSpec"]
    assert prometheus["nodeSelector"] == system
    assert prometheus["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "ceph-rbd"
    # The cluster-wide controllers of the tier's own charts: the LeaderWorkerSet controller, the GPU and Network
    # Operators, the one NFD's master and garbage collector (the Network Operator's, as the fabric is RDMA) and
    # MetalLB's controller. Node agents (NFD's worker, MetalLB's speaker) run on every node.
    assert release_values(plan, "lws")["nodeSelector"] == system
    assert release_values(plan, "gpu-operator")["operator"]["nodeSelector"] == system
    assert "node-feature-discovery" not in release_values(plan, "gpu-operator")
    network = release_values(plan, "network-operator")
    assert network["operator"]["nodeSelector"] == system
    nfd = network["node-feature-discovery"]
    assert (nfd["master"]["nodeSelector"], nfd["gc"]["nodeSelector"]) == (system, system)
    assert "nodeSelector" not in nfd["worker"]
    metallb = release_values(plan, "metallb")
    assert metallb["controller"]["nodeSelector"] == system
    assert "nodeSelector" not in metallb["speaker"]
    # The device plugin and DCGM exporter follow the GPU Operator's own node label.
    affinity = release_values(plan, "dcgm-exporter")["affinity"]["nodeAffinity"]
    term = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]


@pytest.mark.parametrize("kind", ["ScaledObject", "PodMonitor", "ServiceMonitor", "PrometheusRule"])
def test_the_same_autoscaling_and_observability_as_the_cloud_tier(plan_of: PlanOf, kind: str) -> None:
    onprem = {m["metadata"]["name"] for m in by_kind(plan_of("onprem"), kind)}
    cloud = {m["metadata"]["name"] for m in by_kind(plan_of("prod"), kind)}
    assert onprem, kind
    if kind != "ScaledObject":
        assert onprem == cloud


def test_a_prefilled_volume_store_copies_checkpoints_onto_nvme_without_s3_keys(tmp_path: Any) -> None:
    from helpers import plan_with

    def volume_store(env: dict[str, Any]) -> None:
        env["modelStore"] = {"kind": "volume", "claimName": "models-nfs"}
        env["models"] = [m for m in env["models"] if m["engine"] == "vllm"]
        env["gateway"]["routes"] = []

    # GIVEN the on-prem stack reading weights from a pre-filled NFS claim WHEN planned
    plan = plan_with(tmp_path, "onprem", volume_store)
    # THEN no store credentials exist, and each vLLM pod copies its checkpoint from the read-only claim
    assert not [r for r in plan.resources if r.type == "kubernetes:core/v1:Secret" and r.name == "model-store"]
    (deployment,) = [d for d in by_kind(plan, "Deployment") if d["metadata"]["name"] == "llama-8b"]
    pod = deployment["spec"]["template"]["spec"]
    (store,) = [v for v in pod["volumes"] if v["name"] == "model-store"]
    assert store["persistentVolumeClaim"] == {"claimName": "models-nfs", "readOnly": True}
    (copy,) = pod["initContainers"]
    script = copy["command"][-1]
    assert "/mnt/model-store/meta-llama/Llama-3.1-8B-Instruct/hf/." in script and ".inferstack-copied" in script
    assert {"name": "model-store", "mountPath": "/mnt/model-store", "readOnly": True} in copy["volumeMounts"]
    assert "env" not in copy  # no S3 endpoint, no keys


def test_the_edge_sites_hub_receives_their_forwarded_metrics(plan_of: PlanOf) -> None:
    # GIVEN the on-prem stack, the bundled edge site's hub, whose remoteWrite posts to this Prometheus
    onprem = release_values(plan_of("onprem"), "kube-prometheus-stack")["prometheus"]["prometheusSpec"]
    # THEN its Prometheus serves /api/v1/write (off by default in kube-prometheus-stack 88.0.0)
    assert onprem["enableRemoteWriteReceiver"] is True
    # AND a stack that is nobody's hub keeps it off
    prod = release_values(plan_of("prod"), "kube-prometheus-stack")["prometheus"]["prometheusSpec"]
    assert "enableRemoteWriteReceiver" not in prod


@pytest.mark.parametrize("stack", ["onprem", "prod"])
def test_a_hub_stack_that_forwards_its_metrics_labels_them_with_its_site(tmp_path: Any, stack: str) -> None:
    # GIVEN an on-prem or cloud stack that forwards its samples to another hub's receiver (observability.remoteWrite)
    def forwards(env: dict[str, Any]) -> None:
        env.setdefault("observability", {})["remoteWrite"] = {"url": "https://prometheus.hq.example.com/api/v1/write"}

    prometheus = release_values(plan_with(tmp_path, stack, forwards), "kube-prometheus-stack")["prometheus"]
    # THEN every sample leaves labelled with its stack, as an edge site's do: the receiving hub's alerts and KEDA
    # triggers read only series without inferstack_site, so unlabelled ones would pass for the receiver's own (this
    # stack's queue depth scaling the hub's same-named model in the same namespace)
    assert prometheus["prometheusSpec"]["remoteWrite"][0]["url"] == "https://prometheus.hq.example.com/api/v1/write"
    assert prometheus["prometheusSpec"]["externalLabels"] == {"inferstack_site": f"{stack}x"}
    # AND a stack that forwards nothing renders no external label (the bundled one, unchanged)
    bundled = release_values(plan_with(tmp_path, stack, lambda env: None), "kube-prometheus-stack")["prometheus"]
    assert "externalLabels" not in bundled["prometheusSpec"]


def _one(items: Any) -> Any:
    found = list(items)
    assert len(found) == 1, found
    return found[0]


def _rules(plan: Plan) -> list[dict[str, Any]]:
    return [r for g in _one(by_kind(plan, "PrometheusRule"))["spec"]["groups"] for r in g["rules"]]


def test_every_availability_alert_reads_the_workload_that_serves_the_model(plan_of: PlanOf) -> None:
    # GIVEN the bundled on-prem stack: two model Deployments, the gateway's, and the 405B model in a LeaderWorkerSet
    plan = plan_of("onprem")
    deployments = {
        m["metadata"]["name"]
        for m in by_kind(plan, "Deployment")
        if m["metadata"]["namespace"] in ("inferstack-serving", "inferstack-gateway")
    }
    assert "gateway" in deployments
    groups = {m["metadata"]["name"] for m in by_kind(plan, "LeaderWorkerSet")}
    assert "llama-405b" in groups
    # WHEN its availability alerts are rendered
    unavailable = {
        r["labels"]["inferstack_model"]: r["expr"]
        for r in _rules(plan)
        if r.get("alert") == "InferstackModelUnavailable"
    }
    # THEN the LeaderWorkerSet's is read from its leader StatefulSet, which the LWS controller names after it
    # (kubernetes-sigs/lws v0.10.0, leaderworkerset_controller.go: appsapplyv1.StatefulSet(lws.Name, ...)), and no
    # rule reads a kube-state-metrics series of a Deployment or StatefulSet the stack does not create
    assert unavailable["llama-405b"] == (
        '(kube_statefulset_status_replicas_ready{namespace="inferstack-serving",inferstack_site="",'
        'statefulset="llama-405b"} == 0) and '
        '(kube_statefulset_replicas{namespace="inferstack-serving",inferstack_site="",statefulset="llama-405b"} > 0)'
    )
    exprs = " ".join(r["expr"] for r in _rules(plan))
    assert set(re.findall(r'deployment="([^"]+)"', exprs)) == deployments
    assert set(re.findall(r'statefulset="([^"]+)"', exprs)) == groups


def test_the_triton_ttft_slo_reads_a_series_that_exists(plan_of: PlanOf) -> None:
    # GIVEN the bundled on-prem stack, whose llama-70b runs on Triton behind its OpenAI frontend (r25.09), which
    # has no flag for --metrics-config histogram_latencies=true, so nv_inference_first_response_histogram_ms is
    # never exported
    plan = plan_of("onprem")
    triton = _one(m for m in by_kind(plan, "Deployment") if m["metadata"]["name"] == "llama-70b")
    assert not any("metrics-config" in arg for arg in triton["spec"]["template"]["spec"]["containers"][0]["command"])
    # WHEN the rules are rendered
    rules = _rules(plan)
    # THEN no rule reads the first-response histogram, and the model's TTFT p99 comes from the gateway's
    # per-upstream histogram, on the upstream the gateway config names after the model, in the namespace the
    # gateway's ServiceMonitor scrapes
    assert not [r for r in rules if "nv_inference_first_response" in r["expr"]]
    recorded = _one(
        r
        for r in rules
        if r.get("record") == "inferstack_model:ttft_seconds:p99_rate5m"
        and r["labels"].get("inferstack_model") == "llama-70b"
    )
    assert recorded["expr"] == (
        "histogram_quantile(0.99, sum by (le) (rate(inferstack_gateway_upstream_ttft_seconds_bucket"
        '{namespace="inferstack-gateway",upstream="llama-70b",inferstack_site=""}[5m])))'
    )
    assert recorded["labels"] == {
        "engine": "triton",
        "source": "gateway",
        "namespace": "inferstack-serving",
        "inferstack_model": "llama-70b",
    }
    config = yaml.safe_load(
        _one(m for m in by_kind(plan, "ConfigMap") if m["metadata"]["name"] == "gateway-config")["data"]["gateway.yaml"]
    )
    assert "llama-70b" in config["upstreams"]
    monitor = _one(m for m in by_kind(plan, "ServiceMonitor") if m["metadata"]["name"] == "inferstack-gateway")
    assert monitor["metadata"]["namespace"] == "inferstack-gateway"
    burn = _one(r for r in rules if r.get("alert") == "InferstackTTFTSLOBurn" and '"llama-70b"' in r["expr"])
    assert burn["expr"].startswith('inferstack_model:ttft_seconds:p99_rate5m{namespace="inferstack-serving",')


def _selects(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    """A LabelSelector's matchLabels and its In/NotIn/Exists/DoesNotExist expressions, as the API server reads them."""
    if any(pod_labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in pod_labels, pod_labels.get(e["key"])
        holds = {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]
        if not holds:
            return False
    return True


def test_a_models_disruption_budget_selects_its_servers_and_not_its_engine_build(plan_of: PlanOf) -> None:
    # GIVEN the on-prem plan, whose Triton model has an engine-build Job labelled like the model's servers, and the
    # pods' labels as Kubernetes sets them (the Job controller adds batch.kubernetes.io/job-name to a Job's pods)
    objects = manifests(plan_of("onprem"))
    job = next(m for m in objects if m["kind"] == "Job" and m["metadata"]["name"] == "llama-70b-engine-build")
    build_pod = {
        **job["spec"]["template"]["metadata"]["labels"],
        "batch.kubernetes.io/job-name": "llama-70b-engine-build",
    }
    server = next(m for m in objects if m["kind"] == "Deployment" and m["metadata"]["name"] == "llama-70b")
    server_pod = server["spec"]["template"]["metadata"]["labels"]
    # WHEN the model's PodDisruptionBudget selects pods
    budget = next(m for m in objects if m["kind"] == "PodDisruptionBudget" and m["metadata"]["name"] == "llama-70b")
    selector = budget["spec"]["selector"]
    # THEN it takes the servers and leaves out the build pod: a Job has no scale subresource, and a budget selecting
    # one fails to sync with disruptionsAllowed 0, blocking every drain of the model's nodes
    assert _selects(selector, server_pod)
    assert not _selects(selector, build_pod)


def test_with_the_clusters_own_network_operator_the_kit_installs_neither_it_nor_a_policy(tmp_path: Any) -> None:
    # GIVEN the bundled stack on a cluster that already runs a Network Operator
    plan = plan_with(tmp_path, "onprem", lambda env: env["networkOperator"].update(install=False))
    # WHEN planned THEN it plans clean, with no network-operator release and no NicClusterPolicy of the kit's
    assert plan.violations == []
    releases = {r.inputs["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    assert "network-operator" not in releases and "gpu-operator" in releases
    assert by_kind(plan, "NicClusterPolicy") == []
    # AND the multi-node group's ranks still request the RDMA resource the cluster's operator advertises
    (group,) = by_kind(plan, "LeaderWorkerSet")
    worker = group["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1


def _serving_cpus(plan: Plan) -> dict[str, str]:
    """Each serving container's CPU request, by its pod template's owner name."""
    out: dict[str, str] = {}
    for m in manifests(plan):
        if m["kind"] == "Deployment" and m["metadata"]["namespace"] == "inferstack-serving":
            templates = {m["metadata"]["name"]: m["spec"]["template"]}
        elif m["kind"] == "LeaderWorkerSet":
            lws = m["spec"]["leaderWorkerTemplate"]
            templates = {f"{m['metadata']['name']}/{role}": lws[role] for role in ("leaderTemplate", "workerTemplate")}
        else:
            continue
        for name, template in templates.items():
            out[name] = template["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    return out


def test_a_pools_stated_cpus_bound_what_its_serving_pods_request(plan_of: PlanOf, tmp_path: Any) -> None:
    # GIVEN the bundled stack, whose servers' CPUs are unstated: 8 per GPU (the 8B on one H100, the 405B on 8 a rank)
    default = _serving_cpus(plan_of("onprem"))
    assert (default["llama-8b"], default["llama-405b/workerTemplate"]) == ("8", "64")
    # WHEN the H100 servers are stated to have 48 logical CPUs
    plan = plan_with(tmp_path, "onprem", lambda env: env["gpuPools"][0].update(cpus=48))
    # THEN each pod on them requests at most 3/4 of its GPUs' share (48 x 1/8 x 3/4 = 4; 48 x 8/8 x 3/4 = 36), so it
    # schedules on them; the H200 pool's pods keep 8 per GPU
    bounded = _serving_cpus(plan)
    assert (bounded["llama-8b"], bounded["llama-405b/workerTemplate"]) == ("4", "36")
    assert bounded["llama-70b"] == default["llama-70b"]


def _mandatory(violations: list[dict[str, Any]]) -> list[str]:
    return [f"{v['policy']}: {v['message']}" for v in violations if v["enforcement"] == "mandatory"]


@pytest.mark.parametrize(
    "load_balancer", [{"kind": "existing"}, {"kind": "existing", "loadBalancerClass": "kube-vip.io/kube-vip-class"}]
)
def test_the_clusters_own_load_balancer_serves_the_gateway_in_the_plan_and_under_pulumi_preview(
    tmp_path: Any, load_balancer: dict[str, str]
) -> None:
    # GIVEN the bundled stack on a cluster that runs its own load balancer (kube-vip, say), serving Services without a
    # class or those of the class the config names
    plan = plan_with(tmp_path, "onprem", lambda env: env.update(loadBalancer=load_balancer))
    # THEN the gateway's LoadBalancer Service asks for that class
    (service,) = [s for s in by_kind(plan, "Service") if s["metadata"]["name"] == "gateway-lb"]
    assert service["spec"].get("loadBalancerClass") == load_balancer.get("loadBalancerClass")
    # AND the policy pack finds it served, both as `inferstack plan` runs it (with the stack's config) and as
    # `pulumi preview --policy-pack` runs it (resources only, no config)
    assert _mandatory(check_plan(plan.resources, plan.tier, plan.environment, plan.outputs)) == []
    resources = plan.to_json()["resources"]
    assert _mandatory(check_stack(resources)) == []
    # AND a Service of a class the cluster's load balancer does not serve is still refused
    lb = next(r for r in resources if r["type"] == "kubernetes:core/v1:Service" and r["name"] == "gateway-lb")
    lb["inputs"]["spec"]["loadBalancerClass"] = "other.example.com/lb"
    (found,) = _mandatory(check_stack(resources))
    assert found.startswith("stack-load-balancer-controller: Service inferstack-gateway/gateway-lb")
    # AND its fix is the on-prem tier's (the config's load balancer), not the AWS controller
    assert "Fix: set loadBalancer.kind: metallb, or kind: existing with the loadBalancerClass" in found
    assert "aws-load-balancer-controller" not in found


def test_every_gpu_pod_tolerates_the_gpu_taint_whatever_value_the_clusters_servers_carry(plan_of: PlanOf) -> None:
    """An existing cluster's admin taints the GPU servers as they like (nvidia.com/gpu=present, or no value); every
    pod that asks for a GPU still schedules there. A toleration of the value "true" only left the models Pending."""
    from policies.model import Taint, tolerated

    pods = []
    for m in manifests(plan_of("onprem")):
        if m["kind"] in ("Deployment", "Job"):
            pods.append((m["metadata"]["name"], m["spec"]["template"]["spec"]))
        elif m["kind"] == "LeaderWorkerSet":
            template = m["spec"]["leaderWorkerTemplate"]
            pods += [(m["metadata"]["name"], template[t]["spec"]) for t in ("leaderTemplate", "workerTemplate")]
    gpu_pods = [
        (name, spec)
        for name, spec in pods
        if any(
            "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
            for c in [*spec.get("initContainers", []), *spec["containers"]]
        )
    ]
    assert {name for name, _ in gpu_pods} >= {"llama-8b", "llama-70b", "llama-70b-engine-build", "llama-405b"}
    for value in ("true", "present", ""):
        taint = Taint("nvidia.com/gpu", value, "NoSchedule")
        assert all(tolerated(taint, spec.get("tolerations") or []) for _, spec in gpu_pods), value
