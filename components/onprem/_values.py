"""Helm values for the on-prem charts, as pure functions of the tier's settings.

Render, then provision: the on-prem components pass these dicts to ``components.kube.helm.release``, and
``tests/unit/test_onprem_values.py`` checks every key against the pinned chart's own ``values.yaml``
(vendored in ``tests/charts/``). Only keys the kit means to change, or relies on, are set; the rest stay
the chart's defaults. No Pulumi imports here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.catalog.charts import prometheus_selector_labels
from components.kube.budget import Demand, demand
from components.kube.labels import GPU_TOLERATION

MIG_STRATEGIES = ("none", "single", "mixed")
"""GPU Operator ``mig.strategy`` values: how MIG slices are advertised (``nvidia.com/gpu`` vs
``nvidia.com/mig-<g>g.<mem>gb``)."""


def _placed(system: Mapping[str, str] | None, *sections: str) -> dict[str, Any]:
    """``{section: {"nodeSelector": system}}`` for each chart section, placing its pods on the cluster's system nodes;
    nothing where none are named (the chart's own placement stays)."""
    return {section: {"nodeSelector": dict(system)} for section in sections} if system else {}


def _pods(system: Mapping[str, str] | None, resources: Mapping[str, Any], placed: tuple[str, ...]) -> dict[str, Any]:
    """Chart sections, each with its pods' ``resources``; those ``placed`` run on the cluster's system nodes."""
    on = {"nodeSelector": dict(system)} if system else {}
    return {section: {**(on if section in placed else {}), "resources": r} for section, r in resources.items()}


NFD_CLUSTER_PODS = ("master", "gc")
"""NFD's cluster-wide pods (its ``worker`` DaemonSet labels every node, so it is never placed)."""
NFD_RESOURCES: Mapping[str, dict[str, Any]] = {
    "master": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    "gc": {"requests": {"cpu": "10m", "memory": "128Mi"}},
    "worker": {"requests": {"cpu": "5m", "memory": "64Mi"}},
}
"""Node Feature Discovery's pods: the master and the garbage collector, one pod each, and the worker's on every node.
The requests of both NFD subcharts (``master``/``gc``/``worker.resources`` of node-feature-discovery 0.19.0 under the
GPU Operator, and of the Network Operator's own 0.2.1), written out so the render says what the pods request; the
charts' limits (4Gi, 1Gi, 512Mi) stay in force, as Helm merges these values into its own."""
GPU_OPERATOR_RESOURCES: dict[str, Any] = {"requests": {"cpu": "200m", "memory": "100Mi"}}
"""The GPU Operator's own Deployment, one pod: the chart's requests (gpu-operator v26.7.0 ``values.yaml``
``operator.resources``), written out so the render says what it requests (its limits, 500m and 350Mi, stay). The
operands (driver, toolkit, device plugin, validators) are DaemonSets on the GPU nodes."""
NETWORK_OPERATOR_RESOURCES: dict[str, Any] = {"requests": {"cpu": "5m", "memory": "64Mi"}}
"""The Network Operator's own Deployment, one pod: the chart's requests (network-operator 26.4.1 ``values.yaml``
``operator.resources``), written out so the render says what it requests (its limits, 500m and 128Mi, stay)."""


def nfd_demand(values: Mapping[str, Any]) -> tuple[list[Demand], list[Demand]]:
    """NFD's pods as its ``node-feature-discovery`` values request them: (the master's and garbage collector's, the
    worker pod each node runs)."""
    pods = {section: demand(f"nfd-{section}", values[section]["resources"]) for section in NFD_RESOURCES}
    return [pods[section] for section in NFD_CLUSTER_PODS], [pods["worker"]]


def gpu_operator_values(
    *,
    driver_managed: bool,
    rdma: bool,
    mig_strategy: str,
    dcgm_service_monitor: bool,
    toolkit_managed: bool = True,
    dcgm_exporter: bool = True,
    system_node_selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Values for ``gpu-operator`` v26.7.0.

    ``driver_managed``: the operator installs the GPU driver. False on hosts that ship one (DGX OS): a
    driver container there crash-loops against the loaded module (NVIDIA/gpu-operator#130, #327).

    ``rdma``: GPUDirect RDMA over the InfiniBand the Network Operator sets up. The kit uses DMA-BUF, which
    NVIDIA recommends over the legacy ``nvidia-peermem`` module (gpu-operator-rdma.rst); it needs the
    open kernel module, and no MOFED. So ``driver.rdma.enabled``/``useHostMofed`` stay off: the operator
    reads ``useHostMofed`` only for ``nvidia-peermem`` (``GPUDirectRDMASpec.IsHostMOFED`` in
    api/nvidia/v1/clusterpolicy_types.go at v26.7.0 is ``IsEnabled() && UseHostMOFED``).

    ``dcgm_service_monitor``: the chart's bundled DCGM exporter gets a ServiceMonitor that the kit's
    Prometheus selects. Its default turned to true in v26.7.0 (PR #2262), without the selector label.

    ``toolkit_managed``: the operator installs the container toolkit (off where the host has it).
    ``dcgm_exporter``: off where the kit installs its own pinned ``dcgm-exporter`` release instead (same
    exporter version, dashboards and alerts on every tier).
    ``system_node_selector``: the operator's Deployment and NFD's master and garbage collector run on the
    cluster's system nodes (``operator.nodeSelector``, merged by Helm into the chart's ``kubernetes.io/os``
    default); the operands are DaemonSets on the GPU nodes, placed by the operator.
    """
    if mig_strategy not in MIG_STRATEGIES:
        raise ValueError(f"mig_strategy={mig_strategy!r}: expected one of {', '.join(MIG_STRATEGIES)}")
    driver: dict[str, Any] = {"enabled": driver_managed}
    if driver_managed and rdma:
        # DMA-BUF needs the open GPU kernel module; "auto" picks by driver branch and GPU, so say it.
        driver["kernelModuleType"] = "open"
    service_monitor: dict[str, Any] = {"enabled": dcgm_service_monitor}
    if dcgm_service_monitor:
        service_monitor["additionalLabels"] = prometheus_selector_labels()
    values: dict[str, Any] = {
        # One NFD per cluster. With RDMA the Network Operator is installed and runs NFD with the
        # NodeFeature API its NodeFeatureRules need (network_operator_values), so the GPU Operator's own
        # NFD subchart stays off (the Network Operator README: "If NFD is already deployed ... pass
        # --set nfd.enabled=false").
        "nfd": {"enabled": not rdma},
        "driver": driver,
        "toolkit": {"enabled": toolkit_managed},
        "mig": {"strategy": mig_strategy},
        "dcgmExporter": {"enabled": True, "serviceMonitor": service_monitor} if dcgm_exporter else {"enabled": False},
    }
    values |= _pods(system_node_selector, {"operator": GPU_OPERATOR_RESOURCES}, ("operator",))
    if not rdma:
        values["node-feature-discovery"] = _pods(system_node_selector, NFD_RESOURCES, NFD_CLUSTER_PODS)
    return values


def network_operator_values(system_node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Values for ``network-operator`` 26.4.1.

    Since v24.10 the chart creates no NicClusterPolicy (Mellanox/network-operator commit 8fc96f20): the
    OFED driver, RDMA device plugin and secondary networks are configured by a ``NicClusterPolicy``
    custom resource named ``nic-cluster-policy``, which the kit creates beside the release. The chart
    only installs the operator, and NFD. ``system_node_selector`` places the operator and NFD's master and
    garbage collector on the cluster's system nodes.
    """
    return {
        # This chart owns the cluster's NFD (gpu_operator_values turns the GPU Operator's off when RDMA is
        # on); its NodeFeatureRules label the Mellanox NICs the NicClusterPolicy selects. Both are the
        # chart defaults, set so that the split with the GPU Operator is visible here.
        "nfd": {"enabled": True, "deployNodeFeatureRules": True},
        "node-feature-discovery": {
            "enableNodeFeatureApi": True,
            **_pods(system_node_selector, NFD_RESOURCES, NFD_CLUSTER_PODS),
        },
        "sriovNetworkOperator": {"enabled": False},
        **_pods(system_node_selector, {"operator": NETWORK_OPERATOR_RESOURCES}, ("operator",)),
    }


def local_static_provisioner_values(
    *,
    class_name: str,
    host_dir: str,
    volume_mode: str = "Filesystem",
    reclaim_policy: str = "Delete",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Values for ``local-static-provisioner`` 2.9.0: one PersistentVolume per mount under ``host_dir``.

    Each filesystem mounted under ``host_dir`` becomes one PV, so RAID0 the NVMe drives into one mount
    first (facts: "one mount = one PV"). The chart's StorageClass is ``kubernetes.io/no-provisioner`` with
    ``volumeBindingMode: WaitForFirstConsumer`` (helm/provisioner/templates/storageclass.yaml), so a claim
    binds only once its pod is scheduled, to a volume on that pod's node. The chart creates it only when
    the class sets ``storageClass``.
    """
    if volume_mode not in ("Filesystem", "Block"):
        raise ValueError(f"volume_mode={volume_mode!r}: expected Filesystem or Block")
    if reclaim_policy not in ("Delete", "Retain"):
        raise ValueError(f"reclaim_policy={reclaim_policy!r}: expected Delete or Retain")
    # `mountDir` (default: hostDir) and `fsType` (read only to format a block device exposed as Filesystem)
    # keep the chart's defaults: the RAID0 array is already a mounted filesystem under host_dir.
    storage_class: dict[str, Any] = {
        "name": class_name,
        "hostDir": host_dir,
        "volumeMode": volume_mode,
        "storageClass": {"reclaimPolicy": reclaim_policy, "isDefaultClass": False},
    }
    # The NVMe drives are in the GPU nodes, so the provisioner's DaemonSet must run on tainted nodes.
    values: dict[str, Any] = {"classes": [storage_class], "tolerations": [GPU_TOLERATION]}
    if node_selector:
        values["nodeSelector"] = dict(node_selector)
    return values


def metallb_values(system_node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Values for ``metallb`` 0.16.1, in layer-2 mode.

    The address pool and its ``L2Advertisement`` are custom resources the kit creates in the release's
    namespace (metallb.io/v1beta1 ``IPAddressPool``, ``L2Advertisement``), so the chart must install the
    CRDs. Layer 2 needs no BGP: the FRR container stays off (``speaker.frr.enabled``). On k3s, disable the
    built-in ``servicelb`` (``--disable=servicelb``), or both answer for LoadBalancer Services.
    ``system_node_selector`` places the controller (it assigns addresses) on the cluster's system nodes.
    """
    return {
        "crds": {"enabled": True},
        # GPU nodes carry the kit's GPU taint; a speaker runs on every node so any of them can answer ARP
        # for a Service IP.
        "speaker": {"frr": {"enabled": False}, "tolerations": [GPU_TOLERATION]},
        **_placed(system_node_selector, "controller"),
    }
