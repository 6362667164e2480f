"""The tier plug-ins: what each tier composes, what it provides, and what it declares it cannot do.

Config validation reads ``unsupported`` so a key the chosen tier cannot honour is refused by name, with
the reason and the alternative, before anything is planned (SkyPilot's ``UNSUPPORTED_FEATURES`` idea).
Compose modules are imported lazily by ``stacks.program``: a non-cloud tier never imports ``pulumi_aws``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

_ANY = object()


@dataclass(frozen=True)
class Unsupported:
    """One config key (optionally one value of it) that a tier refuses."""

    path: str
    """camelCase key path; ``[]`` walks every item of a list, e.g. ``gpuPools[].efa``."""
    why: str
    instead: str
    """The fix: what to write instead on this tier."""
    value: Any = _ANY
    """Refuse only this value (``cache.kind`` = ``elasticache``); by default any value."""

    def find(self, raw: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
        """Every (path, value) in ``raw`` this rule matches, paths with list indexes filled in."""

        def walk(node: Any, parts: list[str], at: str) -> Iterator[tuple[str, Any]]:
            if not parts:
                if self.value is _ANY or node == self.value:
                    yield at, node
                return
            head, rest = parts[0], parts[1:]
            items = head.endswith("[]")
            key = head[:-2] if items else head
            if not isinstance(node, Mapping) or key not in node:
                return
            child = node[key]
            where = f"{at}.{key}" if at else key
            if items:
                for i, item in enumerate(child if isinstance(child, list) else []):
                    yield from walk(item, rest, f"{where}[{i}]")
            else:
                yield from walk(child, rest, where)

        yield from walk(raw, self.path.split("."), "")


@dataclass(frozen=True)
class TierPlugin:
    name: str
    compose_module: str
    """``compose(env, stack) -> outputs``; imported only when this tier is planned."""
    provides: tuple[str, ...]
    grows_nodes: bool
    """A node autoscaler adds the GPU node a pending pod asks for (Karpenter). Where it does, a model's rollout
    brings the new pod up before the old one goes (``maxSurge: 1``); on fixed hardware that extra pod would wait
    for a GPU no node has, so a rollout replaces one pod at a time (``components.serving.inference_server``,
    ``rollout_strategy``)."""
    unsupported: tuple[Unsupported, ...] = field(default=())


_AWS_ONLY = "an AWS concept; the on-prem cluster already exists"
_FIXED_FLEET = "on-prem servers are a fixed fleet described by gpuPools[].nodes"

_OWN_EKS = "the cloud tier creates its own EKS cluster and reaches it through that cluster's provider"

CLOUD = TierPlugin(
    name="cloud",
    compose_module="stacks.cloud",
    provides=(
        "EKS cluster, VPC, managed system nodes",
        "GPU pools: managed node groups or Karpenter; EFA, cluster placement groups, NVMe RAID0",
        "S3 model store and ECR repositories; ElastiCache for Valkey or in-cluster Redis",
        "serving (vLLM, Triton + TensorRT-LLM), gateway, KEDA, observability",
    ),
    # Karpenter pools add the node a pending pod asks for. A managed node group keeps its desiredSize (no cluster
    # autoscaler runs): a model on one surges only where the group has room (stacks.cloud_checks.rollout_surges).
    grows_nodes=True,
    unsupported=(
        Unsupported(
            "fabric", "InfiniBand/RoCE fabrics are on-prem; AWS pools use EFA", "remove `fabric` (EFA is derived)"
        ),
        Unsupported("gpuOperator", "EKS's AL2023 NVIDIA AMI ships the driver", "remove `gpuOperator`"),
        Unsupported("networkOperator", "no InfiniBand on AWS", "remove `networkOperator`"),
        Unsupported("localStorage", "instance-store NVMe is striped by nodeadm/Karpenter", "remove `localStorage`"),
        Unsupported(
            "loadBalancer", "the AWS Load Balancer Controller serves the cloud tier", "use gateway.loadBalancer"
        ),
        # The keys of an existing cluster (on-prem and edge): the cloud tier creates its own EKS cluster and nodes.
        Unsupported("cluster.kubeconfigSecret", _OWN_EKS, "remove it"),
        Unsupported("cluster.context", _OWN_EKS, "remove it"),
        Unsupported(
            "cluster.systemNodeSelector",
            "the kit labels its own system node group",
            "remove it; size the system pool with systemPool",
        ),
        Unsupported(
            "cluster.systemNodes",
            "system pods run on the kit's managed system node group, which grows within its bounds",
            "remove it; size it with systemPool.instanceType, minSize and maxSize",
        ),
        Unsupported(
            "nodes", "nodes[] describes an edge site's fixed nodes; cloud pools scale", "use gpuPools[] and systemPool"
        ),
        Unsupported(
            "imageRegistry",
            "the cloud stack pushes to its own ECR repositories",
            "remove it; list repositories in modelStore.imageRepositories",
        ),
        Unsupported(
            "persistentStorageClass",
            "claims on EKS use the kit's default class, encrypted gp3 on the EBS CSI driver",
            "remove it",
        ),
        Unsupported("gpuPools[].nodeSelector", "cloud pools are labelled by the kit", "use gpuPools[].instanceType"),
        Unsupported("gpuPools[].gpu", "the GPU follows from the instance type", "use gpuPools[].instanceType"),
        Unsupported("gpuPools[].nodes", "cloud pools scale", "use gpuPools[].minSize / maxSize"),
        Unsupported(
            "gateway.tlsSecret",
            "the internal NLB terminates TLS on 443 with an ACM certificate",
            "use gateway.tlsCertificateArn",
        ),
        Unsupported(
            "gateway.loadBalancerPort",
            "the internal NLB terminates TLS on 443 only: API keys never cross the network in clear text",
            "remove it; clients use https://<load balancer>/v1",
        ),
    ),
)

ONPREM = TierPlugin(
    name="onprem",
    compose_module="stacks.onprem",
    provides=(
        "an existing Kubernetes cluster through one explicit provider (kubeconfig as a Pulumi secret)",
        "fixed bare-metal GPU pools found by node labels; NVIDIA GPU Operator",
        "InfiniBand/RoCE: NVIDIA Network Operator, NicClusterPolicy, RDMA shared device plugin, NCCL settings",
        "local NVMe through the local static provisioner; MetalLB or an existing load balancer",
        "S3-compatible model store (MinIO, Ceph RGW) or a pre-filled volume; in-cluster Redis with search",
        "serving (vLLM, Triton + TensorRT-LLM), gateway, KEDA, observability: the cloud tier's components",
    ),
    grows_nodes=False,  # no node autoscaler: _FIXED_FLEET
    unsupported=(
        Unsupported("region", _AWS_ONLY, "remove `region`"),
        Unsupported("network", "the cluster's network exists already", "remove `network`"),
        Unsupported("tags", "no AWS resources are created on-prem", "remove `tags`"),
        Unsupported("systemPool", _AWS_ONLY, "remove `systemPool`; use cluster.systemNodeSelector"),
        Unsupported("cluster.kubernetesVersion", "the cluster exists already", "remove it"),
        Unsupported("cluster.endpointPublicAccessCidrs", _AWS_ONLY, "remove it"),
        Unsupported("cluster.adminRoleArns", "IAM roles are AWS; access comes from your kubeconfig", "remove it"),
        Unsupported("cluster.logTypes", "EKS control-plane logs are AWS", "remove it"),
        Unsupported("cluster.amiReleaseVersion", "the servers' OS is yours, not an EKS AMI", "remove it"),
        Unsupported("cluster.deployerCidrs", "the EKS endpoint's allow-list is AWS", "remove it"),
        Unsupported("cluster.deployerSecurityGroupIds", "security groups are AWS", "remove it"),
        Unsupported(
            "gateway.tlsCertificateArn",
            "ACM certificates terminate on an AWS NLB",
            "remove it; the LAN load balancer forwards TCP (README, on-prem quick start)",
        ),
        Unsupported("gpuPools[].instanceType", "no EC2 instances on-prem", "use gpu, gpusPerNode and nodeSelector"),
        Unsupported("gpuPools[].efa", "no EFA off AWS", "remove `efa`; set `fabric` (InfiniBand or RoCE)"),
        Unsupported("gpuPools[].placementGroup", "placement groups are EC2", "use fabric.topologyLabel"),
        Unsupported("gpuPools[].capacity", "reservations and Capacity Blocks are EC2", "remove `capacity`"),
        Unsupported("gpuPools[].provisioner", "no node autoscaler: " + _FIXED_FLEET, "remove `provisioner`"),
        Unsupported("gpuPools[].minSize", _FIXED_FLEET, "use gpuPools[].nodes"),
        Unsupported("gpuPools[].maxSize", _FIXED_FLEET, "use gpuPools[].nodes"),
        Unsupported("gpuPools[].desiredSize", _FIXED_FLEET, "use gpuPools[].nodes"),
        Unsupported("gpuPools[].zone", "availability zones are AWS", "remove `zone`; use nodeSelector"),
        Unsupported("gpuPools[].rootVolumeGib", "the servers' disks are yours", "remove `rootVolumeGib`"),
        Unsupported("cache.kind", "ElastiCache is AWS-only", "use `kind: in-cluster`", value="elasticache"),
        Unsupported("cache.nodeType", "ElastiCache is AWS-only", "remove it; size with cache.memoryGib"),
        Unsupported(
            "cache.replicas",
            "ElastiCache's node count; the in-cluster Redis runs one replica",
            "remove it; size with cache.memoryGib",
        ),
        Unsupported("modelStore.imageRepositories", "ECR is AWS-only", "push images to your own registry"),
        Unsupported("modelStore.forceDestroy", "the kit creates no bucket on-prem", "remove it"),
        Unsupported("modelStore.protect", "the kit creates no bucket on-prem", "remove it"),
    ),
)

_K3S = "the site runs k3s"
_FIXED_SITE = "an edge site is a fixed set of nodes (nodes[])"
_NOT_A_HUB = "an edge site is never a hub (only cloud and on-prem stacks take other stacks' traffic)"

EDGE = TierPlugin(
    name="edge",
    compose_module="stacks.edge",
    provides=(
        "an existing k3s cluster at one site through one explicit provider (kubeconfig as a Pulumi secret)",
        "the site's nodes as a budget: CPU, memory and an optional small GPU (L4, RTX 4000/6000 Ada); every pod's "
        "requests must fit",
        "GPUs on k3s: the NVIDIA device plugin and DCGM exporter with runtimeClassName nvidia; GPU pods likewise",
        "llama.cpp (GGUF, CPU or GPU offload) next to vLLM; a CPU embedding model for the semantic cache",
        "k3s built-ins, not duplicates: local-path storage, servicelb for the gateway's LoadBalancer, "
        "k3s's metrics-server",
        "gateway with exact + semantic cache on a small in-cluster Redis; a hub (StackReference or URL + key) "
        "for complex prompts and fallback",
        "Prometheus kept two days and forwarded to the hub (remoteWrite); the same dashboards",
    ),
    grows_nodes=False,  # _FIXED_SITE
    unsupported=(
        Unsupported("region", "no AWS resources at the edge", "remove `region`"),
        Unsupported("network", "the site's network exists already", "remove `network`"),
        Unsupported("tags", "no AWS resources at the edge", "remove `tags`"),
        Unsupported("systemPool", _K3S, "remove `systemPool`; describe the site in nodes[]"),
        Unsupported(
            "gpuPools",
            "cloud and on-prem GPU pools; " + _FIXED_SITE,
            "describe the site in nodes[] ({name, cpu, memoryGib, gpu: L4})",
        ),
        Unsupported(
            "nodes[].instanceType",
            "EC2 instance types are the cloud tier's",
            "name the node's GPU with nodes[].gpu (L4, RTX4000Ada, RTX6000Ada) or leave it out for CPU",
        ),
        Unsupported("cluster.kubernetesVersion", "the k3s cluster exists already", "remove it"),
        Unsupported("cluster.endpointPublicAccessCidrs", "an EKS setting", "remove it"),
        Unsupported("cluster.adminRoleArns", "IAM roles are AWS; access comes from your kubeconfig", "remove it"),
        Unsupported("cluster.logTypes", "EKS control-plane logs are AWS", "remove it"),
        Unsupported("cluster.systemNodeSelector", "a site's pods share its nodes", "remove it"),
        Unsupported("cluster.systemNodes", "a site's pods share its nodes", "remove it; describe the site in nodes[]"),
        Unsupported("fabric", "no InfiniBand at the edge; models fit one node", "remove `fabric`"),
        Unsupported("gpuOperator", "k3s finds the NVIDIA runtime itself; the device plugin serves GPUs", "remove it"),
        Unsupported("networkOperator", "no InfiniBand at the edge", "remove `networkOperator`"),
        Unsupported("localStorage", "k3s's local-path provisioner holds the model cache", "remove `localStorage`"),
        Unsupported(
            "loadBalancer",
            "k3s's built-in service load balancer (servicelb) serves LoadBalancer Services",
            "remove it; set gateway.loadBalancer: internal for a site address",
        ),
        Unsupported("persistentStorageClass", "claims use k3s's local-path class", "remove it"),
        Unsupported(
            "gateway.tlsCertificateArn",
            "ACM certificates terminate TLS on an AWS NLB; servicelb forwards TCP",
            "remove it; the site's load balancer forwards TCP (README, edge quick start)",
        ),
        Unsupported("gateway.hubUrl", _NOT_A_HUB, "remove it; name this site's own hub under `hub:`"),
        Unsupported("gateway.burstTenant", _NOT_A_HUB, "remove it; the hub stack issues the key this site uses"),
        Unsupported(
            "observability.remoteWriteReceiver",
            _NOT_A_HUB + ": it forwards its samples (observability.remoteWrite), nothing writes to it",
            "remove it; turn it on in the hub stack",
        ),
        Unsupported(
            "observability.remoteWriteSources",
            _NOT_A_HUB + ": it runs no remote-write receiver for sources to reach",
            "remove it; list the sites' sources in the hub stack, next to its remoteWriteReceiver",
        ),
        Unsupported("cache.kind", "ElastiCache is AWS-only", "use `kind: in-cluster`", value="elasticache"),
        Unsupported("cache.nodeType", "ElastiCache is AWS-only", "remove it; size with cache.memoryGib"),
        Unsupported(
            "cache.replicas",
            "ElastiCache's node count; the in-cluster Redis runs one replica",
            "remove it; size with cache.memoryGib",
        ),
        Unsupported("modelStore.imageRepositories", "ECR is AWS-only", "push images to your own registry"),
        Unsupported("modelStore.forceDestroy", "the kit creates no bucket at the edge", "remove it"),
        Unsupported("modelStore.protect", "the kit creates no bucket at the edge", "remove it"),
        Unsupported("models[].tensorParallel", "an edge model runs on one GPU or on CPU", "remove it"),
        Unsupported("models[].pipelineParallel", "an edge model runs on one node", "remove it"),
        Unsupported("models[].autoscaling", "replicas are fixed at the edge (no KEDA)", "set models[].replicas"),
    ),
)

TIER_PLUGINS: Mapping[str, TierPlugin] = MappingProxyType({t.name: t for t in (CLOUD, ONPREM, EDGE)})
