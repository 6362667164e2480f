"""Cross-section rules of the on-prem tier: a fixed fleet, a fabric that needs its operator, a store to read, and the
system nodes' budget."""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit

from components.onprem.specs import usable_addresses
from stacks.environment import CONFIG_KEY, ConfigIssue, OnpremEnvironment, repeated_names
from stacks.fixed_fleet import Claim, FixedPool, fixed_pool_issues

POD_INTERFACE = "eth0"
"""A serving pod's interface on the cluster network."""
SECONDARY_INTERFACE = "net1"
"""Multus's name for the first network a pod's ``k8s.v1.cni.cncf.io/networks`` annotation attaches."""
ON_PREM_FIXED = "the on-prem fleet is fixed"


def _checkpoint_gib(model_id: str) -> int:
    """A catalog model's Hugging Face checkpoint on disk: its parameters in BF16, and 5 % for the tokenizer, configs
    and shard headers, rounded up."""
    from components.catalog.models import MODELS

    return math.ceil(MODELS[model_id].params * 2 * 1.05 / 2**30)


def _https(url: str, port: int) -> str:
    """``url`` over HTTPS: its own port if it writes one, else the load balancer's (left out where it is 443)."""
    parts = urlsplit(url)
    netloc = parts.netloc if parts.port is not None or port == 443 else f"{parts.netloc}:{port}"
    return urlunsplit(("https", netloc, parts.path, parts.query, parts.fragment))


def onprem_checks(env: OnpremEnvironment) -> list[ConfigIssue]:
    from components.serving._placement import PlacementProblem, place

    issues: list[ConfigIssue] = []
    names = [p.name for p in env.gpu_pools]
    issues += repeated_names(names, "gpuPools", "pool")

    # Fixed servers cannot grow: the replicas every model asks for, in GPUs, must fit the pool.
    claims: list[Claim] = []
    for i, model in enumerate(env.models):
        found = next((p for p in env.gpu_pools if p.name == model.pool), None)
        if found is None:
            continue  # model_checks names the missing pool
        pool = found
        try:
            placed = place(model, pool)
        except PlacementProblem:
            continue  # model_checks reports it
        gpus = placed.world_size
        at = f"{CONFIG_KEY}.models[{i}]"
        pool_gpus = pool.nodes * pool.gpus_per_node
        if gpus > pool_gpus:
            # One replica alone (a multi-node group) needs more servers than the pool has: no replica count fits.
            servers = math.ceil(gpus / pool.gpus_per_node)
            issues.append(
                ConfigIssue(
                    f"{at}.pipelineParallel",
                    f"{placed.pp} (one replica spans {servers} servers of {pool.gpus_per_node} GPUs; pool "
                    f"{pool.name!r} has {pool.nodes})",
                    f"a replica within the pool's {pool.nodes} servers: {ON_PREM_FIXED}",
                    f"set gpuPools[{names.index(pool.name)}].nodes to {servers} or more (the servers the pool has), "
                    "or serve the model from a pool with more GPU memory per server",
                )
            )
            continue
        claims.append(Claim(i, model, gpus))
        if placed.multi_node(pool.gpus_per_node) and not env.fabric.rdma:
            issues.append(
                ConfigIssue(
                    f"{at}.pipelineParallel",
                    f"{model.pipeline_parallel} (the group spans {placed.pp} servers) with fabric.kind 'none'",
                    "multi-node groups on an RDMA fabric (infiniband or roce)",
                    "set fabric.kind: infiniband, or fit the model in one server",
                )
            )
        if not placed.multi_node(pool.gpus_per_node):
            # A CPU-only llama.cpp server takes no GPU: only its replica count bounds its pods on one server.
            pods_per_node = pool.gpus_per_node // gpus if gpus else model.replica_ceiling
            if pods_per_node > pool.volumes_per_node:
                issues.append(
                    ConfigIssue(
                        f"{CONFIG_KEY}.gpuPools[{names.index(pool.name)}].localVolumesPerNode",
                        f"{pool.volumes_per_node} local volumes per server for up to {pods_per_node} "
                        f"{model.name!r} pods per server",
                        f"at least {pods_per_node}: each serving pod claims one local NVMe volume",
                        f"mount {pods_per_node} directories under localStorage.hostDir on each server and set "
                        f"localVolumesPerNode: {pods_per_node}",
                    )
                )
    fleet = {
        p.name: FixedPool(
            p.nodes * p.gpus_per_node, f"{p.nodes} x {p.gpus_per_node}", ON_PREM_FIXED, "add servers (gpuPools[].nodes)"
        )
        for p in env.gpu_pools
    }
    issues += fixed_pool_issues(fleet, claims)

    gateway = env.gateway
    hub_url = gateway.hub_url or ""
    if gateway.enabled and gateway.tls_secret is not None and hub_url.startswith("http://"):
        # With tlsSecret the gateway serves HTTPS only, on every port (the load balancer forwards plain TCP): a sending
        # stack would speak plain HTTP to it, every burst would fail, and its burst key would cross the LAN in clear.
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.gateway.hubUrl",
                f"{gateway.hub_url!r} with gateway.tlsSecret (the gateway serves HTTPS only)",
                f"an https:// URL naming the certificate's host, on the load balancer's port ({gateway.listen_port})",
                f"write {_https(hub_url, gateway.listen_port)!r}, or remove tlsSecret",
            )
        )

    if env.fabric.rdma and not env.network_operator.install:
        # The cluster's own Network Operator serves the fabric; what the kit would have put in its NicClusterPolicy
        # cannot be asked of that one.
        if env.network_operator.mofed == "operator":
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.networkOperator.mofed",
                    "'operator' with networkOperator.install false",
                    "'host': the kit deploys the DOCA driver only through the NicClusterPolicy it installs",
                    "set networkOperator.mofed: host (the cluster's own policy runs the driver), or install: true",
                )
            )
        if env.fabric.secondary_network is not None:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.fabric.secondaryNetwork",
                    "set with networkOperator.install false",
                    "no secondary network: its Multus, IPoIB CNI and nv-ipam come from the NicClusterPolicy the kit "
                    "installs, and its IP pool from the namespace the kit installs the operator in",
                    "remove fabric.secondaryNetwork (NCCL then runs on the pods' own interface), or set "
                    "networkOperator.install: true",
                )
            )
    if not env.fabric.rdma and env.network_operator.mofed == "operator":
        # Without an RDMA fabric (fabric.rdma) the kit installs no Network Operator, so the DOCA driver container asked
        # for here would never be deployed.
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.networkOperator.mofed",
                "'operator' with fabric.kind 'none'",
                "'host' (or no networkOperator): with no fabric the kit installs no Network Operator, so no DOCA "
                "driver either",
                "remove networkOperator.mofed, or set fabric.kind: infiniband or roce if the servers have HCAs",
            )
        )
    secondary = env.fabric.secondary_network
    if secondary is not None and env.fabric.kind != "infiniband":
        # The IPoIB CNI makes each pod's net1 a child of `master`, an IPoIB interface (Mellanox/ipoib-cni README:
        # "create IPoIB child link"); the kernel has those on InfiniBand ports only (Linux
        # Documentation/infiniband/ipoib.rst).
        # Without a fabric the kit installs no Network Operator, so nothing would create the network at all.
        why = (
            "an Ethernet port has no IPoIB interface for the IPoIB CNI to make each pod's net1 a child of, so every "
            "rank's CNI ADD would fail"
            if env.fabric.kind == "roce"
            else "with no fabric the kit installs no Network Operator, so nothing would create the network"
        )
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.fabric.secondaryNetwork",
                f"an IPoIB network with fabric.kind {env.fabric.kind!r}",
                f"an IPoIB secondary network on an InfiniBand fabric only: {why}",
                "remove fabric.secondaryNetwork (NCCL then runs on the pods' own interface), or set fabric.kind: "
                "infiniband if the servers' HCAs are InfiniBand ports",
            )
        )
    elif secondary is not None:
        # nv-ipam hands out blocks from the subnet's first address on, each ending before its broadcast address
        # (Mellanox/nvidia-k8s-ipam pkg/ipam-controller/allocator: "can't allocate: pool has no free ranges"): a
        # server left without a block fails every rank's CNI ADD on it.
        servers = sum(pool.nodes for pool in env.gpu_pools)
        usable = usable_addresses(secondary.subnet)
        blocks = usable // secondary.per_node_block_size
        if blocks < servers:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.fabric.secondaryNetwork.perNodeBlockSize",
                    f"{secondary.per_node_block_size}: subnet {secondary.subnet} holds {blocks} such blocks for "
                    f"{servers} GPU servers",
                    f"a block per GPU server: at most {usable // servers} addresses per server",
                    f"lower perNodeBlockSize to {usable // servers} or less, or widen subnet",
                )
            )
    pod_interfaces = [POD_INTERFACE, *([SECONDARY_INTERFACE] if secondary is not None else [])]
    if env.fabric.socket_interface is not None and env.fabric.socket_interface not in pod_interfaces:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.fabric.socketInterface",
                repr(env.fabric.socket_interface),
                "an interface inside the serving pods, which are not on the host network: "
                + " or ".join(pod_interfaces),
                f"set socketInterface: {POD_INTERFACE} (the pod network)"
                + (f", or {SECONDARY_INTERFACE} for the secondary network" if secondary is not None else "")
                + ", or remove it and let NCCL pick",
            )
        )
    if secondary is not None and not secondary.master:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.fabric.secondaryNetwork.master",
                "nothing",
                "the hosts' IPoIB interface, e.g. ibs3f1",
                "add master: <interface> (ip -br link on a GPU server)",
            )
        )

    store = env.model_store
    needs = ("endpoint", "bucket") if store.kind == "s3" else ("claimName",)
    for key in needs:
        if getattr(store, "claim_name" if key == "claimName" else key) is None:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.modelStore.{key}",
                    f"nothing with kind {store.kind!r}",
                    "the store's endpoint URL and bucket"
                    if store.kind == "s3"
                    else "the name of a ReadOnlyMany PVC in the serving namespace",
                    f"add modelStore.{key}",
                )
            )
    cache_gib = env.local_storage.model_cache_gib
    for i, model in enumerate(env.models):
        # An EAGLE head (the only draft the pinned vLLM runs: draft_model is refused) is a few hundred MiB to a few GiB
        # beside its target, left to the margin.
        checkpoint_gib = _checkpoint_gib(model.model)
        if model.engine == "vllm" and checkpoint_gib > cache_gib:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.localStorage.modelCacheGib",
                    f"{cache_gib} GiB for {model.name!r}, whose BF16 checkpoint is {checkpoint_gib} GiB",
                    f"at least {checkpoint_gib} GiB: each serving pod copies the whole checkpoint to its NVMe volume",
                    f"set localStorage.modelCacheGib: {checkpoint_gib} or more (local volumes at least that large)",
                )
            )
        if store.kind == "volume" and model.engine != "vllm":
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.models[{i}].engine",
                    f"{model.engine!r} with modelStore.kind 'volume'",
                    "vllm models on a volume store (a Triton engine build uploads to S3; GGUF files are read from S3)",
                    "use modelStore.kind: s3 for this model, or engine: vllm",
                )
            )
        if store.kind == "volume" and model.source is not None:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.models[{i}].source",
                    f"{model.source!r} with modelStore.kind 'volume'",
                    "no source: the checkpoint is <model id>/hf/ on the volume",
                    "remove `source`, or use modelStore.kind: s3",
                )
            )
    issues += _system_nodes_checks(env)
    lb = env.load_balancer
    if lb.kind == "metallb" and lb.metallb is None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.loadBalancer.metallb",
                "nothing with kind 'metallb'",
                "{addresses: [CIDR or a-b range, ...]}",
                "add loadBalancer.metallb.addresses, or use kind: existing",
            )
        )
    if lb.kind == "metallb" and lb.load_balancer_class is not None:
        # The kit installs MetalLB with the chart's loadBalancerClass "" (metallb 0.16.1 values.yaml): it then skips
        # every Service that names a class (metallb internal/k8s/controllers/service_controller.go,
        # filterByLoadBalancerClass).
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.loadBalancer.loadBalancerClass",
                f"{lb.load_balancer_class!r} with kind 'metallb'",
                "no class with kind: metallb: the kit's MetalLB serves only Services without one, so the gateway's "
                "would get no address",
                "remove loadBalancer.loadBalancerClass, or use kind: existing for a load balancer of that class",
            )
        )
    if lb.kind == "existing" and lb.metallb is not None:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.loadBalancer.metallb",
                "set with kind 'existing'",
                "metallb only with kind: metallb",
                "set kind: metallb, or remove the metallb section",
            )
        )
    return issues


def _system_nodes_checks(env: OnpremEnvironment) -> list[ConfigIssue]:
    """Described system nodes: the selector that confines the system pods to them, and a cache one of them holds."""
    from components.cache.redis_cache import redis_demand
    from components.onprem.system_budget import node_capacity

    cluster = env.cluster
    nodes = cluster.system_nodes
    if nodes is None:
        return []
    if not cluster.system_node_selector:
        return [
            ConfigIssue(
                f"{CONFIG_KEY}.cluster.systemNodeSelector",
                "nothing with cluster.systemNodes",
                'labels that pick the servers systemNodes describes, e.g. {node-role.inferstack.io/system: "true"}',
                "label those servers and set systemNodeSelector, so the system pods run where their budget was "
                "counted, or remove cluster.systemNodes",
            )
        ]
    node = node_capacity(nodes, env.gpu_operator, env.network_operator, env.fabric)
    if redis_demand(env.cache).per_pod.memory <= node.memory:
        return []
    for_pods = node.memory / 2**30
    return [
        ConfigIssue(
            f"{CONFIG_KEY}.cache.memoryGib",
            f"{env.cache.memory_gib} (the in-cluster Redis runs on one system node: each has {nodes.memory_gib} GiB, "
            f"{for_pods:.1f} GiB of it for the kit's pods after reservedMemoryGib and the node's DaemonSets)",
            f"at most {int(for_pods)} GiB on these system nodes (cluster.systemNodes)",
            "lower cache.memoryGib, or run the system pods on servers with more memory (cluster.systemNodeSelector "
            "and cluster.systemNodes.memoryGib)",
        )
    ]


def system_nodes_budget(env: OnpremEnvironment) -> list[ConfigIssue]:
    """Every system pod at its most (the gateway at its HPA ceiling plus its rollout's surge pod) against the servers
    ``cluster.systemNodes`` describes: a fixed fleet, so pods that do not fit stay Pending. Nothing where it describes
    none."""
    from components.kube.budget import biggest, nodes_needed, shortfall, total
    from components.onprem.system_budget import node_capacity, system_demand

    nodes = env.cluster.system_nodes
    if nodes is None:
        return []
    gateway = env.gateway if env.gateway.enabled and env.models else None
    sections = (env.gpu_operator, env.network_operator, env.fabric)
    demand = system_demand(gateway, env.cache, env.observability, *sections)
    per_node = node_capacity(nodes, *sections)
    short = shortfall(demand, per_node * nodes.count)
    if not short:
        return []
    asked = total(demand)
    fixes = []
    if per_node.cpu_m > 0 and per_node.memory > 0:
        need = nodes_needed(demand, per_node)
        fixes.append(f"raise cluster.systemNodes.count to {need} (and label {need} servers with systemNodeSelector)")
    # A server that holds its share of the pods on top of what it keeps (its reserve and the DaemonSets).
    kept_m = nodes.cpu * 1000 - per_node.cpu_m
    kept = nodes.memory_gib * 2**30 - per_node.memory
    cpu = max(nodes.cpu, math.ceil((asked.cpu_m / nodes.count + kept_m) / 1000))
    memory_gib = max(nodes.memory_gib, math.ceil((asked.memory / nodes.count + kept) / 2**30))
    plural = "s" if nodes.count > 1 else ""
    fixes.append(
        f"run the system pods on {nodes.count} server{plural} of at least {cpu} cores and {memory_gib} GiB "
        "(cluster.systemNodes.cpu and memoryGib)"
    )
    return [
        ConfigIssue(
            f"{CONFIG_KEY}.cluster.systemNodes",
            f"system pods requesting {asked.show()} on {nodes.count} system node{plural} offering "
            f"{(per_node * nodes.count).show()} after reservedCpu/reservedMemoryGib and each node's DaemonSets "
            f"({', '.join(short)} short); biggest: {biggest(demand)}",
            "every system pod's requests (the gateway at gateway.maxReplicas plus its rollout's surge pod) within "
            "count servers of cpu cores and memoryGib, less the reserved share and DaemonSets of each",
            ", or ".join(fixes) + ", or lower gateway.maxReplicas",
        )
    ]
