"""The on-prem stack with an IPoIB secondary network: nv-ipam pool, IPoIBNetwork, Multus, and the pods that attach."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from crdcheck import validate
from helpers import plan_with
from inferstack_cli import render
from inferstack_cli.plan import Plan

NETWORK = "inferstack-serving/ib-fabric"
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
SECONDARY = {"kind": "ipoib", "master": "ibs3f1", "subnet": "192.168.100.0/22", "gateway": "192.168.100.1"}


def _with_ipoib(env: dict[str, Any]) -> None:
    env["fabric"]["secondaryNetwork"] = dict(SECONDARY)


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    # GIVEN the bundled on-prem stack with an IPoIB secondary network on ibs3f1
    # WHEN it is planned
    plan: Plan = plan_with(tmp_path_factory.mktemp("ipoib"), "onprem", _with_ipoib)
    assert plan.violations == []
    rendered = render.renders(plan.resources)
    return [yaml.safe_load(t) for p, t in rendered.items() if p.startswith("manifests/")]


def _one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[m['metadata']['name'] for m in found]}"
    return found[0]


def test_the_ip_pool_validates_against_the_upstream_crd(manifests: list[dict[str, Any]]) -> None:
    # THEN the nv-ipam IPPool carries the configured subnet and gateway and is accepted by the IPPool CRD
    pool = _one(manifests, "IPPool")
    assert pool["apiVersion"] == "nv-ipam.nvidia.com/v1alpha1"
    assert pool["metadata"]["name"] == "ib-fabric"
    assert pool["spec"]["subnet"] == SECONDARY["subnet"]
    assert pool["spec"]["gateway"] == SECONDARY["gateway"]
    assert validate(pool, strict=True) == []


def test_the_ip_pool_gives_blocks_to_the_gpu_servers_only(manifests: list[dict[str, Any]]) -> None:
    # THEN the pool selects each GPU pool's servers (terms are ORed), so the system and control-plane nodes, with no
    # IPoIB interface, take none of the subnet's blocks (nv-ipam gives one to every node an empty selector matches)
    terms = _one(manifests, "IPPool")["spec"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}
        for product in ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H200")
    ]


def test_the_ipoib_network_validates_against_the_upstream_crd(manifests: list[dict[str, Any]]) -> None:
    # THEN the IPoIBNetwork uses the master interface and the serving namespace and is accepted by its CRD
    network = _one(manifests, "IPoIBNetwork")
    assert network["apiVersion"] == "mellanox.com/v1alpha1"
    assert network["metadata"]["name"] == "ib-fabric"
    assert network["spec"]["master"] == SECONDARY["master"]
    assert network["spec"]["networkNamespace"] == NETWORK.split("/")[0]
    assert validate(network, strict=True) == []


def test_the_nic_cluster_policy_gains_multus_ipoib_and_nv_ipam(manifests: list[dict[str, Any]]) -> None:
    # THEN the NicClusterPolicy deploys Multus, the CNI plugins, the IPoIB CNI and nv-ipam, and still validates
    policy = _one(manifests, "NicClusterPolicy")
    assert set(policy["spec"]["secondaryNetwork"]) == {"multus", "cniPlugins", "ipoib"}
    assert "nvIpam" in policy["spec"]
    assert validate(policy, strict=True) == []


def test_the_405b_leader_and_workers_attach_to_the_ib_network(manifests: list[dict[str, Any]]) -> None:
    # THEN both pod templates of the multi-node 405B group name the secondary network for Multus
    lws = next(m for m in manifests if m["kind"] == "LeaderWorkerSet" and m["metadata"]["name"] == "llama-405b")
    template = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        annotations = template[role]["metadata"].get("annotations", {})
        assert annotations.get(MULTUS_NETWORKS) == NETWORK, role
    assert validate(lws, strict=True) == []
