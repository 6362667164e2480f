"""The GPU Operator's values for the on-prem tier's settings (the ``gpu-operator`` release of ClusterAddons)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.kube.budget import Demand, demand
from components.onprem import _values
from components.onprem.specs import FabricSpec, GpuOperatorSpec

RUNTIME_CLASS = "nvidia"
"""The RuntimeClass the operator creates for its toolkit's runtime (chart value ``operator.runtimeClass``, default
``nvidia`` at v26.7.0): what pods that use a GPU without requesting one (the DCGM exporter) run under."""


def gpu_operator_values(
    spec: GpuOperatorSpec, fabric: FabricSpec, system_node_selector: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return _values.gpu_operator_values(
        driver_managed=spec.driver == "operator",
        toolkit_managed=spec.toolkit == "operator",
        rdma=fabric.rdma,
        mig_strategy=spec.mig_strategy,
        # The kit's own pinned dcgm-exporter release (ClusterAddons) serves GPU metrics on every tier.
        dcgm_exporter=False,
        dcgm_service_monitor=False,
        system_node_selector=system_node_selector,
    )


def operator_demand(spec: GpuOperatorSpec, fabric: FabricSpec) -> tuple[list[Demand], list[Demand]]:
    """The GPU Operator's pods off the GPU nodes, read from the values it installs: (its Deployment's pod and, where it
    runs the cluster's NFD (no RDMA fabric), NFD's master and garbage collector; NFD's worker pod on each node)."""
    values = gpu_operator_values(spec, fabric)
    pods = [demand("gpu-operator", values["operator"]["resources"])]
    if "node-feature-discovery" not in values:
        return pods, []
    cluster, daemons = _values.nfd_demand(values["node-feature-discovery"])
    return pods + cluster, daemons
