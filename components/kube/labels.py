"""Node labels: the one source of truth for what a GPU node is labelled with and who selects on it.

Every node provisioner (EKS managed node groups, Karpenter NodePools, and later the on-prem and edge
fleets) labels a GPU node with ``gpu_node_labels``; every selector (the NVIDIA device plugin, the DCGM
exporter, the EFA device plugin, the serving pods) reads its key from the constants below. A NodePool
that forgot one of these labels left ``nvidia.com/gpu`` unadvertised (issue 12, point 8): the device
plugin's affinity never matched the node, so GPU pods stayed Pending. Tier-neutral: no cloud imports.
"""

from __future__ import annotations

from typing import Final

from components.catalog.instances import InstanceSpec

LABEL_PREFIX: Final = "inferstack.io"
GPU_TOLERATION: Final = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
"""What every pod that runs on GPU nodes tolerates: their ``nvidia.com/gpu:NoSchedule`` taint, whatever its value. The
kit's own pools carry ``nvidia.com/gpu=true``; an existing cluster's GPU servers (on-prem, edge) may carry another
value or none, where ``operator: Equal`` with ``true`` would leave the models Pending."""
POOL_LABEL: Final = f"{LABEL_PREFIX}/pool"
"""The pool a node belongs to; serving pods select their pool with it."""
GPU_MODEL_LABEL: Final = f"{LABEL_PREFIX}/gpu-model"
GPU_COUNT_LABEL: Final = f"{LABEL_PREFIX}/gpu-count"
"""Present on every GPU node: the device plugin and DCGM exporter select ``Exists`` on it."""
EFA_LABEL: Final = f"{LABEL_PREFIX}/efa"
"""``"true"`` on nodes with EFA interfaces: the EFA device plugin runs only there (it crash-loops elsewhere)."""
CAPACITY_LABEL: Final = f"{LABEL_PREFIX}/capacity"
TIER_LABEL: Final = f"{LABEL_PREFIX}/tier"
"""On the kit's namespaces: the stack's tier, so the policy pack knows it under ``pulumi preview`` too."""
CLUSTER_STORAGE_CLASSES_ANNOTATION: Final = f"{LABEL_PREFIX}/cluster-storage-classes"
"""On the kit's namespaces, when the config names StorageClasses an existing cluster already has (on-prem's
``persistentStorageClass``): comma-separated, for the policy pack, which sees resources but not the config."""
CLUSTER_LOAD_BALANCER_ANNOTATION: Final = f"{LABEL_PREFIX}/cluster-load-balancer"
"""On the kit's namespaces, when the config says an existing cluster runs its own load balancer (on-prem's
``loadBalancer.kind: existing``): the ``spec.loadBalancerClass`` it serves, empty for Services without one. For the
policy pack, which sees resources but not the config."""
SYSTEM_POOL: Final = "system"
SYSTEM_NODES: Final = {POOL_LABEL: SYSTEM_POOL}
"""Node selector of controllers, the gateway, the cache and observability."""
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
"""Set by the API server on every namespace to its name (Kubernetes 1.22+, "Well-Known Labels"): the one label a
namespaceSelector can name a namespace by, which no one else can put on another namespace."""
GATEWAY_POD_LABELS: Final = {"app.kubernetes.io/name": "inferstack-gateway"}
"""On the gateway's pods (its Deployment's selector): the peer the model servers' and the cache's NetworkPolicies
admit, and what the policy pack knows the gateway's pods by."""
GPU_NODE_SELECTOR_KEY: Final = GPU_COUNT_LABEL
"""The key GPU daemons (device plugin, DCGM exporter) require to exist on a node."""


def gpu_node_labels(pool: str, spec: InstanceSpec, *, efa: bool, capacity: str) -> dict[str, str]:
    """Labels of a GPU node of ``pool``: pool, GPU model, GPU count, EFA and capacity type."""
    return {
        POOL_LABEL: pool,
        GPU_MODEL_LABEL: spec.gpu.model,
        GPU_COUNT_LABEL: str(spec.gpu_count),
        EFA_LABEL: str(efa).lower(),
        CAPACITY_LABEL: capacity,
    }


GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
"""Set by the NVIDIA GPU Operator on every node with an NVIDIA GPU (bare metal, where the kit labels no node)."""


def gpu_node_affinity(key: str = GPU_NODE_SELECTOR_KEY) -> dict[str, object]:
    """Required node affinity of the GPU daemons: any node carrying ``key`` (the kit's label by default)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "Exists"}]}]
            }
        }
    }


def efa_node_selector() -> dict[str, str]:
    return {EFA_LABEL: "true"}
