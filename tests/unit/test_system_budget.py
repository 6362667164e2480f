"""The cloud's system node group budget: every system pod's requests, read from the renders, against its fixed nodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from components.addons.cluster_addons import LWS_RESOURCES
from components.aws.eks_cluster import ADDON_PODS, ADDON_VERSIONS
from components.aws.system_budget import node_capacity, system_demand
from components.catalog.charts import CHARTS
from components.catalog.instances import SYSTEM_INSTANCES
from components.kube.budget import Demand, shortfall, total
from components.kube.labels import SYSTEM_NODES
from components.kube.requests import Requests, container_requests
from helm_values import load_defaults, unstated_requests
from helpers import config_errors, raw_environment, refused_by_plan, releases_placed_on
from inferstack_cli.plan import Plan
from stacks.environment import CloudEnvironment, load_environment

PlanOf = Callable[[str], Plan]
SOURCE = "stacks/Pulumi.prod.yaml"


def demand_of(stack: str) -> list[Demand]:
    env = load_environment(raw_environment(stack), f"stacks/Pulumi.{stack}.yaml")
    assert isinstance(env, CloudEnvironment)
    return system_demand(
        env.gateway,
        env.cache,
        env.observability,
        kubernetes_version=env.cluster.kubernetes_version,
        karpenter_pools=any(p.provisioner == "karpenter" for p in env.gpu_pools),
        load_balancer=env.gateway.load_balancer != "none",
    )


def test_a_system_pool_too_small_for_its_pods_names_the_biggest_consumers_and_the_fix() -> None:
    # GIVEN prod's system pods (the gateway at maxReplicas 12 plus its surge pod) on three m7i.xlarge nodes
    (line,) = config_errors(lambda e: e["systemPool"].update(instanceType="m7i.xlarge"))
    # THEN one line says what they request against what the nodes offer, the biggest consumers, and the fix
    assert line.startswith(
        f"{SOURCE}: inferstack:environment.systemPool: got system pods requesting 18.24 CPU, 12.2 GiB on 3 m7i.xlarge "
        "nodes offering 11.295 CPU, 44.7 GiB after EKS's kubelet reserve and each node's DaemonSets (6.945 CPU short); "
        "biggest: gateway 13x (1 CPU, 0.2 GiB), prometheus (1.01 CPU, 4.0 GiB), karpenter 2x (1 CPU, 1.0 GiB); "
    )
    assert line.endswith(
        "fix: raise systemPool.desiredSize to 5, or pick a larger systemPool.instanceType (m7i.2xlarge fits on 3), "
        "or lower gateway.maxReplicas"
    )


def test_more_nodes_than_maxsize_allows_names_both_sizes() -> None:
    (line,) = config_errors(lambda e: e["systemPool"].update(instanceType="m7i.large", maxSize=3))
    assert "fix: raise systemPool.desiredSize and maxSize to 11, or pick a larger" in line


def test_the_cli_refuses_a_dev_stack_on_two_system_nodes_with_exit_2(tmp_path: Path) -> None:
    # GIVEN dev's system pool at its minSize, as dev shipped before the budget (two m7i.xlarge)
    line = refused_by_plan(tmp_path, "dev", lambda e: e["systemPool"].pop("desiredSize"))
    # THEN `inferstack plan` exits 2 with the one line, naming the size that fits
    assert "inferstack:environment.systemPool: got system pods requesting 10.04 CPU" in line
    assert "offering 7.53 CPU" in line and "(2.51 CPU short)" in line
    assert "raise systemPool.desiredSize to 3" in line


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_bundled_cloud_stacks_system_pods_fit_their_system_nodes(stack: str) -> None:
    env = CloudEnvironment.model_validate(raw_environment(stack))
    capacity = node_capacity(env.system_pool.spec, env.cluster.kubernetes_version) * env.system_pool.initial_size
    assert shortfall(demand_of(stack), capacity) == []


def test_a_components_requests_change_the_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN prod's system pods
    before = total(demand_of("prod"))
    # WHEN the LeaderWorkerSet controller's values ask one more CPU (what its release installs)
    monkeypatch.setitem(LWS_RESOURCES["requests"], "cpu", "2")
    # THEN the budget counts exactly that CPU more
    assert total(demand_of("prod")) == before + Requests(cpu_m=1000)


def test_a_system_node_offers_its_allocatable_share_less_the_eks_daemonsets() -> None:
    # m7i.xlarge: 4,000m less the AMI's 80m reserve, 16 GiB less 893 MiB kubelet reserve and 100 MiB eviction;
    # less kube-proxy (100m), aws-node (25m) and the EBS CSI node pod (3 x 10m, 3 x 40Mi)
    assert node_capacity(SYSTEM_INSTANCES["m7i.xlarge"], "1.33") == Requests(3920 - 155, (15391 - 120) * 2**20)


def test_every_pinned_kubernetes_version_says_what_its_addons_request() -> None:
    assert set(ADDON_PODS) == set(ADDON_VERSIONS)


def test_every_system_release_is_counted_with_what_its_values_request(plan_of: PlanOf) -> None:
    # GIVEN the Helm releases prod places on the system nodes, as planned
    releases = releases_placed_on(plan_of("prod"), SYSTEM_NODES)
    by_name = {d.name: d for d in demand_of("prod")}

    def counted(name: str) -> tuple[Requests, int]:
        return by_name[name].per_pod, by_name[name].pods

    # THEN the budget counts each one's pods with the requests and replicas its planned values give them
    karpenter, lb, keda = releases["karpenter"], releases["aws-load-balancer-controller"], releases["keda"]
    assert counted("karpenter") == (container_requests(karpenter["controller"]), karpenter["replicas"])
    assert counted("aws-load-balancer-controller") == (container_requests(lb), lb["replicaCount"])
    assert counted("lws-controller") == (container_requests(releases["lws"]), 1)
    assert counted("metrics-server") == (container_requests(releases["metrics-server"]), 1)
    for section, name in [("operator", "keda-operator"), ("webhooks", "keda-admission-webhooks")]:
        assert counted(name) == (container_requests({"resources": keda["resources"][section]}), 1)
    stack = releases["kube-prometheus-stack"]
    assert counted("grafana") == (container_requests(stack["grafana"]), 1)
    assert counted("opentelemetry-collector") == (container_requests(releases["opentelemetry-collector"]), 1)
    # AND no other release on the system nodes is left out
    assert set(releases) == {
        "karpenter", "aws-load-balancer-controller", "keda", "lws", "metrics-server", "kube-prometheus-stack",
        "opentelemetry-collector", "prometheus-redis-exporter",
    }  # fmt: skip


def test_a_system_charts_own_default_requests_are_written_out_in_its_values(plan_of: PlanOf) -> None:
    # GIVEN the charts prod runs on the system nodes and the requests their default values.yaml sets
    releases = releases_placed_on(plan_of("prod"), SYSTEM_NODES)
    hidden = [
        f"{name}: {path}"
        for name, values in releases.items()
        for path in unstated_requests(values, load_defaults(CHARTS[name]))
    ]
    # THEN the kit's values state them, so the budget reads what the pods request from the render
    assert hidden == []
