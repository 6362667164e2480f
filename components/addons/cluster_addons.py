"""ClusterAddons: the controllers every tier's serving layer relies on, as pinned Helm releases.

- KEDA (queue-depth pod autoscaling), the LeaderWorkerSet controller (multi-node groups) and
  metrics-server (the gateway's CPU HPA).
- GPUs: on EKS the AL2023 NVIDIA AMI ships the driver and container toolkit, so only the NVIDIA
  device plugin runs; bare metal uses the GPU Operator with its driver. DCGM exporter for GPU metrics.
- EFA: the aws-efa-k8s-device-plugin, only on EFA nodes (it crash-loops elsewhere).
"""

from __future__ import annotations

from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components.kube.helm import release
from components.kube.labels import SYSTEM_NODES, efa_node_selector, gpu_node_affinity
from components.specs import Args

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class ClusterAddonsArgs(Args):
    provider: k8s.Provider
    gpu_stack: Literal["device-plugin", "gpu-operator"] = "device-plugin"
    """``device-plugin`` where the node image ships the driver (EKS); ``gpu-operator`` on bare metal."""
    efa: bool = False
    """Install the EFA device plugin (cloud pools with EFA)."""


class ClusterAddons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]

    def __init__(self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:cluster_addons:ClusterAddons", name, None, opts)
        on_system = {"nodeSelector": SYSTEM_NODES}

        def r(chart: str, values: dict[str, Any]) -> k8s.helm.v3.Release:
            return release(chart, values, parent=self, provider=args.provider)

        self.releases = {
            "keda": r(
                "keda", {**on_system, "resources": {"operator": {"requests": {"cpu": "100m", "memory": "128Mi"}}}}
            ),
            "lws": r("lws", {}),
            "metrics-server": r(
                "metrics-server", {**on_system, "args": ["--kubelet-preferred-address-types=InternalIP"]}
            ),
        }
        if args.gpu_stack == "device-plugin":
            self.releases["nvidia-device-plugin"] = r(
                "nvidia-device-plugin", {"affinity": gpu_node_affinity(), "tolerations": [GPU_TOLERATION]}
            )
        else:
            self.releases["gpu-operator"] = r(
                "gpu-operator",
                # Bare metal: the operator installs the driver and toolkit; its own DCGM exporter stays off
                # (the dcgm-exporter release below serves every tier the same way).
                {"driver": {"enabled": True}, "toolkit": {"enabled": True}, "dcgmExporter": {"enabled": False}},
            )
        self.releases["dcgm-exporter"] = r(
            "dcgm-exporter",
            {
                "affinity": gpu_node_affinity(),
                "tolerations": [GPU_TOLERATION],
                "serviceMonitor": {
                    "enabled": True,
                    "interval": "15s",
                    "additionalLabels": {"release": "kube-prometheus-stack"},
                },
            },
        )
        if args.efa:
            self.releases["aws-efa-k8s-device-plugin"] = r(
                "aws-efa-k8s-device-plugin",
                {"nodeSelector": efa_node_selector(), "tolerations": [GPU_TOLERATION]},
            )
        self.register_outputs({})
