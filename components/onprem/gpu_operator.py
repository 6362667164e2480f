"""The GPU Operator's values for the on-prem tier's settings (the ``gpu-operator`` release of ClusterAddons)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
