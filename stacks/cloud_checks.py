"""Cross-section rules of the cloud tier that need the components' renders: the system node group's budget, and the
models on managed GPU node groups, which nothing grows."""

from __future__ import annotations

from components.aws.system_budget import node_capacity, system_demand
from components.catalog.instances import SYSTEM_INSTANCES, SystemInstanceSpec
from components.kube.budget import biggest, nodes_needed, shortfall, total
from stacks.environment import CONFIG_KEY, CloudEnvironment, ConfigIssue
from stacks.fixed_fleet import Claim, FixedPool, fixed_pool_issues, pool_peak_gpus

MANAGED_FIXED = "a managed node group keeps desiredSize nodes (the kit runs no cluster autoscaler)"


def managed_claims(env: CloudEnvironment) -> list[Claim]:
    """The models placed on managed GPU pools (those ``model_checks`` refuses are left to it)."""
    from components.serving._placement import PlacementProblem, place

    managed = {p.name: p for p in env.gpu_pools if p.provisioner == "managed"}
    claims = []
    for i, model in enumerate(env.models):
        pool = managed.get(model.pool)
        if pool is None:
            continue
        try:
            claims.append(Claim(i, model, place(model, pool).world_size))
        except PlacementProblem:
            continue
    return claims


def managed_pools_fit(env: CloudEnvironment) -> list[ConfigIssue]:
    """A managed pool's size is ``desiredSize`` (or ``minSize``): every model's replicas, and each autoscaled model's
    ceiling, in its GPUs. Karpenter pools grow to ``maxSize`` for pending pods, which the policy pack weighs."""
    pools = {}
    for i, p in enumerate(env.gpu_pools):
        if p.provisioner != "managed":
            continue
        at = f"gpuPools[{i}]"
        grow = f"raise {at}.desiredSize" if p.desired_size is not None else f"set {at}.desiredSize above {p.min_size}"
        grow += " and maxSize" if p.initial_size >= p.max_size else ""
        # A Karpenter pool keeps no floor: minSize and desiredSize above 0 are refused there (cloud_checks).
        karpenter = "set provisioner: karpenter" + (" with minSize 0 and no desiredSize" if p.initial_size else "")
        pools[p.name] = FixedPool(
            p.initial_size * p.spec.gpu_count, f"{p.initial_size} x {p.spec.gpu_count}", MANAGED_FIXED,
            f"{grow}, or {karpenter}",
        )  # fmt: skip
    return fixed_pool_issues(pools, managed_claims(env))


def rollout_surges(env: CloudEnvironment) -> dict[str, bool]:
    """Per model name, whether its rollout may add the new pod before it removes an old one (``rollout_strategy``). On
    a Karpenter pool, always: Karpenter launches the node the new pod asks for. On a managed pool, only while the
    pool's fixed GPUs hold every model on it at its ceiling plus one more of this model's pods: else that pod stays
    Pending and the rollout never finishes."""
    surges = {model.name: env.pool(model.pool).provisioner == "karpenter" for model in env.models}
    claims = managed_claims(env)
    for claim in claims:
        pool = env.pool(claim.model.pool)
        gpus: int = pool.initial_size * pool.spec.gpu_count
        surges[claim.model.name] = pool_peak_gpus(claims, pool.name) + claim.gpus <= gpus
    return surges


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
