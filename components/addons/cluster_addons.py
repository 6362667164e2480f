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
from pydantic import Field

from components.kube.budget import Demand, demand
from components.kube.helm import release
from components.kube.labels import (
    GPU_NODE_SELECTOR_KEY,
    GPU_TOLERATION,
    SYSTEM_NODES,
    efa_node_selector,
    gpu_node_affinity,
)
from components.specs import Args

DCGM_EXPORTER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"cpu": "200m", "memory": "512Mi"},
}
"""The DCGM exporter's container on every GPU node: the chart's own defaults (dcgm-exporter ``deployment/values.yaml``
``resources``), written out so the render says what the DaemonSet's pods request. Unlike the device plugin's, its
chart requests CPU and memory, at ``system-node-critical`` priority: the edge node budget counts it per GPU node."""


class ClusterAddonsArgs(Args):
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    gpu_stack: Literal["device-plugin", "gpu-operator", "none"] = "device-plugin"
    """``device-plugin`` where the node image ships the driver (EKS, k3s); ``gpu-operator`` on bare metal;
    ``none`` for a cluster without GPUs (a CPU-only edge site): no device plugin, no DCGM exporter."""
    gpu_runtime_class: str | None = None
    """``runtimeClassName`` of the device plugin and DCGM exporter, which both open NVML: ``nvidia`` on k3s, where
    NVML fails under the default runc runtime (NVIDIA/k8s-device-plugin#406, k3s-io/k3s#4070). Both charts take
    a top-level ``runtimeClassName`` value (k8s-device-plugin v0.19.2 and dcgm-exporter deployment/values.yaml)."""
    metrics_server: bool = True
    """Install metrics-server; ``False`` where the cluster ships one (k3s's packaged metrics-server)."""
    keda: bool = True
    """Install KEDA; ``False`` where replicas are fixed (an edge site)."""
    lws: bool = True
    """Install the LeaderWorkerSet controller; ``False`` where no model spans nodes (an edge site)."""
    efa: bool = False
    """Install the EFA device plugin (cloud pools with EFA)."""
    gpu_operator_values: dict[str, Any] = Field(default_factory=dict)
    """``gpu-operator`` stack: the chart's values, rendered by the tier that installs it."""
    gpu_node_label: str = GPU_NODE_SELECTOR_KEY
    """A label every GPU node carries: the kit's own on cloud, the GPU Operator's ``nvidia.com/gpu.present``
    on bare metal. The device plugin and DCGM exporter run where it is."""
    system_node_selector: dict[str, str] = Field(default_factory=lambda: dict(SYSTEM_NODES))


KEDA_RESOURCES: dict[str, Any] = {
    "operator": {"requests": {"cpu": "100m", "memory": "128Mi"}},
    "metricServer": {"requests": {"cpu": "100m", "memory": "100Mi"}},
    "webhooks": {"requests": {"cpu": "100m", "memory": "100Mi"}},
}
"""KEDA's three Deployments, one pod each. The metrics API server's and the admission webhooks' are the chart's own
requests (keda 2.20.2 ``values.yaml`` ``resources``), written out so the render says what the pods request; the chart's
limits (1 CPU, 1000Mi) stay in force, as Helm merges these values into its own."""
LWS_RESOURCES: dict[str, Any] = {"requests": {"cpu": "1", "memory": "1Gi"}}
"""The LeaderWorkerSet controller's one pod: the chart's own requests (lws 0.10.0 ``values.yaml`` ``resources``),
written out so the render says what it requests."""
METRICS_SERVER_RESOURCES: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "200Mi"}}
"""metrics-server's one pod: the chart's own requests (metrics-server 3.13.0 ``values.yaml`` ``resources``), written
out so the render says what it requests."""


_KEDA_DEPLOYMENTS = {
    "operator": "keda-operator",
    "metricServer": "keda-operator-metrics-apiserver",
    "webhooks": "keda-admission-webhooks",
}
"""The Deployment each section of ``KEDA_RESOURCES`` sizes (keda 2.20.2 templates)."""


def keda_values(on_system: dict[str, Any]) -> dict[str, Any]:
    return {**on_system, "resources": KEDA_RESOURCES}


def lws_values(on_system: dict[str, Any]) -> dict[str, Any]:
    return {**on_system, "resources": LWS_RESOURCES}


def metrics_server_values(on_system: dict[str, Any]) -> dict[str, Any]:
    return {
        **on_system,
        "args": ["--kubelet-preferred-address-types=InternalIP"],
        "resources": METRICS_SERVER_RESOURCES,
    }


def controllers_demand(*, keda: bool = True, lws: bool = True, metrics_server: bool = True) -> list[Demand]:
    """The pods of the controllers ``ClusterAddons`` places on the system nodes (its GPU daemons run elsewhere), read
    from the values it installs."""
    pods = []
    if keda:
        resources = keda_values({})["resources"]
        pods += [demand(name, resources[part]) for part, name in _KEDA_DEPLOYMENTS.items()]
    if lws:
        pods.append(demand("lws-controller", lws_values({})["resources"]))
    if metrics_server:
        pods.append(demand("metrics-server", metrics_server_values({})["resources"]))
    return pods


class ClusterAddons(pulumi.ComponentResource):
    releases: dict[str, k8s.helm.v3.Release]

    def __init__(self, name: str, args: ClusterAddonsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:cluster_addons:ClusterAddons", name, None, opts)
        on_system = {"nodeSelector": args.system_node_selector}
        on_gpus = {"affinity": gpu_node_affinity(args.gpu_node_label), "tolerations": [GPU_TOLERATION]}
        runtime = {"runtimeClassName": args.gpu_runtime_class} if args.gpu_runtime_class else {}

        def r(chart: str, values: dict[str, Any]) -> k8s.helm.v3.Release:
            return release(chart, values, parent=self, component=name, provider=args.provider)

        self.releases = {}
        if args.keda:
            self.releases["keda"] = r("keda", keda_values(on_system))
        if args.lws:
            self.releases["lws"] = r("lws", lws_values(on_system))
        if args.metrics_server:
            self.releases["metrics-server"] = r("metrics-server", metrics_server_values(on_system))
        if args.gpu_stack == "none":
            self.register_outputs({})
            return
        if args.gpu_stack == "device-plugin":
            self.releases["nvidia-device-plugin"] = r("nvidia-device-plugin", {**on_gpus, **runtime})
        else:
            # Bare metal: the tier renders the operator's values (driver, toolkit, MIG, RDMA); its own DCGM
            # exporter stays off so the dcgm-exporter release below serves every tier the same way.
            self.releases["gpu-operator"] = r("gpu-operator", args.gpu_operator_values)
        self.releases["dcgm-exporter"] = r(
            "dcgm-exporter",
            {
                **on_gpus,
                **runtime,
                "resources": DCGM_EXPORTER_RESOURCES,
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
