"""Cross-section rules of the cloud tier that need the components' renders: the system node group's budget."""

from __future__ import annotations

from components.aws.system_budget import node_capacity, system_demand
from components.catalog.instances import SYSTEM_INSTANCES, SystemInstanceSpec
from components.kube.budget import biggest, nodes_needed, shortfall, total
from stacks.environment import CONFIG_KEY, CloudEnvironment, ConfigIssue


def system_pool_budget(env: CloudEnvironment) -> list[ConfigIssue]:
    """Every system pod at its most (the gateway at its HPA ceiling plus its rollout's surge pod) against the fixed
    system node group: pods that do not fit stay Pending, and no autoscaler adds a node."""
    gateway = env.gateway if env.gateway.enabled and env.models else None
    version = env.cluster.kubernetes_version
    demand = system_demand(
        gateway,
        env.cache,
        env.observability,
        kubernetes_version=version,
        karpenter_pools=any(p.provisioner == "karpenter" for p in env.gpu_pools),
        load_balancer=gateway is not None and gateway.load_balancer != "none",
    )
    pool = env.system_pool
    nodes = pool.initial_size
    per_node = node_capacity(pool.spec, version)
    short = shortfall(demand, per_node * nodes)
    if not short:
        return []
    need = nodes_needed(demand, per_node)
    size = f"desiredSize to {need}" if need <= pool.max_size else f"desiredSize and maxSize to {need}"
    larger = next((t for t in _larger(pool.spec) if not shortfall(demand, node_capacity(t, version) * nodes)), None)
    fix = f"raise systemPool.{size}"
    if larger is not None:
        fix += f", or pick a larger systemPool.instanceType ({larger.instance_type} fits on {nodes})"
    return [
        ConfigIssue(
            f"{CONFIG_KEY}.systemPool",
            f"system pods requesting {total(demand).show()} on {nodes} {pool.instance_type} nodes offering "
            f"{(per_node * nodes).show()} after EKS's kubelet reserve and each node's "
            f"DaemonSets ({', '.join(short)} short); biggest: {biggest(demand)}",
            "every system pod's requests (the gateway at gateway.maxReplicas plus its rollout's surge pod) within "
            "desiredSize nodes of systemPool.instanceType",
            fix + ", or lower gateway.maxReplicas",
        )
    ]


def _larger(instance: SystemInstanceSpec) -> list[SystemInstanceSpec]:
    """The same family's larger sizes, smallest first."""
    family = instance.instance_type.split(".", 1)[0]
    same = [s for s in SYSTEM_INSTANCES.values() if s.instance_type.split(".", 1)[0] == family]
    return sorted((s for s in same if s.vcpus > instance.vcpus), key=lambda s: s.vcpus)
