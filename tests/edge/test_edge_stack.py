"""The edge tier as planned from the bundled ``edge`` stack: one k3s site with an L4, a hub, a small cache."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from components.edge.budget import site_demand
from components.edge.specs import K3S_TRAEFIK_PORTS
from components.kube.requests import Requests, container_requests
from helpers import ROOT, config_errors, plan_with, raw_environment
from inferstack_cli import render
from inferstack_cli.mocks import PLACEHOLDER_HOST
from inferstack_cli.plan import Plan, run_plan
from stacks.environment import EdgeEnvironment, load_environment
from stacks.tiers import EDGE

PlanOf = Callable[[str], Plan]


def manifests(plan: Plan) -> list[dict[str, Any]]:
    return [yaml.safe_load(t) for p, t in render.renders(plan.resources).items() if p.startswith("manifests/")]


def by_kind(plan: Plan, kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests(plan) if m["kind"] == kind]


def named(plan: Plan, kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in by_kind(plan, kind) if m["metadata"]["name"] == name]
    return found


def releases(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r.inputs["name"]: r.inputs.get("values") or {} for r in plan.of_type("kubernetes:helm.sh/v3:Release")}


def gateway_config(plan: Plan) -> dict[str, Any]:
    return yaml.safe_load(named(plan, "ConfigMap", "gateway-config")["data"]["gateway.yaml"])


def test_edge_plans_fast_with_no_aws_resource() -> None:
    # GIVEN the bundled edge stack WHEN planned from scratch THEN it is quick and nothing is on AWS
    started = time.perf_counter()
    plan = run_plan("edge")
    assert time.perf_counter() - started < 5
    assert plan.tier == "edge"
    assert [r.type for r in plan.resources if r.type.startswith("aws:")] == []
    assert plan.violations == []


def test_the_edge_tier_never_imports_pulumi_aws() -> None:
    code = (
        "import sys\n"
        "from inferstack_cli.plan import run_plan\n"
        "run_plan('edge')\n"
        "print(sorted(m for m in sys.modules if m == 'pulumi_aws' or m.startswith('pulumi_aws.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_plan_cli_exits_0_on_the_bundled_edge_stack() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "inferstack_cli.main", "plan", "--stack", "edge"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "Site nodes:" in out.stdout and "store-0042" in out.stdout
    # AND the models table gives the embedding model on the node's CPU its RAM, not a GPU's memory, and no ITL floor
    # (it streams no tokens), while the chat model on the L4 keeps both
    models = out.stdout.split("\nModels:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "memory need/usable" in models[0] and "GPU mem" not in models[0]
    (minilm,) = [row for row in models if row.startswith("minilm ")]
    (llama,) = [row for row in models if row.startswith("llama-3b ")]
    assert re.search(r" 0\.0\d/62 GB RAM +- \(embeddings\) ", minilm), minilm
    assert re.search(r" \d\.\d/22 GB per GPU +\d+\.\d ms \(target 20\) ", llama), llama


def test_one_explicit_provider_from_a_secret_kubeconfig(plan_of: PlanOf) -> None:
    plan = plan_of("edge")
    (provider,) = plan.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"
    assert provider.inputs["context"] == "default"


def test_the_3b_model_runs_llama_server_on_the_l4_under_the_nvidia_runtime(plan_of: PlanOf) -> None:
    pod = named(plan_of("edge"), "Deployment", "llama-3b")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    (server,) = pod["containers"]
    assert server["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-cuda-b")
    assert server["resources"]["limits"]["nvidia.com/gpu"] == 1
    args = server["args"]
    assert args[args.index("-m") + 1].endswith(
        "/meta-llama/Llama-3.2-3B-Instruct/gguf/Llama-3.2-3B-Instruct-Q4_K_M.gguf"
    )
    assert args[args.index("--n-gpu-layers") + 1] == "999"
    assert server["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    (fetch,) = pod["initContainers"]
    assert fetch["args"][-2:] == ["--include", "Llama-3.2-3B-Instruct-Q4_K_M.gguf"]
    assert "s3://models/meta-llama/Llama-3.2-3B-Instruct/gguf" in fetch["args"]
    # The model cache is a local-path volume bound on the pod's node.
    (cache,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    assert cache["ephemeral"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "local-path"


def test_the_embedder_runs_on_cpu_and_feeds_the_semantic_cache(plan_of: PlanOf) -> None:
    plan = plan_of("edge")
    pod = named(plan, "Deployment", "minilm")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in pod
    (server,) = pod["containers"]
    assert server["image"].startswith("ghcr.io/ggml-org/llama.cpp:server-b")
    assert "nvidia.com/gpu" not in server["resources"]["limits"]
    assert "--embeddings" in server["args"]
    config = gateway_config(plan)
    assert config["embeddings"] == {
        "url": "http://minilm.inferstack-serving.svc:8080/v1",
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "dimensions": 384,
        "max_input_tokens": 256,
    }
    assert config["models"]["chat"]["cache"]["semantic"]["enabled"] is True
    assert "minilm" not in config["upstreams"]


def test_prompts_longer_than_the_embedders_window_skip_the_semantic_cache(plan_of: PlanOf) -> None:
    # GIVEN the bundled embedder: all-MiniLM-L6-v2 on llama.cpp, whose batch (and the model's positions) hold 512
    # tokens; llama.cpp answers a longer input with an error, and the gateway then skips every semantic lookup for 1 s
    plan = plan_of("edge")
    (server,) = named(plan, "Deployment", "minilm")["spec"]["template"]["spec"]["containers"]
    per_slot = int(server["args"][server["args"].index("--ctx-size") + 1]) // int(
        server["args"][server["args"].index("--parallel") + 1]
    )
    # THEN the gateway is told the model's window (256 word pieces, as its model card truncates), within the server's
    window = gateway_config(plan)["embeddings"]["max_input_tokens"]
    assert window == 256 and window < per_slot == 512


def test_k3s_builtins_are_used_not_duplicated(plan_of: PlanOf) -> None:
    plan = plan_of("edge")
    installed = releases(plan)
    assert "metrics-server" not in installed and "keda" not in installed and "lws" not in installed
    assert installed["nvidia-device-plugin"]["runtimeClassName"] == "nvidia"
    assert installed["dcgm-exporter"]["runtimeClassName"] == "nvidia"
    gateway = named(plan, "Service", "gateway-lb")  # the in-cluster `gateway` Service stays ClusterIP
    assert gateway["spec"]["type"] == "LoadBalancer"
    assert "loadBalancerClass" not in gateway["spec"] and not gateway["metadata"].get("annotations")
    assert gateway["spec"]["loadBalancerSourceRanges"] == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    (redis,) = by_kind(plan, "StatefulSet")
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] == "local-path"
    prometheus = installed["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]
    assert prometheus["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "local-path"


def test_metrics_stay_two_days_and_go_to_the_hub(plan_of: PlanOf) -> None:
    values = releases(plan_of("edge"))["kube-prometheus-stack"]
    prometheus = values["prometheus"]["prometheusSpec"]
    assert prometheus["retention"] == "2d" and prometheus["retentionSize"] == "4GiB"
    (target,) = prometheus["remoteWrite"]
    assert target["url"] == "https://prometheus.dc1.example.com/api/v1/write"
    assert [step["action"] for step in target["writeRelabelConfigs"]] == ["keep"]  # what the hub's dashboards draw
    assert prometheus["externalLabels"] == {"inferstack_site": "edge"}
    assert values["kubeEtcd"] == {"enabled": False}


def test_llama_server_is_scraped_and_the_dashboards_are_the_same(plan_of: PlanOf) -> None:
    edge = plan_of("edge")
    monitors = {m["metadata"]["name"] for m in by_kind(edge, "PodMonitor")}
    assert "inferstack-llamacpp" in monitors
    dashboards = {m["metadata"]["name"] for m in by_kind(edge, "ConfigMap") if "grafana_dashboard" in str(m)}
    cloud = {m["metadata"]["name"] for m in by_kind(plan_of("prod"), "ConfigMap") if "grafana_dashboard" in str(m)}
    assert dashboards == cloud
    assert by_kind(edge, "ScaledObject") == []  # fixed replicas at a site


def test_the_hub_resolves_offline_to_marked_placeholders_and_complex_prompts_go_there(plan_of: PlanOf) -> None:
    plan = plan_of("edge")
    (ref,) = plan.of_type("pulumi:pulumi:StackReference")
    assert ref.inputs["name"] == "organization/inferstack/onprem"
    config = gateway_config(plan)
    hub = config["upstreams"]["hub"]
    assert PLACEHOLDER_HOST in hub["url"]
    assert hub["api_key"] == "${HUB_API_KEY}" and hub["model"] == "chat"
    assert config["models"]["chat"]["complexity"][0]["tier"] == "hub"
    assert config["tiers"]["llama-3b"]["upstreams"] == ["llama-3b", "hub"]  # fallback when the local model fails
    (container,) = named(plan, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["HUB_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "gateway-hub", "key": "api-key"}
    # the hub's /v1 as README's outputs table says, in the clear (it is no secret: the key is)
    assert plan.outputs["hub_url"] == f"https://{PLACEHOLDER_HOST}/organization/inferstack/onprem/v1"


def test_a_cpu_only_site_has_no_device_plugin_and_no_gpu_requests(tmp_path: Any) -> None:
    def cpu_site(env: dict[str, Any]) -> None:
        env["nodes"] = [{"name": "store-0042", "cpu": 16, "memoryGib": 32}]
        env["models"][0]["slo"] = {"itlP99Ms": 60}

    plan = plan_with(tmp_path, "edge", cpu_site)
    installed = releases(plan)
    assert "nvidia-device-plugin" not in installed and "dcgm-exporter" not in installed
    for deployment in by_kind(plan, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert "runtimeClassName" not in pod
        for container in pod["containers"]:
            assert "nvidia.com/gpu" not in str(container.get("resources"))
    server = named(plan, "Deployment", "llama-3b")["spec"]["template"]["spec"]["containers"][0]
    assert server["args"][server["args"].index("--n-gpu-layers") + 1] == "0"


def test_two_chat_models_on_one_cpu_node_share_its_decode_threads(tmp_path: Any) -> None:
    # GIVEN a CPU-only node of 32 cores serving two chat models (and the embedder): each server used to take half the
    # node's cores, so two of them asked for all 32 and no node, however large, could hold both
    def two_on_cpu(env: dict[str, Any]) -> None:
        # 100 GB/s of memory bandwidth: two decoders share it (llama-3b's 2.02 GB per token at 50 GB/s: 40 ms)
        env["nodes"] = [{"name": "store-0042", "cpu": 32, "memoryGib": 64, "memoryBandwidthGbS": 100}]
        env["models"][0]["slo"] = {"itlP99Ms": 60}
        qwen = {"name": "qwen", "model": "Qwen/Qwen2.5-1.5B-Instruct", "slo": {"itlP99Ms": 60}}
        env["models"].append(dict(env["models"][0], **qwen))

    plan = plan_with(tmp_path, "edge", two_on_cpu)
    # THEN the plan succeeds, and the two CPU decoders split the half of the cores decoding gets: 8 threads each,
    # each requesting the cores its threads use
    for name in ("llama-3b", "qwen"):
        server = named(plan, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]
        assert server["args"][server["args"].index("--threads") + 1] == "8"
        assert server["resources"]["requests"]["cpu"] == "8"
    # AND the embedder keeps its own two threads
    embedder = named(plan, "Deployment", "minilm")["spec"]["template"]["spec"]["containers"][0]
    assert embedder["args"][embedder["args"].index("--threads") + 1] == "2"


def test_cpu_decoders_sharing_a_node_are_held_to_their_share_of_its_memory_bandwidth(tmp_path: Any) -> None:
    # GIVEN the same two chat models on a node of 50 GB/s (the default): alone, llama-3b Q4_K_M reads 2.02 GB per
    # token in 40 ms, under its 60 ms target; decoding beside qwen, each gets half the bandwidth
    def two_on_cpu(env: dict[str, Any]) -> None:
        env["nodes"] = [{"name": "store-0042", "cpu": 32, "memoryGib": 64}]
        env["models"][0]["slo"] = {"itlP99Ms": 60}
        qwen = {"name": "qwen", "model": "Qwen/Qwen2.5-1.5B-Instruct", "slo": {"itlP99Ms": 60}}
        env["models"].append(dict(env["models"][0], **qwen))

    # THEN llama-3b is refused at its target: 2.02 GB at 25 GB/s is 80.8 ms; qwen (1.12 GB, 44.8 ms) is not
    (line,) = config_errors(two_on_cpu, stack="edge")
    assert (
        "models[0].slo.itlP99Ms: got 60 ms for llama-3b on the CPU of store-0042, shared by 2 decoding servers" in line
    )
    assert "80.8 ms (2.02 GB read per token at 25 GB/s" in line


def test_a_hub_by_url_reads_its_key_from_a_secret_config_value(tmp_path: Any) -> None:
    def by_url(env: dict[str, Any]) -> None:
        env["hub"] = {"url": "https://gateway.dc1.example.com/v1", "apiKeySecret": "hubApiKey"}

    plan = plan_with(tmp_path, "edge", by_url)
    assert plan.of_type("pulumi:pulumi:StackReference") == []
    assert gateway_config(plan)["upstreams"]["hub"]["url"] == "https://gateway.dc1.example.com/v1"
    (secret,) = [r for r in plan.of_type("kubernetes:core/v1:Secret") if r.name == "gateway-hub"]
    assert secret.inputs["stringData"] == "[secret]"


def test_the_gateways_site_port_is_off_the_ports_k3s_traefik_holds(plan_of: PlanOf) -> None:
    # GIVEN a default k3s install, whose Traefik holds host ports 80 and 443 through ServiceLB
    # WHEN the bundled edge stack is planned
    (port,) = named(plan_of("edge"), "Service", "gateway-lb")["spec"]["ports"]
    # THEN the gateway's LoadBalancer port is one ServiceLB can still bind, forwarded to the gateway's API port
    assert port["port"] == 8080 and port["port"] not in K3S_TRAEFIK_PORTS
    assert port["targetPort"] == "http"


def test_a_site_that_disabled_traefik_may_take_port_80(tmp_path: Any) -> None:
    plan = plan_with(tmp_path, "edge", lambda env: env["gateway"].update(loadBalancerPort=80))
    (port,) = named(plan, "Service", "gateway-lb")["spec"]["ports"]
    assert port["port"] == 80


def test_a_rollout_on_a_one_gpu_site_replaces_the_pod_instead_of_waiting_for_a_second_gpu(plan_of: PlanOf) -> None:
    # GIVEN the bundled site: one L4, and llama-3b holds it with one replica
    plan = plan_of("edge")
    for name in ("llama-3b", "minilm"):
        strategy = named(plan, "Deployment", name)["spec"]["strategy"]
        # THEN a rollout never asks for a pod beyond the replicas (it would stay Pending for a GPU no node has)
        assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_the_node_budget_holds_the_replicas_alone_since_a_rollout_adds_no_pod() -> None:
    # GIVEN the bundled site: one L4 and one replica of the GPU model
    env = load_environment(raw_environment("edge"), "stacks/Pulumi.edge.yaml")
    assert isinstance(env, EdgeEnvironment)
    demand = {d.name: d for d in site_demand(env.nodes, env.models, env.cache, env.gateway, env.observability,
                                             rollout_surge=EDGE.grows_nodes)}  # fmt: skip
    # THEN the budget counts exactly the replicas: the one GPU suffices, and the site plans (test above)
    assert demand["llama-3b"].pods == 1 and demand["llama-3b"].total.gpus == 1
    # AND a tier whose nodes grew would have to hold the rollout's extra pod too
    surging = site_demand(env.nodes, env.models, env.cache, env.gateway, env.observability, rollout_surge=True)
    assert {d.name: d.pods for d in surging}["llama-3b"] == 2


def test_the_node_budget_holds_the_gateways_rollout_pod_at_its_most_replicas(plan_of: PlanOf) -> None:
    # The gateway's CPU pods surge in a rollout (it never drops below its serving count): at maxReplicas the site
    # must hold one more, or the rollout waits for room that a fixed site never gets.
    env = load_environment(raw_environment("edge"), "stacks/Pulumi.edge.yaml")
    assert isinstance(env, EdgeEnvironment)
    demand = {d.name: d for d in site_demand(env.nodes, env.models, env.cache, env.gateway, env.observability,
                                             rollout_surge=EDGE.grows_nodes)}  # fmt: skip
    strategy = named(plan_of("edge"), "Deployment", "gateway")["spec"]["strategy"]
    assert demand["gateway"].pods == env.gateway.max_replicas + strategy["rollingUpdate"]["maxSurge"]


def test_the_node_budget_counts_each_gpu_nodes_dcgm_exporter_and_the_config_reloaders(plan_of: PlanOf) -> None:
    # GIVEN the bundled site: one node with an L4, so one DCGM exporter pod (a DaemonSet) runs there
    plan = plan_of("edge")
    installed = releases(plan)
    exporter = installed["dcgm-exporter"]["resources"]
    reloader = installed["kube-prometheus-stack"]["prometheusOperator"]["prometheusConfigReloader"]["resources"]
    # THEN what the charts render is their own default, written out (the chart requests CPU and memory for it)
    chart = yaml.safe_load((ROOT / "tests/charts/dcgm-exporter-4.8.2.values.yaml").read_text())
    assert exporter == chart["resources"]
    # AND the budget counts the exporter on that node and the reloader in the Prometheus and Alertmanager pods
    env = load_environment(raw_environment("edge"), "stacks/Pulumi.edge.yaml")
    assert isinstance(env, EdgeEnvironment)
    demand = site_demand(env.nodes, env.models, env.cache, env.gateway, env.observability, rollout_surge=False)
    (dcgm,) = [d for d in demand if d.name == "dcgm-exporter"]
    assert (dcgm.node, dcgm.pods, dcgm.per_pod) == ("store-0042", 1, container_requests({"resources": exporter}))
    by_name = {d.name: d.per_pod for d in demand}
    assert by_name["alertmanager"] == container_requests({"resources": reloader}) == Requests(10, 50 * 2**20)
    prometheus = releases(plan)["kube-prometheus-stack"]["prometheus"]["prometheusSpec"]["resources"]
    assert by_name["prometheus"] == container_requests({"resources": prometheus}) + by_name["alertmanager"]


def test_a_cpu_only_site_counts_no_dcgm_exporter() -> None:
    env = load_environment(raw_environment("edge"), "stacks/Pulumi.edge.yaml")
    assert isinstance(env, EdgeEnvironment)
    cpu_only = tuple(n.model_copy(update={"gpu": None}) for n in env.nodes)
    demand = site_demand(cpu_only, (), env.cache, env.gateway, env.observability, rollout_surge=False)
    assert "dcgm-exporter" not in {d.name for d in demand}


def test_a_one_replica_model_lets_a_drain_evict_it(plan_of: PlanOf) -> None:
    # GIVEN one replica: minAvailable 50% would round up to 1 and block `kubectl drain` for ever
    budget = named(plan_of("edge"), "PodDisruptionBudget", "llama-3b")["spec"]
    assert budget["maxUnavailable"] == 1 and "minAvailable" not in budget


def test_the_bundled_spillover_threshold_fills_llama_cpps_slots_exactly(plan_of: PlanOf) -> None:
    # GIVEN the bundled site: llama.cpp's slots as rendered (--parallel) and the gateway at its most replicas
    plan = plan_of("edge")
    (server,) = named(plan, "Deployment", "llama-3b")["spec"]["template"]["spec"]["containers"]
    slots = int(server["args"][server["args"].index("--parallel") + 1])
    gateway = raw_environment("edge")["gateway"]
    spillover = gateway_config(plan)["tiers"]["llama-3b"]["spillover"]
    # THEN each gateway replica spills once its share of the slots is busy: no request waits for a slot locally
    assert spillover["spill_above_inflight"] * gateway["maxReplicas"] == slots == 4


def test_with_a_tls_secret_the_site_gateway_serves_https_on_every_port(tmp_path: Any) -> None:
    # GIVEN a site that gives its gateway a kubernetes.io/tls Secret (its load balancer forwards TCP, no more)
    plan = plan_with(tmp_path, "edge", lambda env: env["gateway"].update(tlsSecret="gateway-tls"))
    # THEN the gateway mounts it and serves HTTPS with it
    server = gateway_config(plan)["server"]
    assert server["tls_cert_file"] == "/etc/inferstack/tls/tls.crt"
    assert server["tls_key_file"] == "/etc/inferstack/tls/tls.key"
    pod = named(plan, "Deployment", "gateway")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert {"name": "tls", "secret": {"secretName": "gateway-tls"}} in pod["volumes"]
    assert {"name": "tls", "mountPath": "/etc/inferstack/tls", "readOnly": True} in container["volumeMounts"]
    # AND the kubelet probes it, and Prometheus scrapes it, over TLS; in-cluster clients reach it on 443
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (monitor,) = [m for m in by_kind(plan, "ServiceMonitor") if m["metadata"]["name"] == "inferstack-gateway"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"] == {"insecureSkipVerify": True}
    assert named(plan, "Service", "gateway")["spec"]["ports"][0]["port"] == 443
    assert plan.outputs["gateway_url"] == "https://gateway.inferstack-gateway.svc/v1"
    # AND without one, nothing of it is rendered (the bundled site)
    bundled = run_plan("edge")
    assert "tls_cert_file" not in gateway_config(bundled)["server"]
    assert "scheme" not in named(bundled, "Deployment", "gateway")["spec"]["template"]["spec"]["containers"][0][
        "readinessProbe"]["httpGet"]  # fmt: skip


def test_every_pod_that_asks_for_a_gpu_runs_under_k3s_nvidia_runtime(tmp_path: Any) -> None:
    # GIVEN a site serving Llama 3.1 8B with Triton on an RTX 6000 Ada: the server needs a TensorRT-LLM engine, which
    # a Job quantizes and builds on the node's GPU before the server starts
    def triton_site(env: dict[str, Any]) -> None:
        env["nodes"][0]["gpu"] = "RTX6000Ada"
        triton = {"name": "llama-8b", "model": "meta-llama/Llama-3.1-8B-Instruct", "engine": "triton"}
        env["models"][0] = {**triton, "pool": "store-0042", "replicas": 1, "slo": {"itlP99Ms": 100}}
        env["gateway"]["routes"][0]["small"] = "llama-8b"

    plan = plan_with(tmp_path, "edge", triton_site)
    pods = {m["metadata"]["name"]: m["spec"]["template"]["spec"] for m in by_kind(plan, "Deployment")}
    pods |= {m["metadata"]["name"]: m["spec"]["template"]["spec"] for m in by_kind(plan, "Job")}
    containers = {name: [*pod["containers"], *pod.get("initContainers", [])] for name, pod in pods.items()}
    wanting = {name for name, cs in containers.items() if any("nvidia.com/gpu" in c["resources"]["limits"] for c in cs)}
    # THEN both the server and the build Job take a GPU, and both run under k3s's nvidia RuntimeClass: with runc, k3s's
    # default, the container gets no driver and no device, and the build fails before the server ever starts
    assert wanting == {"llama-8b", "llama-8b-engine-build"}
    assert {name: pods[name].get("runtimeClassName") for name in wanting} == dict.fromkeys(wanting, "nvidia")
