"""The on-prem system nodes' budget: every system pod's requests, read from the renders, against the servers
``cluster.systemNodes`` describes; and the in-cluster Redis against one of them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.kube.budget import Demand, shortfall, total
from components.kube.requests import Requests, container_requests
from components.onprem.specs import FabricSpec
from components.onprem.system_budget import node_capacity, operator_demand, system_demand
from helpers import config_errors, raw_environment, refused_by_plan, releases_placed_on
from inferstack_cli.plan import Plan
from stacks.environment import OnpremEnvironment, load_environment

PlanOf = Callable[[str], Plan]
SOURCE = "stacks/Pulumi.onprem.yaml"
SYSTEM = {"node-role.inferstack.io/system": "true"}
GIB = 2**30
MIB = 2**20


def errors(edit: Callable[[dict[str, Any]], Any]) -> list[str]:
    return config_errors(edit, stack="onprem")


def environment(edit: Callable[[dict[str, Any]], Any] = lambda e: None) -> OnpremEnvironment:
    raw = copy.deepcopy(raw_environment("onprem"))
    edit(raw)
    return OnpremEnvironment.model_validate(raw)


def budget(env: OnpremEnvironment) -> tuple[list[Demand], Requests]:
    """The bundled stack's system pods and what one of its system nodes offers them."""
    sections = (env.gpu_operator, env.network_operator, env.fabric)
    assert env.cluster.system_nodes is not None
    return (
        system_demand(env.gateway, env.cache, env.observability, *sections),
        node_capacity(env.cluster.system_nodes, *sections),
    )


def test_system_nodes_too_small_for_their_pods_name_the_biggest_consumers_and_the_fix() -> None:
    # GIVEN the bundled system pods (the gateway at maxReplicas 8 plus its surge pod) on two 8-core servers
    (line,) = errors(lambda e: e["cluster"].update(systemNodes={"count": 2, "cpu": 8, "memoryGib": 32}))
    # THEN one line says what they request against what the servers offer, the biggest consumers, and the fix
    assert line.startswith(
        f"{SOURCE}: inferstack:environment.cluster.systemNodes: got system pods requesting 13.035 CPU, 24.8 GiB on 2 "
        "system nodes offering 11.99 CPU, 55.9 GiB after reservedCpu/reservedMemoryGib and each node's DaemonSets "
        "(1.045 CPU short); biggest: gateway 9x (1 CPU, 0.2 GiB), redis (1 CPU, 16.0 GiB), prometheus (1.01 CPU, "
        "4.0 GiB); "
    )
    # 13.035 CPU over two servers, each keeping 2 cores and NFD's worker (5m): 8.52 cores each, so 9
    assert line.endswith(
        "fix: raise cluster.systemNodes.count to 3 (and label 3 servers with systemNodeSelector), or run the system "
        "pods on 2 servers of at least 9 cores and 32 GiB (cluster.systemNodes.cpu and memoryGib), or lower "
        "gateway.maxReplicas"
    )


def test_the_cli_refuses_too_small_a_system_node_with_exit_2(tmp_path: Path) -> None:
    # GIVEN the system pods on one 12-core server
    line = refused_by_plan(tmp_path, "onprem", lambda e: e["cluster"]["systemNodes"].update(count=1, cpu=12))
    # THEN `inferstack plan` exits 2 with one line naming the key, the shortfall and the sizes that fit
    assert "inferstack:environment.cluster.systemNodes: got system pods requesting 13.035 CPU, 24.8 GiB" in line
    assert "on 1 system node offering 9.995 CPU, 123.9 GiB" in line and "(3.04 CPU short)" in line
    assert "raise cluster.systemNodes.count to 2" in line and "on 1 server of at least 16 cores and 128 GiB" in line


def test_a_cache_larger_than_one_system_node_names_cache_memory_gib() -> None:
    # GIVEN a 200 GiB Redis on the bundled 128 GiB system servers
    (line,) = errors(lambda e: e["cache"].update(memoryGib=200))
    # THEN the line names cache.memoryGib, what one server has for pods, and the fix
    assert line == (
        f"{SOURCE}: inferstack:environment.cache.memoryGib: got 200 (the in-cluster Redis runs on one system node: "
        "each has 128 GiB, 123.9 GiB of it for the kit's pods after reservedMemoryGib and the node's DaemonSets); "
        "allowed: at most 123 GiB on these system nodes (cluster.systemNodes); fix: lower cache.memoryGib, or run the "
        "system pods on servers with more memory (cluster.systemNodeSelector and cluster.systemNodes.memoryGib)"
    )
    # AND the largest cache that fits is accepted
    raw = copy.deepcopy(raw_environment("onprem"))
    raw["cache"].update(memoryGib=123)
    assert load_environment(raw, SOURCE).cache.memory_gib == 123


def test_without_system_nodes_the_cache_is_not_compared_with_them() -> None:
    # GIVEN a gateway that grows to 100 replicas and a 500 GiB cache
    def oversized(env: dict[str, Any]) -> None:
        env["gateway"].update(maxReplicas=100)
        env["cache"].update(memoryGib=500)

    # WHEN the system nodes are described THEN the plan refuses the cache (the budget waits for a sound config)
    (line,) = errors(oversized)
    assert "inferstack:environment.cache.memoryGib: got 500" in line

    # WHEN they are not THEN nothing compares the pods with them
    def undescribed(env: dict[str, Any]) -> None:
        oversized(env)
        env["cluster"].pop("systemNodes")

    raw = copy.deepcopy(raw_environment("onprem"))
    undescribed(raw)
    assert load_environment(raw, SOURCE).cluster.system_nodes is None


def test_without_system_nodes_a_gateway_beyond_them_is_not_refused() -> None:
    def grown(env: dict[str, Any]) -> None:
        env["gateway"].update(maxReplicas=100)

    # GIVEN the gateway at 100 replicas: refused on the bundled servers...
    (line,) = errors(grown)
    assert line.startswith(f"{SOURCE}: inferstack:environment.cluster.systemNodes: got system pods requesting 105.035")
    # ... and accepted where the stack does not describe them
    raw = copy.deepcopy(raw_environment("onprem"))
    grown(raw)
    raw["cluster"].pop("systemNodes")
    assert load_environment(raw, SOURCE).gateway.max_replicas == 100


def test_system_nodes_without_a_selector_are_refused() -> None:
    # GIVEN servers described but no label confining the system pods to them
    (line,) = errors(lambda e: e["cluster"].pop("systemNodeSelector"))
    assert "inferstack:environment.cluster.systemNodeSelector: got nothing with cluster.systemNodes" in line
    assert "set systemNodeSelector" in line


@pytest.mark.parametrize(
    ("key", "value", "said"), [("reservedCpu", 32, "32 cores"), ("reservedMemoryGib", 200, "128 GiB")]
)
def test_a_reserve_that_leaves_nothing_for_pods_is_refused(key: str, value: int, said: str) -> None:
    (line,) = errors(lambda e: e["cluster"]["systemNodes"].update({key: value}))
    assert f"inferstack:environment.cluster.systemNodes.{key}: got {value} (all of each server's {said})" in line


def test_the_bundled_system_pods_fit_their_system_nodes() -> None:
    # GIVEN the bundled stack: three 32-core, 128 GiB servers, each keeping 2 cores and 4 GiB
    env = environment()
    demand, per_node = budget(env)
    # THEN the pods at their peak ask 13.035 CPU and 24.8 GiB, and each server offers 32 - 2 - NFD's worker's 5m
    assert total(demand) == Requests(13035, total(demand).memory)
    assert f"{total(demand).memory / GIB:.1f}" == "24.8"
    assert per_node == Requests(32000 - 2000 - 5, 124 * GIB - 64 * MIB)
    assert shortfall(demand, per_node * 3) == []


def test_a_daemonset_counts_once_per_node() -> None:
    # GIVEN the bundled servers WHEN the fabric adds an IPoIB secondary network (four CNI DaemonSets)
    env = environment()
    ipoib = environment(
        lambda e: e["fabric"].update(secondaryNetwork={"kind": "ipoib", "master": "ibs3f1", "subnet": "10.9.0.0/22"})
    )
    before, node = budget(env)
    after, node_with_cni = budget(ipoib)
    # THEN each server offers 4 x 100m and 4 x 50Mi less, and the pool's pods are the same
    assert node_with_cni == Requests(node.cpu_m - 400, node.memory - 200 * MIB)
    assert total(after) == total(before)


def test_a_deployment_counts_once_per_replica_with_its_surge_pod() -> None:
    # GIVEN the gateway at maxReplicas 8, then 9
    demand, _ = budget(environment())
    grown, _ = budget(environment(lambda e: e["gateway"].update(maxReplicas=9)))
    gateway = next(d for d in demand if d.name == "gateway")
    # THEN it counts 8 replicas plus its rollout's surge pod, and one more replica is one more pod's requests
    assert gateway.pods == 9
    assert total(grown) == total(demand) + gateway.per_pod


def test_every_system_release_is_counted_with_what_its_values_request(plan_of: PlanOf) -> None:
    # GIVEN the Helm releases the bundled on-prem stack places on the system nodes, as planned
    releases = releases_placed_on(plan_of("onprem"), SYSTEM)
    env = environment()
    demand, _ = budget(env)
    by_name = {d.name: d for d in demand}
    daemons = {d.name: d for d in operator_demand(env.gpu_operator, env.network_operator, env.fabric)[1]}

    def counted(name: str) -> tuple[Requests, int]:
        return by_name[name].per_pod, by_name[name].pods

    # THEN the budget counts each one's pods with the requests its planned values give them
    gpu, network = releases["gpu-operator"], releases["network-operator"]
    nfd = network["node-feature-discovery"]
    assert counted("gpu-operator") == (container_requests(gpu["operator"]), 1)
    assert counted("network-operator") == (container_requests(network["operator"]), 1)
    assert counted("nfd-master") == (container_requests(nfd["master"]), 1)
    assert counted("nfd-gc") == (container_requests(nfd["gc"]), 1)
    assert daemons["nfd-worker"].per_pod == container_requests(nfd["worker"])
    assert counted("lws-controller") == (container_requests(releases["lws"]), 1)
    assert counted("metrics-server") == (container_requests(releases["metrics-server"]), 1)
    assert counted("grafana") == (container_requests(releases["kube-prometheus-stack"]["grafana"]), 1)
    assert counted("opentelemetry-collector") == (container_requests(releases["opentelemetry-collector"]), 1)
    # AND MetalLB's and the Redis exporter's pods request nothing (their values and charts leave them without)
    for name in ("metallb", "prometheus-redis-exporter"):
        assert "requests" not in str(releases[name])
    # AND no other release on the system nodes is left out
    assert set(releases) == {
        "keda", "lws", "metrics-server", "kube-prometheus-stack", "opentelemetry-collector",
        "prometheus-redis-exporter", "gpu-operator", "network-operator", "metallb",
    }  # fmt: skip


def test_without_rdma_the_gpu_operators_nfd_is_counted_and_no_network_operator() -> None:
    # GIVEN a cluster without an RDMA fabric: the GPU Operator runs NFD, and the kit installs no Network Operator
    env = environment()
    pods, daemons = operator_demand(env.gpu_operator, env.network_operator, FabricSpec(kind="none"))
    # THEN its operator and NFD's master and garbage collector are counted once, and NFD's worker on each node
    assert [d.name for d in pods] == ["gpu-operator", "nfd-master", "nfd-gc"]
    assert [(d.name, d.per_pod) for d in daemons] == [("nfd-worker", Requests(5, 64 * MIB))]
