"""Values of the NVIDIA GPU Operator chart for bare-metal GPU servers (the ``gpu-operator`` release).

Sources: NVIDIA/gpu-operator ``deployments/gpu-operator/values.yaml`` and the install guide
(cloud-native-docs ``getting-started.rst``, ``gpu-operator-rdma.rst``); facts in facts-tiers.md §1.
"""

from __future__ import annotations

from typing import Any

from components.onprem.specs import FabricSpec, GpuOperatorSpec, NetworkOperatorSpec


def gpu_operator_values(spec: GpuOperatorSpec, fabric: FabricSpec, network: NetworkOperatorSpec) -> dict[str, Any]:
    driver: dict[str, Any] = {
        # A pre-installed driver (DGX OS) and an operator-managed one must never both run: the driver
        # daemonset crash-loops on such hosts (NVIDIA/gpu-operator #130, #327).
        "enabled": spec.driver == "operator",
    }
    if spec.driver == "operator" and fabric.rdma:
        if fabric.gpu_direct == "dma-buf":
            # GPUDirect RDMA through DMA-BUF needs the open kernel module (gpu-operator-rdma.rst).
            driver["kernelModuleType"] = "open"
        else:
            # Legacy nvidia-peermem; it needs MOFED/DOCA-OFED, on the host or from the Network Operator.
            driver["rdma"] = {"enabled": True, "useHostMofed": network.mofed == "host"}
    return {
        "driver": driver,
        "toolkit": {"enabled": spec.toolkit == "operator"},
        "devicePlugin": {"enabled": True},
        "gfd": {"enabled": True},
        "mig": {"strategy": spec.mig_strategy},
        # The kit's own dcgm-exporter release (pinned, same dashboards on every tier) serves GPU metrics.
        "dcgmExporter": {"enabled": False},
        # One Node Feature Discovery for both operators: this one's (the Network Operator's is off).
        "nfd": {"enabled": True},
    }
