"""Bad on-prem config: one clear line per problem (key path, value, allowed, fix), never a traceback."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import ROOT, config_errors, plan_cli, raw_environment, refused_by_plan
from stacks.environment import load_environment
from stacks.onprem import nccl_env

SOURCE = "stacks/Pulumi.onprem.yaml"


def errors(edit: Any) -> list[str]:
    return config_errors(edit, stack="onprem")


def test_an_aws_only_key_is_refused_by_name_with_the_tier_and_the_alternative() -> None:
    (line,) = errors(lambda e: e.update(region="us-east-1"))
    assert line.startswith(f"{SOURCE}: inferstack:environment.region: got 'us-east-1' on tier onprem")
    assert "fix: remove `region`" in line


def test_efa_on_an_onprem_pool_names_the_fabric_instead() -> None:
    (line,) = errors(lambda e: e["gpuPools"][0].update(efa=True))
    assert "inferstack:environment.gpuPools[0].efa: got true on tier onprem (no EFA off AWS)" in line
    assert "set `fabric`" in line


def test_elasticache_is_refused_on_prem_but_the_in_cluster_cache_is_not() -> None:
    (line,) = errors(lambda e: e["cache"].update(kind="elasticache"))
    assert "inferstack:environment.cache.kind: got 'elasticache' on tier onprem" in line
    assert "use `kind: in-cluster`" in line


def test_a_node_autoscaler_key_is_refused_on_a_fixed_fleet() -> None:
    (line,) = errors(lambda e: e["gpuPools"][0].update(maxSize=8))
    assert "gpuPools[0].maxSize: got 8 on tier onprem" in line and "use gpuPools[].nodes" in line


def test_the_clusters_own_network_operator_cannot_be_given_what_the_kits_policy_would_hold() -> None:
    # GIVEN a cluster whose Network Operator the kit does not install, asked for the DOCA driver container
    (line,) = errors(lambda e: e["networkOperator"].update(install=False, mofed="operator"))
    assert "inferstack:environment.networkOperator.mofed: got 'operator' with networkOperator.install false" in line
    assert "set networkOperator.mofed: host" in line

    # GIVEN the same, with an IPoIB secondary network, whose Multus, CNI and pool only the kit's policy renders
    def ipoib(env: dict[str, Any]) -> None:
        env["networkOperator"].update(install=False)
        env["fabric"]["secondaryNetwork"] = {"kind": "ipoib", "master": "ibs3f1", "subnet": "192.168.100.0/22"}

    (line,) = errors(ipoib)
    assert "inferstack:environment.fabric.secondaryNetwork: got set with networkOperator.install false" in line
    assert "remove fabric.secondaryNetwork" in line


def test_a_model_that_cannot_fit_its_pool() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["models"][2].update(pipelineParallel=1)  # 405B in BF16 on one H100 server: 810 GB > 640 GB

    (line,) = errors(edit)
    assert "inferstack:environment.models[2].tensorParallel" in line
    assert "H100" in line


def test_more_replicas_than_the_fixed_pool_holds_names_the_shortfall() -> None:
    (line,) = errors(lambda e: e["models"][0].update(replicas=20, autoscaling={"maxReplicas": 20}))
    # h100: 4 servers x 8 = 32 GPUs; llama-8b 20 + llama-405b 16 = 36
    assert "inferstack:environment.models[0].replicas: got 36 GPUs of replicas on pool 'h100'" in line
    assert "it has 32 (4 x 8): 4 short" in line


def test_an_autoscaling_ceiling_beyond_the_fleet() -> None:
    (line,) = errors(lambda e: e["models"][1].update(autoscaling={"maxReplicas": 40}))
    assert "models[1].autoscaling.maxReplicas: got 40 x 2 GPUs = 80 GPUs on pool 'h200' of 16 GPUs" in line
    assert "lower maxReplicas to 8" in line


def test_an_autoscaling_ceiling_counts_the_gpus_other_models_always_hold_on_the_pool() -> None:
    # GIVEN llama-8b (1 GPU a replica) allowed 20 replicas on the 32-GPU h100 pool, where the fixed-size 405B group
    # always holds 16: 20 fit the pool on their own, but at most 16 fit beside the group
    # WHEN / THEN the ceiling is refused with the room that is really left, and the models that hold the rest
    (line,) = errors(lambda e: e["models"][0].update(autoscaling={"maxReplicas": 20}))
    assert "models[0].autoscaling.maxReplicas: got 20 x 1 GPUs = 20 GPUs on pool 'h100' of 32 GPUs" in line
    assert "16 of them always held by the other models' replicas (llama-405b 16)" in line
    assert "fix: lower maxReplicas to 16, lower the other models' replicas on the pool or add servers" in line


def test_the_default_autoscaling_ceiling_beyond_the_fleet_is_refused_as_a_written_one_is() -> None:
    # GIVEN llama-70b (TP2, 2 replicas) on one H200 server (8 GPUs) with no maxReplicas: KEDA's ceiling defaults to
    # 4 x replicas = 8 replicas, 16 GPUs, which the fixed server can never hold
    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"][1].update(nodes=1)
        env["models"][1].pop("autoscaling")

    # WHEN / THEN it is refused as the same maxReplicas written out is, saying the value is the default
    (line,) = errors(edit)
    assert "models[1].autoscaling.maxReplicas: got 8 (the default, 4 x replicas, at least 2) x 2 GPUs = 16 GPUs" in line
    assert "on pool 'h200' of 8 GPUs" in line
    assert "fix: set maxReplicas to 4 or add servers" in line


def test_a_gpu_product_missing_from_the_catalog() -> None:
    (line,) = errors(lambda e: e["gpuPools"][0].update(gpu="H100X"))
    assert "inferstack:environment.gpuPools[0].gpu: got 'H100X' (not in the GPU catalog)" in line
    assert "did you mean 'H100'" in line


def test_a_multi_node_model_without_an_rdma_fabric() -> None:
    def edit(env: dict[str, Any]) -> None:
        env["fabric"] = {"kind": "none"}

    (line,) = errors(edit)
    assert "models[2].pipelineParallel: got 2 (the group spans 2 servers) with fabric.kind 'none'" in line


def test_a_hub_without_a_gateway_to_send_to_it_is_refused() -> None:
    # GIVEN the gateway off and the bundled hub kept: the hub was ignored in silence (as it was at the edge)
    lines = [line for line in errors(lambda e: e.update(gateway={"enabled": False})) if ".hub:" in line]
    # THEN it is refused as unused, with the two ways out
    assert len(lines) == 1
    assert "inferstack:environment.hub: got a hub with gateway.enabled: false" in lines[0]
    assert "fix: remove `hub`, or turn the gateway on" in lines[0]


def test_the_doca_driver_is_refused_without_a_fabric() -> None:
    # GIVEN no RDMA fabric (so no Network Operator) and the DOCA driver container asked of the operator
    def edit(env: dict[str, Any]) -> None:
        env["fabric"] = {"kind": "none"}
        env["networkOperator"] = {"mofed": "operator"}

    # THEN the key is named: it did nothing, silently
    lines = [line for line in errors(edit) if "networkOperator.mofed" in line]
    assert len(lines) == 1
    assert "inferstack:environment.networkOperator.mofed: got 'operator' with fabric.kind 'none'" in lines[0]
    assert "fix: remove networkOperator.mofed, or set fabric.kind: infiniband or roce" in lines[0]


def test_fewer_local_volumes_than_pods_per_server() -> None:
    (line,) = errors(lambda e: e["gpuPools"][0].update(localVolumesPerNode=2))
    assert "gpuPools[0].localVolumesPerNode: got 2 local volumes per server for up to 8 'llama-8b' pods" in line


def test_metallb_without_addresses() -> None:
    (line,) = errors(lambda e: e["loadBalancer"].pop("metallb"))
    assert "loadBalancer.metallb: got nothing with kind 'metallb'" in line


def test_the_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Any) -> None:
    document = (ROOT / SOURCE).read_text().replace("    tier: onprem\n", "    tier: onprem\n    region: us-east-1\n")
    (tmp_path / "Pulumi.bad.yaml").write_text(document)
    out = subprocess.run(
        [sys.executable, "-m", "inferstack_cli.main", "plan", "--stack", "bad", "--stacks-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "region: got 'us-east-1' on tier onprem" in out.stderr


def test_a_volume_store_without_its_claim() -> None:
    lines = errors(lambda e: e.update(modelStore={"kind": "volume"}))
    assert any("inferstack:environment.modelStore.claimName: got nothing with kind 'volume'" in x for x in lines)


def test_a_triton_model_on_a_volume_store() -> None:
    lines = errors(lambda e: e.update(modelStore={"kind": "volume", "claimName": "models-nfs"}))
    assert any("models[1].engine: got 'triton' with modelStore.kind 'volume'" in line for line in lines)
    assert all("models[0]" not in line for line in lines)  # the vLLM models are fine there


def test_cache_replicas_is_refused_on_prem_like_cache_node_type() -> None:
    (line,) = errors(lambda e: e["cache"].update(replicas=3))
    assert "cache.replicas: got 3 on tier onprem" in line and "fix: remove it; size with cache.memoryGib" in line


@pytest.mark.parametrize(
    ("address", "problem"),
    [("garbage", "item 0, 'garbage', is neither"), ("10.40.8.250-10.40.8.240", "item 0, '10.40.8.250-10.40.8.240'")],
)
def test_metallb_addresses_are_cidrs_or_ascending_ranges(address: str, problem: str) -> None:
    (line,) = errors(lambda e: e["loadBalancer"]["metallb"].update(addresses=[address]))
    assert "loadBalancer.metallb.addresses: got " in line and problem in line
    assert "fix: write each entry as a CIDR or an ascending range" in line


@pytest.mark.parametrize("selector", [{"": "x"}, {"a b": "x"}, {"example.com/" + "a" * 64: "x"}])
def test_a_node_selector_key_that_is_no_label_key(selector: dict[str, str]) -> None:
    (key,) = selector
    (line,) = errors(lambda e: e["gpuPools"][0].update(nodeSelector=selector))
    assert f"gpuPools[0].nodeSelector: got the key {key!r}; allowed: a Kubernetes label key" in line
    assert "fix: e.g. nvidia.com/gpu.product" in line


def test_a_node_selector_value_that_is_no_label_value() -> None:
    (line,) = errors(lambda e: e["gpuPools"][0].update(nodeSelector={"pool": "c d"}))
    assert "gpuPools[0].nodeSelector.pool: got 'c d'; allowed: a Kubernetes label value" in line


def test_label_keys_and_values_kubernetes_accepts_are_accepted() -> None:
    env = copy.deepcopy(raw_environment("onprem"))
    selector = {"example.com/a-b_c.D": "A.b-c_9", "plain": ""}
    env["gpuPools"][0]["nodeSelector"] = selector
    # WHEN loaded THEN it is taken as written: the pool's pods select exactly these labels
    assert load_environment(env, SOURCE).gpu_pools[0].node_selector == selector


def test_a_topology_label_that_is_no_label_key() -> None:
    (line,) = errors(lambda e: e["fabric"].update(topologyLabel="not a label!"))
    assert "fabric.topologyLabel: got 'not a label!'; allowed: a Kubernetes label key" in line


@pytest.mark.parametrize(
    ("burst", "key", "said"),
    [
        ({"spillAboveInflight": 4, "returnBelowInflight": 0}, "returnBelowInflight", "got 0; allowed: greater than"),
        ({"spillAboveInflight": 4, "returnBelowInflight": 4}, "returnBelowInflight", "not under spillAboveInflight"),
        ({"spillAboveTtftMs": 100, "returnBelowTtftMs": 500}, "returnBelowTtftMs", "not under spillAboveTtftMs"),
        ({"spillAboveTtftMs": 100, "returnBelowInflight": 2}, "returnBelowInflight", "without spillAboveInflight"),
    ],
)
def test_burst_thresholds_are_checked_under_their_own_keys(burst: dict[str, Any], key: str, said: str) -> None:
    (line,) = errors(lambda e: e["gateway"].update(burst=burst))
    assert f"gateway.burst.{key}: " in line and said in line
    assert "return_below" not in line, "the gateway's snake_case internals stay out of the message"


def test_an_embeddings_url_that_is_no_url() -> None:
    (line,) = errors(lambda e: e["gateway"].update(embeddingsUrl="not a url"))
    assert "gateway.embeddingsUrl: got 'not a url'; allowed: an http(s) URL" in line


# --- fuzz audit 2: values `inferstack plan` accepted and `pulumi up` would not (each through the CLI) ---------------


def test_a_hub_that_is_the_stack_itself_is_refused(tmp_path: Any) -> None:
    # GIVEN the stack file of stack `bad` whose hub is organization/inferstack/bad: it would burst to itself
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["hub"].update(stack="organization/inferstack/bad"))
    assert "hub.stack: got 'organization/inferstack/bad', this stack itself" in line
    assert "fix: name the hub's stack, or remove `hub`" in line


@pytest.mark.parametrize("device_id", ["10210", "101B", "0x1021", "15b3:1021"])
def test_a_pci_device_id_is_four_lowercase_hex_digits(tmp_path: Any, device_id: str) -> None:
    # The RDMA plugin compares the text exactly: any other spelling selects no HCA and pods stay Pending
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["fabric"].update(deviceIds=[device_id]))
    assert f"fabric.deviceIds[0]: got {device_id!r}; allowed: a PCI device id: 4 lowercase hex digits" in line
    assert "fix: e.g. 1021 for ConnectX-7" in line


@pytest.mark.parametrize(
    ("key", "items", "twice"),
    [("deviceIds", ["1021", "101b", "1021"], "1021"), ("hcas", ["mlx5_0", "mlx5_1", "mlx5_0"], "mlx5_0")],
)
def test_a_device_id_or_hca_listed_twice_is_refused(tmp_path: Any, key: str, items: list[str], twice: str) -> None:
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["fabric"].update({key: items}))
    assert f"fabric.{key}: got " in line and f"({twice!r} listed twice)" in line
    assert f"fix: list {twice} once" in line


@pytest.mark.parametrize("hca", ["mlx5_0,mlx5_1", "=mlx5_0", "mlx5 0"])
def test_an_hca_name_that_would_break_nccl_ib_hca_is_refused(tmp_path: Any, hca: str) -> None:
    # NCCL_IB_HCA is "=" + the names joined by ",": a ',', '=', '^' or space inside one name changes the filter
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["fabric"].update(hcas=[hca]))
    assert f"fabric.hcas[0]: got {hca!r}; allowed: an RDMA device name" in line


def test_hca_names_with_a_port_and_other_drivers_are_accepted() -> None:
    env = copy.deepcopy(raw_environment("onprem"))
    env["fabric"].update(hcas=["mlx5_0:1", "mlx5_bond_0", "ibp12s0", "bnxt_re0"], deviceIds=["1021", "101b"])
    loaded = load_environment(env, SOURCE)
    # WHEN loaded THEN the names reach NCCL's exact-match filter as written, in order, and the device ids are kept
    assert nccl_env(loaded)["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_bond_0,ibp12s0,bnxt_re0"
    assert loaded.fabric.device_ids == ("1021", "101b")


def test_a_host_device_secondary_network_is_refused_as_the_kit_renders_none() -> None:
    # GIVEN a host-device secondary network, NCCL's bootstrap on its net1 (nothing renders a HostDeviceNetwork, the
    # SR-IOV device plugin or a hostdev request, so the pods would have no net1)
    def edit(env: dict[str, Any]) -> None:
        env["fabric"].update(
            socketInterface="net1", secondaryNetwork={"kind": "host-device", "subnet": "192.168.100.0/24"}
        )

    # WHEN / THEN it is one line naming the key and what is allowed
    (line,) = errors(edit)
    assert "inferstack:environment.fabric.secondaryNetwork.kind: got 'host-device'; allowed: 'ipoib'" in line


IPOIB = {"kind": "ipoib", "master": "ibs3f1", "subnet": "192.168.100.0/24"}


@pytest.mark.parametrize(
    ("network", "key", "says"),
    [
        ({"subnet": "192.168.300.0/24"}, "subnet", "got '192.168.300.0/24' (not an IPv4 network"),
        ({"subnet": "192.168.100.0/31"}, "subnet", "n from 0 to 30"),
        ({"gateway": "10.0.0.1"}, "gateway", "got '10.0.0.1' (not an address in subnet 192.168.100.0/24)"),
        ({"gateway": "nope"}, "gateway", "fix: use an address of 192.168.100.0/24 (e.g. 192.168.100.1)"),
        ({"subnet": "192.168.100.0/28", "perNodeBlockSize": 64}, "perNodeBlockSize", "lower perNodeBlockSize to 14"),
        # 6 GPU servers (4 H100, 2 H200); a /25's 126 addresses hold one block of 64: nv-ipam has none for the rest
        (
            {"subnet": "192.168.100.0/25", "perNodeBlockSize": 64},
            "perNodeBlockSize",
            "got 64: subnet 192.168.100.0/25 holds 1 such blocks for 6 GPU servers",
        ),
        ({"subnet": "192.168.100.0/25", "perNodeBlockSize": 64}, "perNodeBlockSize", "lower perNodeBlockSize to 21"),
    ],
)
def test_an_ip_pool_nv_ipam_would_reject_is_refused_by_name(network: dict[str, Any], key: str, says: str) -> None:
    # GIVEN an IPoIB network whose pool breaks one of nv-ipam's IPPool rules (a bad subnet, a gateway outside it, a
    # per-node block larger than it): the policy runs nv-ipam without its webhook, so the pool would be stored and
    # ignored, and every rank's CNI ADD would fail
    def edit(env: dict[str, Any]) -> None:
        env["fabric"]["secondaryNetwork"] = {**IPOIB, **network}

    # WHEN / THEN it is one line naming the key, the value and the fix
    (line,) = errors(edit)
    assert f"inferstack:environment.fabric.secondaryNetwork.{key}: " in line
    assert says in line


@pytest.mark.parametrize(("kind", "says"), [("roce", "an Ethernet port has no IPoIB"), ("none", "no fabric")])
def test_an_ipoib_network_off_an_infiniband_fabric_is_refused(kind: str, says: str) -> None:
    # GIVEN an IPoIB secondary network on a RoCE fabric (Ethernet ports: the IPoIB CNI has no IPoIB parent to make a
    # child of, so every rank's CNI ADD fails) or on no fabric (nothing installs the network: the key did nothing)
    def edit(env: dict[str, Any]) -> None:
        env["fabric"].update(kind=kind, secondaryNetwork={**IPOIB, "subnet": "192.168.100.0/22"})
        if kind == "none":
            env["models"] = env["models"][:2]  # the 405B group needs a fabric

    # WHEN / THEN it is one line naming the key, the fabric and the fix
    (line,) = errors(edit)
    assert f"inferstack:environment.fabric.secondaryNetwork: got an IPoIB network with fabric.kind {kind!r}" in line
    assert says in line
    assert "fix: remove fabric.secondaryNetwork" in line


def test_a_load_balancer_class_with_the_kits_metallb_is_refused() -> None:
    # GIVEN the kit's MetalLB, which serves only Services without a loadBalancerClass (it runs without --lb-class),
    # and a class for the gateway's Service: no controller would give it an address
    (line,) = errors(lambda e: e["loadBalancer"].update(loadBalancerClass="metallb.io/metallb"))
    # THEN it is one line naming the key and the fix, not a policy finding about an AWS controller
    assert "inferstack:environment.loadBalancer.loadBalancerClass: got 'metallb.io/metallb' with kind 'metallb'" in line
    assert "fix: remove loadBalancer.loadBalancerClass, or use kind: existing" in line


def test_a_load_balancer_class_the_api_server_would_reject_is_refused() -> None:
    # GIVEN a class that is no qualified name: the API server refuses the gateway's Service (ValidateQualifiedName)
    def edit(env: dict[str, Any]) -> None:
        env["loadBalancer"] = {"kind": "existing", "loadBalancerClass": "kube vip!"}

    (line,) = errors(edit)
    assert (
        "inferstack:environment.loadBalancer.loadBalancerClass: got 'kube vip!'; allowed: a Kubernetes label key"
        in line
    )


@pytest.mark.parametrize(
    ("ranges", "said"),
    [
        ([], "got [] (no networks: every address would be admitted)"),
        (["10.0.0.0/8", "0.0.0.0/0"], 'got ["10.0.0.0/8", "0.0.0.0/0"] (0.0.0.0/0 not private)'),
    ],
)
def test_source_ranges_that_admit_the_internet_are_refused_by_name(ranges: list[str], said: str) -> None:
    # GIVEN the gateway's LAN load balancer admitting everyone (no ranges) or a public network: the policy pack would
    # refuse its Service as internet-facing, and on-prem has no opt-in
    (line,) = errors(lambda e: e["loadBalancer"].update(sourceRanges=ranges))
    # THEN it is one line naming the key and the fix, before any plan
    assert f"inferstack:environment.loadBalancer.sourceRanges: {said}" in line
    assert "fix: list the private networks your clients are on" in line


def test_a_persistent_storage_class_the_api_server_would_reject_is_refused() -> None:
    # GIVEN a class name that is no DNS subdomain: the API server refuses every claim that names it (PVC validation,
    # ValidateClassName), so Prometheus and Redis would never get their volumes
    (line,) = errors(lambda e: e.update(persistentStorageClass="Ceph RBD"))
    assert "inferstack:environment.persistentStorageClass: got 'Ceph RBD'; allowed: a Kubernetes object name" in line


def test_a_group_spanning_more_servers_than_its_pool_has_names_the_servers_not_the_replicas() -> None:
    # GIVEN the 405B group (PP2: two H100 servers a replica) on an H100 pool of one server, the 8B model elsewhere
    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"][0].update(nodes=1)
        env["models"][0].update(pool="h200", replicas=1, autoscaling={"maxReplicas": 1})

    # WHEN / THEN one line says the group itself does not fit, with the servers to add; not "lower replicas" (it has 1)
    (line,) = errors(edit)
    assert "inferstack:environment.models[2].pipelineParallel: got 2 (one replica spans 2 servers of 8 GPUs" in line
    assert "pool 'h100' has 1)" in line
    assert "fix: set gpuPools[0].nodes to 2 or more" in line


@pytest.mark.parametrize(("precision", "suggested"), [("fp8", False), ("bf16", True)])
def test_a_model_too_slow_for_its_slo_is_told_to_use_fp8_only_when_it_does_not(precision: str, suggested: bool) -> None:
    # GIVEN one L40S server (1 GPU) serving the 8B model, whose ITL floor there misses the default 20 ms SLO
    def edit(env: dict[str, Any]) -> None:
        env["gpuPools"] = [
            {"name": "l40s", "gpu": "L40S", "gpusPerNode": 1, "nodes": 1, "nodeSelector": {"pool": "l40s"}}
        ]
        env["fabric"] = {"kind": "none"}
        env["models"] = [{**env["models"][0], "pool": "l40s", "precision": precision, "replicas": 1}]
        env["models"][0].pop("autoscaling")
        env["gateway"]["routes"] = []

    # WHEN / THEN the fix offers fp8 only to a model not already in it
    (line,) = errors(edit)
    assert "inferstack:environment.models[0].tensorParallel: got nothing fits (derived on 1x L40S server)" in line
    assert ("fix: use fp8, " in line) is suggested
    assert "a bigger GPU pool, pipelineParallel across nodes, or a looser slo.itlP99Ms" in line


def test_an_explicit_tensor_parallel_whose_itl_floor_misses_the_default_slo_is_refused(tmp_path: Path) -> None:
    # GIVEN on-prem's 70B model (FP8, Triton, on an 8x H200 server), which writes no SLO, pinned to TP1: its floor
    # there is 28.4 ms, over the default 20 ms target
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["models"][1].update(tensorParallel=1))

    # WHEN / THEN exit 2, one line: the floor, the default target, the TP the kit derives on the server, both ways out
    assert "inferstack:environment.models[1].tensorParallel: got 1 with fp8 on H200, whose ITL floor is 28.4 ms" in line
    assert "slo.itlP99Ms, 20 ms (the default: slo.itlP99Ms is not set); TP=2 meets it on 8x H200 server" in line
    assert "fix: remove tensorParallel to derive it (TP=2) or set it to 2" in line
    assert "write a looser slo.itlP99Ms (it is not set: 20 ms is the default)" in line

    # AND the same TP1 with a target over its floor is placed
    raw = copy.deepcopy(raw_environment("onprem"))
    raw["models"][1].update(tensorParallel=1, slo={"itlP99Ms": 30})
    assert load_environment(raw, SOURCE).models[1].tensor_parallel == 1


def test_pipeline_parallel_does_not_excuse_an_explicit_tp_from_the_itl_target(tmp_path: Path) -> None:
    # GIVEN the 405B group (BF16, TP8 x PP2 on H100s): its floor is 42.7 ms, which the bundled 60 ms target meets;
    # a stage per server adds no read a token skips, so PP2 leaves the floor as TP8 on its own would
    assert load_environment(raw_environment("onprem"), SOURCE).models[2].slo.itl_p99_ms == 60

    # WHEN its target is tightened to 40 ms
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["models"][2].update(slo={"itlP99Ms": 40}))

    # THEN it is refused; no degree on the server meets it, so the fix offers no TP, and fp8 (it is in bf16)
    assert "models[2].tensorParallel: got 8 with bf16 on H100, PP=2, whose ITL floor is 42.7 ms" in line
    assert "slo.itlP99Ms, 40 ms; no degree up to 8 on 8x H100 server meets it" in line
    assert "pipelineParallel does not lower the floor" in line
    assert line.endswith("fix: use fp8, a bigger GPU pool, or a looser slo.itlP99Ms")


def minilm_on_cpu(env: dict[str, Any]) -> None:
    """The embedding model on llama.cpp (``engine: llamacpp``, any tier): it runs on the CPU of an h100 server."""
    env["models"].append(
        {
            "name": "minilm",
            "model": "sentence-transformers/all-MiniLM-L6-v2",
            "engine": "llamacpp",
            "pool": "h100",
            "autoscaling": {"maxReplicas": 3},
        }
    )


def test_a_cpu_llamacpp_server_on_a_gpu_pool_plans() -> None:
    # GIVEN the bundled stack with a CPU-only llama.cpp server (it takes none of the pool's GPUs)
    env = copy.deepcopy(raw_environment("onprem"))
    minilm_on_cpu(env)
    # WHEN the environment is checked THEN it loads, the server among its models
    assert "minilm" in [m.name for m in load_environment(env, SOURCE).models]


def test_a_cpu_llamacpp_servers_replicas_count_against_the_local_volumes() -> None:
    # GIVEN two local volumes per h100 server and a CPU server that KEDA may grow to 3 replicas, on one server alike
    def edit(env: dict[str, Any]) -> None:
        minilm_on_cpu(env)
        env["gpuPools"][0].update(localVolumesPerNode=2)

    # THEN its line bounds its pods per server by its replica ceiling (GPUs do not bound a server of none)
    (line,) = [line for line in errors(edit) if "'minilm'" in line]
    assert "gpuPools[0].localVolumesPerNode: got 2 local volumes per server for up to 3 'minilm' pods" in line


@pytest.mark.parametrize(
    ("gateway", "fixed"),
    [
        ({"hubUrl": "http://gateway.dc1.example.com/v1"}, "https://gateway.dc1.example.com/v1"),
        (
            {"hubUrl": "http://gateway.dc1.example.com/v1", "loadBalancerPort": 8443},
            "https://gateway.dc1.example.com:8443/v1",
        ),
        (
            {"hubUrl": "http://gateway.dc1.example.com:9443/v1", "loadBalancerPort": 9443},
            "https://gateway.dc1.example.com:9443/v1",
        ),
    ],
)
def test_a_plain_http_hub_url_for_a_gateway_that_serves_https_is_refused(gateway: dict[str, Any], fixed: str) -> None:
    # GIVEN the on-prem hub's gateway serving HTTPS itself (tlsSecret: on every port, the load balancer forwarding plain
    # TCP) and a hubUrl that tells the sending stacks to speak plain HTTP to it (every burst fails, its key in clear)
    def edit(env: dict[str, Any]) -> None:
        env["gateway"].update(tlsSecret="gateway-tls", **gateway)

    # WHEN loaded THEN one line names the key and the https:// URL on the load balancer's port
    (line,) = errors(edit)
    assert f"inferstack:environment.gateway.hubUrl: got {gateway['hubUrl']!r} with gateway.tlsSecret" in line
    assert line.endswith(f"fix: write {fixed!r}, or remove tlsSecret")
    # AND the stack loads once the fix is followed
    raw = copy.deepcopy(raw_environment("onprem"))
    edit(raw)
    raw["gateway"]["hubUrl"] = fixed
    assert load_environment(raw, SOURCE).gateway.hub_url == fixed


@pytest.mark.parametrize("stack", ["onprem", "edge"])
def test_an_empty_kubeconfig_secret_is_refused_not_replaced_by_the_ambient_one(stack: str, tmp_path: Path) -> None:
    # GIVEN a stack whose kubeconfig was set to nothing (`pulumi config set --secret inferstack:kubeconfig < f` with an
    # empty f): pulumi-kubernetes reads an empty kubeconfig as none and would use the deployer's ~/.kube/config
    document = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    document["config"]["inferstack:kubeconfig"] = ""
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump(document))
    # WHEN it is planned THEN it is refused by name, before any resource exists
    result = plan_cli(tmp_path, "bad")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    # AND the line names the file that was planned (--stacks-dir), not the bundled stacks/ directory
    assert line.startswith(f"{tmp_path / 'Pulumi.bad.yaml'}: inferstack:kubeconfig: got an empty string; allowed: ")
    assert "(its contents), as a Pulumi secret; fix: pulumi config set --secret inferstack:kubeconfig" in line


@pytest.mark.parametrize(("stack", "pool"), [("onprem", "h100"), ("dev", "l40s")])
@pytest.mark.parametrize(("key", "value"), [("tensorParallel", 4), ("pipelineParallel", 2)])
def test_parallelism_on_a_llamacpp_model_is_refused_not_ignored(
    stack: str, pool: str, key: str, value: int, tmp_path: Path
) -> None:
    # GIVEN a llama.cpp chat model on a GPU pool, with a degree of parallelism (the edge tier refuses the keys
    # outright; on the others they were accepted and never used: the server loads the whole file on one GPU)
    def edit(env: dict[str, Any]) -> None:
        env["models"].append(
            {"name": "small", "model": "meta-llama/Llama-3.2-3B-Instruct", "engine": "llamacpp", "pool": pool,
             key: value}
        )  # fmt: skip

    # WHEN it is planned THEN it is refused at that key, with the way to spread a model over GPUs
    line = refused_by_plan(tmp_path, stack, edit)
    assert f"models[{len(raw_environment(stack)['models'])}].{key}: got {value}" in line
    assert "1 on llamacpp: the kit's llama.cpp server loads the whole GGUF file on one GPU, or on the CPU" in line
    assert line.endswith(f"fix: remove {key}, or serve the model with engine: vllm to spread it over GPUs")


@pytest.mark.parametrize(
    ("budgets", "spill", "said"),
    [
        ({}, 10_000, "10000, not under gateway.budgets.upstreamTtftMs (10000, its default)"),
        ({"upstreamTtftMs": 1500}, 2000, "2000, not under gateway.budgets.upstreamTtftMs (1500)"),
    ],
)
def test_a_ttft_spill_threshold_the_ttft_budget_never_lets_the_average_reach_is_refused(
    budgets: dict[str, Any], spill: int, said: str
) -> None:
    # GIVEN a tier that spills on its TTFT average at or above the TTFT budget, after which a stream fails over: the
    # average is of the streams that got a first event in time, so it never gets there
    def edit(e: dict[str, Any]) -> None:
        e["gateway"]["burst"]["spillAboveTtftMs"] = spill
        e["gateway"].pop("budgets", None)
        if budgets:
            e["gateway"]["budgets"] = budgets

    (line,) = errors(edit)
    assert f"gateway.burst.spillAboveTtftMs: got {said}" in line
    assert "never spills on latency" in line and "fix: lower spillAboveTtftMs below" in line


def test_a_ttft_spill_threshold_under_the_ttft_budget_is_taken() -> None:
    env = copy.deepcopy(raw_environment("onprem"))
    env["gateway"]["burst"]["spillAboveTtftMs"] = 1499
    env["gateway"]["budgets"] = {"upstreamTtftMs": 1500}
    assert load_environment(env, SOURCE).gateway.burst.spill_above_ttft_ms == 1499  # type: ignore[union-attr]
