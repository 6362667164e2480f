"""NetworkOperator: NVIDIA Network Operator and its NicClusterPolicy for an InfiniBand or RoCE fabric.

Since v24.10 the chart no longer creates the NicClusterPolicy (Mellanox/network-operator commit 8fc96f20); the
operator reconciles only the one named ``nic-cluster-policy`` (its README), so the kit applies it itself.
The policy runs the RDMA shared device plugin (``rdma/<resource>``, what serving pods request), optionally the
DOCA/MOFED driver container, and optionally a Multus IPoIB secondary network with NVIDIA IPAM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from components.catalog.charts import CHARTS
from components.catalog.images import NETWORK_OPERATOR_COMPONENTS, NETWORK_OPERATOR_REPOSITORY
from components.kube.budget import Demand, demand
from components.kube.helm import release
from components.kube.objects import MANAGED_BY, custom_resource
from components.onprem._values import network_operator_values, nfd_demand
from components.onprem.specs import FabricSpec, NetworkOperatorSpec
from components.specs import Args, ComponentNamespace

NIC_CLUSTER_POLICY: Final = "nic-cluster-policy"
MELLANOX_VENDOR: Final = "15b3"
IPOIB_NETWORK: Final = "ib-fabric"

SECONDARY_NETWORK_PODS: Final[dict[str, dict[str, Any]]] = {
    "kube-multus": {"requests": {"cpu": "100m", "memory": "50Mi"}},
    "cni-plugins": {"requests": {"cpu": "100m", "memory": "50Mi"}},
    "ipoib-cni": {"requests": {"cpu": "100m", "memory": "50Mi"}},
    "nv-ipam-node": {"requests": {"cpu": "100m", "memory": "50Mi"}},
}
"""The pods a secondary network's DaemonSets run on every node (the kit's policy sets no ``nodeAffinity``), as the
operator renders them when the policy sets no ``containerResources`` (Mellanox/network-operator v26.4.1
``manifests/state-multus-cni``, ``state-container-networking-plugins``, ``state-ipoib-cni``, ``state-nv-ipam-cni``;
multus's init container asks less). The RDMA shared device plugin and the DOCA driver request nothing, and nv-ipam's
controller (two pods) prefers the control-plane nodes."""


def operator_demand(fabric: FabricSpec) -> tuple[list[Demand], list[Demand]]:
    """The Network Operator's pods off the GPU servers, read from the values it installs: (its Deployment's pod, NFD's
    master and garbage collector; the pods each node runs: NFD's worker and, with a secondary network, its CNI)."""
    values = network_operator_values()
    cluster, daemons = nfd_demand(values["node-feature-discovery"])
    if fabric.secondary_network is not None:
        daemons += [demand(name, resources) for name, resources in SECONDARY_NETWORK_PODS.items()]
    return [demand("network-operator", values["operator"]["resources"]), *cluster], daemons


def rdma_plugin_config(fabric: FabricSpec) -> str:
    """The shared RDMA device plugin's JSON config: one resource for every HCA the selector matches.

    The selector is explicit on purpose: a selector that matches nothing advertises 0 devices and pods stay
    Pending (Mellanox/network-operator #438): set ``fabric.deviceIds`` to the HCAs' PCI device id.
    """
    selectors: dict[str, Any] = {"vendors": [MELLANOX_VENDOR]}
    if fabric.device_ids:
        selectors["deviceIDs"] = list(fabric.device_ids)
    entry = {"resourceName": fabric.rdma_resource_name, "rdmaHcaMax": fabric.rdma_hca_max, "selectors": selectors}
    return json.dumps({"configList": [entry]}, sort_keys=True)


def _component(image: str) -> dict[str, str]:
    version = NETWORK_OPERATOR_COMPONENTS[image]
    return {"image": image, "repository": NETWORK_OPERATOR_REPOSITORY, "version": version}


def nic_cluster_policy(spec: NetworkOperatorSpec, fabric: FabricSpec) -> dict[str, Any]:
    """The NicClusterPolicy manifest (``mellanox.com/v1alpha1``)."""
    policy: dict[str, Any] = {
        "rdmaSharedDevicePlugin": {**_component("k8s-rdma-shared-dev-plugin"), "config": rdma_plugin_config(fabric)},
    }
    if spec.mofed == "operator":
        policy["ofedDriver"] = {
            **_component("doca-driver"),
            # One server at a time: a driver upgrade drains the node and reloads the kernel modules.
            "upgradePolicy": {
                "autoUpgrade": True,
                "maxParallelUpgrades": 1,
                "drain": {"enable": True, "force": True, "deleteEmptyDir": True, "timeoutSeconds": 300},
            },
        }
    if fabric.secondary_network is not None:
        policy["secondaryNetwork"] = {
            "multus": _component("multus-cni"),
            "cniPlugins": _component("plugins"),
            "ipoib": _component("ipoib-cni"),
        }
        policy["nvIpam"] = {**_component("nvidia-k8s-ipam"), "enableWebhook": False}
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": NIC_CLUSTER_POLICY, "labels": dict(MANAGED_BY)},
        "spec": policy,
    }


def secondary_network_objects(
    fabric: FabricSpec, namespace: str, gpu_node_selectors: Sequence[Mapping[str, str]] = ()
) -> list[dict[str, Any]]:
    """The IP pool and the IPoIB network serving pods attach to (facts-tiers §2, nv-ipam and IPoIBNetwork).

    nv-ipam's controller gives every node its pool's ``nodeSelector`` matches a block of ``perNodeBlockSize``
    addresses, every node when it has none (IPPool CRD: "selector for nodes, if empty match all nodes"). So the pool
    selects the GPU servers (``gpu_node_selectors``, one term per pool: terms are ORed); the system and control-plane
    nodes, which have no IPoIB interface, take no block of the subnet.
    """
    net = fabric.secondary_network
    if net is None:
        return []
    pool: dict[str, Any] = {"subnet": net.subnet, "perNodeBlockSize": net.per_node_block_size}
    if net.gateway:
        pool["gateway"] = net.gateway
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(selector.items())]}
        for selector in gpu_node_selectors
        if selector
    ]
    if terms:
        pool["nodeSelector"] = {"nodeSelectorTerms": terms}
    return [
        {
            "apiVersion": "nv-ipam.nvidia.com/v1alpha1",
            "kind": "IPPool",
            "metadata": {"name": IPOIB_NETWORK, "namespace": CHARTS["network-operator"].namespace},
            "spec": pool,
        },
        {
            "apiVersion": "mellanox.com/v1alpha1",
            "kind": "IPoIBNetwork",
            "metadata": {"name": IPOIB_NETWORK, "labels": dict(MANAGED_BY)},
            "spec": {
                "networkNamespace": namespace,
                "master": net.master,
                "ipam": json.dumps({"type": "nv-ipam", "poolName": IPOIB_NETWORK}),
            },
        },
    ]


class NetworkOperatorArgs(Args):
    spec: NetworkOperatorSpec
    """Required: the stack's ``networkOperator`` section (what the kit's NicClusterPolicy deploys)."""
    fabric: FabricSpec
    """Required: the GPU fabric (``kind``, HCAs) decides the NicClusterPolicy and the secondary network that serving
    pods attach to."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    serving_namespace: ComponentNamespace
    """Where the secondary network's NetworkAttachmentDefinition is created (the serving pods' namespace)."""
    system_node_selector: dict[str, str] = Field(default_factory=dict)
    """Labels of the nodes the operator and NFD's master run on (``cluster.systemNodeSelector``)."""
    gpu_node_selectors: list[dict[str, str]] = Field(default_factory=list)
    """Each GPU pool's node labels: the servers the IPoIB network's IP pool gives addresses to."""


class NetworkOperator(pulumi.ComponentResource):
    network: str | None
    """``namespace/name`` of the Multus network serving pods attach to, or ``None``."""

    def __init__(self, name: str, args: NetworkOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:network_operator:NetworkOperator", name, None, opts)
        chart = release(
            "network-operator",
            network_operator_values(args.system_node_selector),
            parent=self,
            component=name,
            provider=args.provider,
        )
        after = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[chart])
        policy = custom_resource(f"{name}-nic-cluster-policy", nic_cluster_policy(args.spec, args.fabric), after)
        objects = secondary_network_objects(args.fabric, args.serving_namespace, args.gpu_node_selectors)
        for manifest in objects:
            custom_resource(
                f"{name}-{manifest['kind'].lower()}",
                manifest,
                pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[policy]),
            )
        self.network = f"{args.serving_namespace}/{IPOIB_NETWORK}" if objects else None
        self.register_outputs({})
