"""Bad edge config: one clear line per problem (key path, value, allowed, fix), exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, config_errors, refused_by_plan

SOURCE = "stacks/Pulumi.edge.yaml"


def errors(edit: Any) -> list[str]:
    return config_errors(edit, stack="edge")


def test_a_cloud_gpu_on_an_edge_node_points_at_the_onprem_tier() -> None:
    (line,) = errors(lambda e: e["nodes"][0].update(gpu="H100"))
    assert line.startswith(f"{SOURCE}: inferstack:environment.nodes[0].gpu: got 'H100' (a data-centre GPU")
    assert "allowed: L4, RTX4000Ada, RTX6000Ada" in line and "tier: onprem" in line


def test_a_cloud_instance_type_on_the_edge_tier_is_refused_by_name() -> None:
    (line,) = errors(lambda e: e["nodes"][0].update(instanceType="g6.xlarge"))
    assert "inferstack:environment.nodes[0].instanceType: got 'g6.xlarge' on tier edge" in line
    assert "name the node's GPU with nodes[].gpu" in line


def test_cloud_gpu_pools_on_the_edge_tier_are_refused_by_name() -> None:
    (line,) = errors(lambda e: e.update(gpuPools=[{"name": "g", "instanceType": "p5.48xlarge"}]))
    assert "inferstack:environment.gpuPools: got" in line and "on tier edge" in line
    assert "describe the site in nodes[]" in line


def test_on_prem_system_nodes_on_the_edge_tier_are_refused_by_name() -> None:
    (line,) = errors(lambda e: e.setdefault("cluster", {}).update(systemNodes={"count": 1, "cpu": 8, "memoryGib": 32}))
    assert "inferstack:environment.cluster.systemNodes: got" in line and "on tier edge" in line
    assert "describe the site in nodes[]" in line


def test_a_model_that_does_not_fit_the_sites_gpu() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["nodes"][0]["gpu"] = "RTX4000Ada"
        env["models"][0].update(model="microsoft/Phi-3-mini-4k-instruct", quantization="F16", profile="throughput")
        env["models"][0].pop("slo", None)

    (line,) = errors(edit)
    assert "inferstack:environment.models[0].model: got microsoft/Phi-3-mini-4k-instruct F16 on RTX4000Ada" in line
    assert "does not fit" in line


def test_a_model_that_does_not_fit_a_cpu_boxs_memory() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["nodes"][0].update(gpu=None, memoryGib=8, cpu=8)
        env["models"][0].update(model="microsoft/Phi-3-mini-4k-instruct", quantization="F16", slo={"itlP99Ms": 500})

    lines = errors(edit)
    assert any("models[0].model: got microsoft/Phi-3-mini-4k-instruct F16 on CPU of store-0042" in x for x in lines)


def test_pods_that_do_not_fit_the_node_budget_name_the_biggest_consumers() -> None:
    (line,) = errors(lambda e: e["nodes"][0].update(cpu=6, memoryGib=16))
    assert line.startswith(f"{SOURCE}: inferstack:environment.nodes: got pods requesting ")
    assert "(3.67 CPU short)" in line
    # The gateway counts at maxReplicas (2) plus its rollout's surge pod
    assert "biggest: llama-3b (2 CPU, 4.0 GiB, 1 GPU), minilm (2 CPU, 2.0 GiB), gateway 3x (1 CPU, 0.2 GiB)" in line


def test_a_site_without_room_for_the_gpu_nodes_dcgm_exporter_and_config_reloaders_is_refused() -> None:
    # GIVEN a node whose share for pods (10 CPU - 1.4 reserved) holds the models, gateway, Redis, Prometheus, Grafana
    # and collector (8.55 CPU), but not also the DCGM exporter its GPU gets (100m) and the config-reloader sidecars
    # of Prometheus and Alertmanager (10m each), which the scheduler counts as well
    (line,) = errors(lambda e: e["nodes"][0].update(cpu=10, reservedCpu=1.4))
    # THEN the plan refuses it by the node budget
    assert line.startswith(f"{SOURCE}: inferstack:environment.nodes: got pods requesting 8.67 CPU")
    assert "(0.07 CPU short)" in line


def test_a_hub_by_url_without_a_key() -> None:
    (line,) = errors(lambda e: e.update(hub={"url": "https://gateway.dc1.example.com/v1"}))
    assert "inferstack:environment.hub.apiKeySecret: got nothing for hub.url https://gateway.dc1.example.com/v1" in line
    assert "pulumi config set --secret inferstack:hubApiKey" in line


def test_a_route_to_the_hub_without_a_hub() -> None:
    (line,) = errors(lambda e: (e.pop("hub"), e["gateway"].pop("burst")))  # burst without a hub: its own line
    assert "inferstack:environment.gateway.routes[0].large: got 'hub' without a hub" in line


def test_autoscaling_is_refused_at_a_fixed_site() -> None:
    (line,) = errors(lambda e: e["models"][0].update(autoscaling={"maxReplicas": 4}))
    assert "models[0].autoscaling: got" in line and "replicas are fixed at the edge" in line


def test_the_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    document = yaml.safe_load((ROOT / "stacks" / "Pulumi.edge.yaml").read_text())
    document["config"]["inferstack:environment"]["nodes"][0]["gpu"] = "H100"
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump(document))
    out = subprocess.run(
        [sys.executable, "-m", "inferstack_cli.main", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len([x for x in out.stderr.splitlines() if "inferstack:environment" in x]) == 1


def test_two_gpu_models_on_a_one_gpu_node_are_one_gpu_short() -> None:
    def edit(env: dict[str, Any]) -> None:
        second = dict(env["models"][0], name="llama-1b", model="meta-llama/Llama-3.2-1B-Instruct")
        env["models"].append(second)

    (line,) = errors(edit)
    assert "inferstack:environment.nodes: got pods requesting" in line and "(1 GPU short)" in line


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tlsCertificateArn", "arn:aws:acm:us-east-1:123456789012:certificate/0b5e1c2d-3f4a-4b6c-8d7e-9f0a1b2c3d4e"),
        ("hubUrl", "https://gateway.store-0042.example.com/v1"),
        ("burstTenant", {"tenant": "burst"}),
    ],
)
def test_hub_side_and_aws_gateway_keys_are_refused_by_name_at_a_site(key: str, value: Any) -> None:
    # GIVEN a gateway key only a hub (or an AWS NLB) reads WHEN it is set on an edge site THEN it is refused by name,
    # not planned into nothing
    (line,) = errors(lambda e: e["gateway"].update({key: value}))
    assert f"inferstack:environment.gateway.{key}: got " in line and "on tier edge" in line


def test_a_remote_write_receiver_is_refused_at_a_site() -> None:
    (line,) = errors(lambda e: e["observability"].update(remoteWriteReceiver=True))
    assert "inferstack:environment.observability.remoteWriteReceiver: got true on tier edge" in line
    assert "turn it on in the hub stack" in line


def test_a_hub_url_without_v1_is_refused_with_the_url_to_write() -> None:
    (line,) = errors(lambda e: e.update(hub={"url": "https://gateway.dc1.example.com", "apiKeySecret": "hubApiKey"}))
    assert "inferstack:environment.hub.url: got 'https://gateway.dc1.example.com' (not an OpenAI base URL ending in " \
           "/v1)" in line  # fmt: skip
    assert "fix: write 'https://gateway.dc1.example.com/v1'" in line


def test_a_hub_url_with_a_trailing_slash_is_told_the_url_without_it() -> None:
    # GIVEN hub.url written as many OpenAI clients print their base URL, with a trailing slash
    url = "https://gateway.dc1.example.com/v1/"
    (line,) = errors(lambda e: e.update(hub={"url": url, "apiKeySecret": "hubApiKey"}))
    # WHEN loaded THEN the fix is the same URL without the slash (not .../v1/v1)
    assert f"inferstack:environment.hub.url: got {url!r}" in line
    assert "fix: write 'https://gateway.dc1.example.com/v1'" in line


@pytest.mark.parametrize(
    ("url", "part", "fix"),
    [
        # The gateway dials the host and sends its own Authorization; userinfo is ignored and sits in the ConfigMap.
        ("https://site:s3cret@gateway.dc1.example.com/v1", "user name or password", "hub.apiKeySecret"),
        ("https://gateway.dc1.example.com/v1?tenant=store-0042/v1", "query", "https://gateway.dc1.example.com/v1"),
        ("https://gateway.dc1.example.com/v1#x/v1", "fragment", "https://gateway.dc1.example.com/v1"),
        ("https://:8443/v1", "host", "the gateway's URL"),
        ("https://gateway.dc1.example.com:99999/v1", "port from 1 to 65535", "the gateway's URL"),
    ],
)
def test_a_hub_url_the_gateway_cannot_dial_as_written_is_refused(url: str, part: str, fix: str) -> None:
    # GIVEN a hub.url ending in /v1 whose other parts the gateway's HTTP client drops or cannot use
    (line,) = errors(lambda e: e.update(hub={"url": url, "apiKeySecret": "hubApiKey"}))
    # WHEN loaded THEN one line names the key and the part, and says what to write
    assert line.startswith(f"{SOURCE}: inferstack:environment.hub.url: got ")
    assert part in line and fix in line.split("; fix: ", 1)[1]


@pytest.mark.parametrize(("port", "holder"), [(6443, "the k3s API server"), (10250, "the kubelet")])
def test_a_port_k3s_itself_holds_is_refused_for_the_gateway(port: int, holder: str) -> None:
    # GIVEN a site port no k3s flag frees (unlike Traefik's 80 and 443, which --disable=traefik frees)
    (line,) = errors(lambda e: e["gateway"].update(loadBalancerPort=port))
    assert f"gateway.loadBalancerPort: got {port} (a port k3s itself holds ({holder}))" in line
    assert "fix: use 8080 (the default)" in line


def test_the_node_exporters_port_is_refused_for_the_gateway() -> None:
    # GIVEN the site port 9100, which kube-prometheus-stack's node exporter holds on every node (hostNetwork):
    # ServiceLB's pod for it would stay pending, and the gateway's Service with it
    (line,) = errors(lambda e: e["gateway"].update(loadBalancerPort=9100))
    assert "gateway.loadBalancerPort: got 9100 (a port the kit holds on every node (the node exporter" in line
    assert "not 6443, 9100, 10250" in line


def test_cache_replicas_is_refused_at_a_site_like_cache_node_type() -> None:
    (line,) = errors(lambda e: e["cache"].update(replicas=3))
    assert (
        "cache.replicas: got 3 on tier edge (ElastiCache's node count; the in-cluster Redis runs one replica)" in line
    )
    assert "fix: remove it; size with cache.memoryGib" in line


# --- fuzz audit 2: values `inferstack plan` accepted and `pulumi up` would not (each through the CLI) ---------------


def test_a_gpu_count_without_a_gpu_is_refused(tmp_path: Path) -> None:
    # GIVEN a node with gpuCount but no gpu: it used to plan as a CPU-only node, the count dropped
    def edit(env: dict[str, Any]) -> None:
        env["nodes"][0].update(gpu=None, gpuCount=2)
        env["models"][0]["slo"] = {"itlP99Ms": 500}  # on CPU, the 3B model's decode floor is above 20 ms

    line = refused_by_plan(tmp_path, "edge", edit)
    assert "nodes[0].gpuCount: got 2 without nodes[0].gpu" in line
    assert "fix: name the GPU with gpu, or remove gpuCount for a CPU-only node" in line


@pytest.mark.parametrize(
    ("key", "value", "bound"),
    [
        ("gpuCount", 0, "greater than or equal to 1"),
        ("gpuCount", 9, "less than or equal to 4"),
        ("memoryBandwidthGbS", 0, "greater than 0"),
        ("memoryBandwidthGbS", 51200, "less than or equal to 2000"),
    ],
)
def test_node_gpu_count_and_memory_bandwidth_bounds(tmp_path: Path, key: str, value: int, bound: str) -> None:
    # 51200: a DDR5 box's bandwidth written in MB/s, which would pass every CPU model's ITL target
    line = refused_by_plan(tmp_path, "edge", lambda e: e["nodes"][0].update({key: value}))
    assert f"nodes[0].{key}: got {value}; allowed: {bound}" in line


def test_a_hub_that_is_the_site_itself_is_refused(tmp_path: Path) -> None:
    line = refused_by_plan(tmp_path, "edge", lambda e: e["hub"].update(stack="organization/inferstack/bad"))
    assert "hub.stack: got 'organization/inferstack/bad', this stack itself" in line


# --- variant audit: edge configs other than the bundled one ----------------------------------------------------------


def test_speculative_decoding_on_a_llamacpp_model_names_its_engine() -> None:
    # GIVEN a well-formed vLLM speculative block on the site's llama.cpp model
    ngram = {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMax": 4}
    (line,) = errors(lambda e: e["models"][0].update(speculative=ngram))
    # THEN it is refused as set on a llamacpp model (it used to say "a triton model")
    assert "models[0].speculative: got set on a llamacpp model; allowed: vllm models only" in line


def test_a_model_on_an_unknown_node_names_the_sites_nodes() -> None:
    # GIVEN a model whose pool is not one of the site's nodes
    (line,) = errors(lambda e: e["models"][0].update(pool="store-0024"))
    # THEN the error lists nodes[].name, the edge tier's key (gpuPools is refused at a site)
    assert "models[0].pool: got 'store-0024'; allowed: one of nodes[].name: store-0042" in line
    assert "gpuPools" not in line


def test_a_model_with_no_replicas_at_a_site_is_told_to_keep_one() -> None:
    # GIVEN a model with replicas: 0 at a site, whose replicas are fixed (models[].autoscaling is refused there)
    (line,) = errors(lambda e: e["models"][0].update(replicas=0))
    # THEN the fix is a replica, not the scale-to-zero the edge tier refuses
    assert "models[0].replicas: got 0" in line and "fix: set replicas: 1" in line
    assert "scaleToZero" not in line


@pytest.mark.parametrize(
    ("key", "value", "size"), [("reservedCpu", 16, "cpu 16"), ("reservedMemoryGib", 100, "memoryGib 64")]
)
def test_a_reserve_that_takes_the_whole_node_is_refused_by_its_key(key: str, value: int, size: str) -> None:
    # GIVEN a node whose k3s reserve is as large as the node itself (a typo, or cores written as millicores)
    (line,) = errors(lambda e: e["nodes"][0].update({key: value}))
    # THEN the reserve itself is refused, not a budget of a site "offering -84 CPU"
    assert f"inferstack:environment.nodes[0].{key}: got {value} on a node of {size}" in line
    assert "offering" not in line


def test_a_gateway_with_only_an_embedding_model_is_refused_by_gateway_enabled() -> None:
    # GIVEN a site serving only its embedding model, with the gateway on (its default)
    def edit(env: dict[str, Any]) -> None:
        env["models"] = [m for m in env["models"] if m["name"] == "minilm"]
        env["gateway"]["routes"] = []

    (line,) = errors(edit)
    # THEN the gateway's key says why (it routes chat models only), not the gateway schema's "models: Dictionary
    # should have at least 1 item"
    assert "inferstack:environment.gateway.enabled: got true with no chat model" in line
    assert "fix: add a chat model to models[], or set gateway.enabled: false" in line


def test_a_gpu_shortfall_says_each_gpu_model_takes_a_whole_gpu() -> None:
    # GIVEN three small chat models on a one-GPU node: together they fit its 20 GB, but each server asks for a GPU
    def edit(env: dict[str, Any]) -> None:
        env["nodes"][0]["gpu"] = "RTX4000Ada"
        for name, model in (("qwen", "Qwen/Qwen2.5-1.5B-Instruct"), ("gemma", "google/gemma-2-2b-it")):
            env["models"].append(dict(env["models"][0], name=name, model=model))

    (line,) = errors(edit)
    # THEN the fix says why smaller models do not help, and what does
    assert "(2 GPU short)" in line
    assert "allowed: every pod's requests within the nodes' cpu, memoryGib and GPUs" in line
    assert "fix: each replica of a model on a GPU node takes a whole GPU (nvidia.com/gpu: 1" in line
    assert "nodes[].gpuCount" in line and "use smaller models" not in line


def test_a_gpu_shortfall_on_one_node_of_a_site_says_the_same() -> None:
    # GIVEN two GPU nodes, and both chat models pinned to the first
    def edit(env: dict[str, Any]) -> None:
        env["nodes"][0]["nodeSelector"] = {"kubernetes.io/hostname": "store-0042"}
        env["nodes"].append(dict(env["nodes"][0], name="store-0043", nodeSelector={"kubernetes.io/hostname": "b"}))
        env["models"].append(dict(env["models"][0], name="llama-1b", model="meta-llama/Llama-3.2-1B-Instruct"))

    (line,) = errors(edit)
    assert "inferstack:environment.nodes[0]: got pods pinned to" in line and "(1 GPU short)" in line
    assert "fix: each replica of a model on a GPU node takes a whole GPU (nvidia.com/gpu: 1" in line
    assert "use a smaller model" not in line


def test_a_hub_without_a_gateway_to_send_to_it_is_refused() -> None:
    # GIVEN a site with its gateway off and the bundled hub kept: nothing would send the hub a prompt, yet the stack
    # would reference the hub stack (and read its key) at `pulumi up`
    (line,) = errors(lambda e: e.update(gateway={"enabled": False}))
    # THEN the hub is refused as unused, with the two ways out
    assert "inferstack:environment.hub: got a hub with gateway.enabled: false" in line
    assert "fix: remove `hub`, or turn the gateway on" in line


@pytest.mark.parametrize(("written", "meant"), [("l4", "L4"), ("rtx4000ada", "RTX4000Ada")])
def test_an_edge_gpu_written_in_the_wrong_case_gets_the_catalog_spelling(written: str, meant: str) -> None:
    (line,) = errors(lambda e: e["nodes"][0].update(gpu=written))
    assert f"nodes[0].gpu: got {written!r} (not in the GPU catalog)" in line
    assert f"fix: use an edge GPU (did you mean {meant!r}?)" in line
