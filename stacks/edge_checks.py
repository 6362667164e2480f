"""Cross-section rules of the edge tier: the site's node budget, GPUs per node, the embedder and the hub."""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from components.catalog.models import MODELS
from components.edge.budget import cpu_decoders, node_capacity, placed, site_demand
from components.edge.specs import EdgeNodeSpec
from components.kube.budget import Demand, biggest, shortfall, total
from components.kube.requests import Requests
from stacks.environment import CONFIG_KEY, HUB_TARGET, ConfigIssue, EdgeEnvironment, repeated_names
from stacks.tiers import EDGE


def edge_checks(env: EdgeEnvironment, sound: bool = True) -> list[ConfigIssue]:
    """The site's rules; ``sound``: the rules every tier shares found nothing, so the node budget is worth counting."""
    issues: list[ConfigIssue] = []
    issues += repeated_names([n.name for n in env.nodes], "nodes", "node")
    for i, node in enumerate(env.nodes):
        if node.gpu is None and "gpu_count" in node.model_fields_set:
            # Without a GPU model the count was dropped: the node was planned as CPU-only.
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.nodes[{i}].gpuCount",
                    f"{node.gpu_count} without nodes[{i}].gpu",
                    "gpuCount together with gpu (L4, RTX4000Ada, RTX6000Ada)",
                    "name the GPU with gpu, or remove gpuCount for a CPU-only node",
                )
            )
        for field, size in (("reserved_cpu", "cpu"), ("reserved_memory_gib", "memory_gib")):
            reserved, offered = getattr(node, field), getattr(node, size)
            if reserved >= offered:
                # What k3s and the OS keep comes out of the node: nothing would be left for pods.
                issues.append(
                    ConfigIssue(
                        f"{CONFIG_KEY}.nodes[{i}].{to_camel(field)}",
                        f"{reserved:g} on a node of {to_camel(size)} {offered}",
                        f"less than nodes[{i}].{to_camel(size)}: the share k3s and the OS keep; the rest is the pods'",
                        f"set it to what k3s and the OS use (default {EdgeNodeSpec.model_fields[field].default:g})",
                    )
                )
    if len(env.nodes) > 1 and any(not n.node_selector for n in env.nodes):
        i = next(i for i, n in enumerate(env.nodes) if not n.node_selector)
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.nodes[{i}].nodeSelector",
                "nothing on a site of several nodes",
                "labels that pick this node, e.g. {kubernetes.io/hostname: <node>}",
                "add nodeSelector to every node so each model lands where its budget was counted",
            )
        )

    embedders = [i for i, m in enumerate(env.models) if MODELS[m.model].is_embedding]
    if len(embedders) > 1:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.models[{embedders[1]}].model",
                f"{len(embedders)} embedding models",
                "one: the semantic cache embeds with one model",
                "keep one embedding model",
            )
        )

    hub = env.hub  # a hub without a key, or with the gateway off: hub_checks (every tier)
    if (
        hub is not None
        and env.gateway.enabled
        and not any(r.large == HUB_TARGET for r in env.gateway.routes)
        and not hub.fallback
    ):
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.hub",
                "a hub that no route uses and no model falls back to",
                "a route with large: hub, or hub.fallback: true",
                "route complex prompts to it (gateway.routes[].large: hub), or remove `hub`",
            )
        )

    if issues or not sound:
        # As on the other tiers, only a config that is otherwise sound is worth a budget: a gateway.replicas out of
        # bounds was reported again as a site short of 1e+12 CPU.
        return issues
    issues += _shared_decode(env)
    issues += _budget(env)
    return issues


def _shared_decode(env: EdgeEnvironment) -> list[ConfigIssue]:
    """The ITL floor of CPU decoders that share a node: each reads its weights per token through the node's memory
    bandwidth, which the node's CPU decoders (every replica) split when they decode at once. One decoder alone is held
    to the whole bandwidth by its placement."""
    models_placed = placed(env.nodes, env.models)
    decoders = cpu_decoders(env.nodes, models_placed)
    issues = []
    for spec, node, placement in models_placed:
        sharing = decoders[node.name]
        if sharing < 2 or placement.gpu_offload or placement.model.is_embedding or placement.gguf is None:
            continue
        share = node.memory_bandwidth_gb_s / sharing
        floor_ms = placement.gguf.size_gb / share * 1e3
        if floor_ms > spec.slo.itl_p99_ms:
            i = env.models.index(spec)
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.models[{i}].slo.itlP99Ms",
                    f"{spec.slo.itl_p99_ms:g} ms for {spec.name} on the CPU of {node.name}, shared by {sharing} "
                    "decoding servers",
                    f"at least the decode floor, {floor_ms:.1f} ms ({placement.gguf.size_gb:.2f} GB read per token at "
                    f"{share:g} GB/s, nodes[].memoryBandwidthGbS {node.memory_bandwidth_gb_s:g} split {sharing} ways)",
                    "loosen slo.itlP99Ms, serve fewer chat models or replicas from this node's CPU (models[].pool), "
                    "or set nodes[].memoryBandwidthGbS to the node's measured bandwidth",
                )
            )
    return issues


GPU_FIX = (
    "each replica of a model on a GPU node takes a whole GPU (nvidia.com/gpu: 1; the device plugin shares none, so "
    "smaller models do not help): add GPUs (nodes[].gpuCount), lower models[].replicas, or serve a model from a "
    "CPU-only node (models[].pool)"
)
"""What frees GPUs: a llama.cpp server offloaded to a node's GPU requests one (``llamacpp_resources``)."""


def _fix(short: list[str], fix: str) -> str:
    """``fix`` for a CPU or memory shortfall, ``GPU_FIX`` for a GPU one."""
    gpus = any(s.endswith(" GPU") for s in short)
    others = len(short) > gpus
    return "; ".join([*([fix] if others else []), *([GPU_FIX] if gpus else [])])


def _budget(env: EdgeEnvironment) -> list[ConfigIssue]:
    """Every pod's requests against the site, then each model's pods against its own node."""
    demand = site_demand(
        env.nodes, env.models, env.cache, env.gateway, env.observability, rollout_surge=EDGE.grows_nodes
    )
    capacity = sum((node_capacity(n) for n in env.nodes), Requests())
    issues: list[ConfigIssue] = []
    short = shortfall(demand, capacity)
    if short:
        issues.append(
            ConfigIssue(
                f"{CONFIG_KEY}.nodes",
                f"pods requesting {total(demand).show()} on a site offering {capacity.show()} after k3s's reserve "
                f"({', '.join(short)} short); biggest: {biggest(demand)}",
                "every pod's requests within the nodes' cpu, memoryGib and GPUs, minus reservedCpu/reservedMemoryGib",
                _fix(short, "add or enlarge nodes, lower replicas (gateway.maxReplicas counts), or use smaller models"),
            )
        )
        return issues
    for i, node in enumerate(env.nodes):
        on_node: list[Demand] = [d for d in demand if d.node == node.name]
        short = shortfall(on_node, node_capacity(node))
        if short:
            issues.append(
                ConfigIssue(
                    f"{CONFIG_KEY}.nodes[{i}]",
                    f"pods pinned to {node.instance_type} request more than it offers ({', '.join(short)} short); "
                    f"biggest: {biggest(on_node)}",
                    f"at most {node_capacity(node).show()} of pods pinned to this node",
                    _fix(
                        short,
                        "move a model to another node (models[].pool), lower its replicas, or use a smaller model",
                    ),
                )
            )
    return issues
