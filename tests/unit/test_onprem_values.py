"""The on-prem charts' value builders: every key exists in the pinned chart, and each choice is the intended one."""

from __future__ import annotations

import ast
import inspect
import itertools
from typing import Any

import pytest

from components.catalog.charts import chart
from components.onprem import _values
from components.onprem._values import (
    gpu_operator_values,
    local_static_provisioner_values,
    metallb_values,
    network_operator_values,
)
from helm_values import explain, load_defaults, unknown_paths, unstated_requests


def _gpu_operator_cases() -> list[dict[str, Any]]:
    return [
        {
            "driver_managed": d,
            "rdma": r,
            "mig_strategy": m,
            "dcgm_service_monitor": s,
            "toolkit_managed": t,
            "dcgm_exporter": x,
        }
        for d, r, m, s, t, x in itertools.product(
            (True, False), (True, False), ("none", "single", "mixed"), (True, False), (True, False), (True, False)
        )
    ]


BUILT = [
    *(("gpu-operator", gpu_operator_values(**case)) for case in _gpu_operator_cases()),
    ("network-operator", network_operator_values()),
    ("local-static-provisioner", local_static_provisioner_values(class_name="nvme", host_dir="/mnt/nvme")),
    (
        "local-static-provisioner",
        local_static_provisioner_values(
            class_name="nvme-raw", host_dir="/dev/nvme", volume_mode="Block", node_selector={"a": "b"}
        ),
    ),
    ("metallb", metallb_values()),
    *(
        (name, build(system_node_selector={"node-role.inferstack.io/system": "true"}))
        for name, build in (("network-operator", network_operator_values), ("metallb", metallb_values))
    ),
    *(
        ("gpu-operator", gpu_operator_values(**case, system_node_selector={"pool": "system"}))
        for case in _gpu_operator_cases()
    ),
]


@pytest.mark.parametrize(("name", "values"), BUILT)
def test_every_key_exists_in_the_pinned_chart(name: str, values: dict[str, Any]) -> None:
    # GIVEN values a builder renders
    defaults = load_defaults(chart(name))
    # WHEN / THEN every key path is one the pinned chart's values.yaml has
    unknown = unknown_paths(values, defaults)
    assert unknown == [], explain(name, defaults, unknown)


@pytest.mark.parametrize(("name", "values"), BUILT)
def test_what_a_charts_pods_request_by_default_is_written_out(name: str, values: dict[str, Any]) -> None:
    # GIVEN values a builder renders, and the requests the pinned chart's defaults give the pods it installs
    # WHEN / THEN the values state each of them, so the system nodes' budget reads what the pods request from the render
    assert unstated_requests(values, load_defaults(chart(name))) == []


def test_local_static_provisioner_class_keys_are_the_charts() -> None:
    # GIVEN the chart's example class, plus the keys its comments and StorageClass template document
    # (`mountDir`, `storageClass: true|{reclaimPolicy, isDefaultClass}`, `allowedTopologies`)
    example = load_defaults(chart("local-static-provisioner")).values["classes"][0]
    class_keys = set(example) | {"mountDir", "storageClass", "allowedTopologies"}
    # WHEN a class is rendered (the chart's `classes` is a list, so the generic walk stops above it)
    rendered = local_static_provisioner_values(class_name="nvme", host_dir="/mnt/nvme")["classes"][0]
    # THEN its keys are the chart's
    assert set(rendered) <= class_keys, set(rendered) - class_keys
    assert set(rendered["storageClass"]) <= {"reclaimPolicy", "isDefaultClass", "provisioner"}


def test_local_nvme_class_is_created_with_its_storage_class() -> None:
    # GIVEN a class for the RAID0 NVMe mount
    values = local_static_provisioner_values(class_name="nvme", host_dir="/mnt/nvme")
    (nvme,) = values["classes"]
    # WHEN / THEN the chart creates its StorageClass (it does only when `storageClass` is set), not as the
    # default class, and the provisioner runs on the tainted GPU nodes that hold the drives
    assert (nvme["name"], nvme["hostDir"], nvme["volumeMode"]) == ("nvme", "/mnt/nvme", "Filesystem")
    assert nvme["storageClass"] == {"reclaimPolicy": "Delete", "isDefaultClass": False}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]


def test_unknown_volume_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match="volume_mode='block': expected Filesystem or Block"):
        local_static_provisioner_values(class_name="raw", host_dir="/dev/nvme", volume_mode="block")


def test_host_driver_turns_the_driver_container_off() -> None:
    # GIVEN a DGX-like host with its own driver
    values = gpu_operator_values(driver_managed=False, rdma=True, mig_strategy="single", dcgm_service_monitor=False)
    # WHEN / THEN the operator does not install one (NVIDIA/gpu-operator#130), and picks no module type
    assert values["driver"] == {"enabled": False}


def test_rdma_uses_dma_buf_and_leaves_nfd_to_the_network_operator() -> None:
    # GIVEN GPUDirect RDMA with an operator-managed driver
    values = gpu_operator_values(driver_managed=True, rdma=True, mig_strategy="single", dcgm_service_monitor=True)
    # WHEN / THEN DMA-BUF's open kernel module, no legacy peermem, and one NFD: the Network Operator's
    assert values["driver"] == {"enabled": True, "kernelModuleType": "open"}
    assert values["nfd"] == {"enabled": False}
    assert network_operator_values()["nfd"]["enabled"] is True


def test_without_rdma_the_gpu_operator_runs_nfd() -> None:
    values = gpu_operator_values(driver_managed=True, rdma=False, mig_strategy="none", dcgm_service_monitor=False)
    assert values["nfd"] == {"enabled": True}
    assert values["driver"] == {"enabled": True}


def test_dcgm_service_monitor_is_selected_by_the_kits_prometheus() -> None:
    # GIVEN / WHEN the bundled exporter's ServiceMonitor is on, then off
    on = gpu_operator_values(driver_managed=True, rdma=False, mig_strategy="single", dcgm_service_monitor=True)
    off = gpu_operator_values(driver_managed=True, rdma=False, mig_strategy="single", dcgm_service_monitor=False)
    # THEN it carries kube-prometheus-stack's selector label; off is explicit (the v26.7.0 default is on)
    assert on["dcgmExporter"]["serviceMonitor"] == {
        "enabled": True,
        "additionalLabels": {"release": "kube-prometheus-stack"},
    }
    assert off["dcgmExporter"]["serviceMonitor"] == {"enabled": False}


def test_unknown_mig_strategy_names_the_choices() -> None:
    with pytest.raises(ValueError, match="mig_strategy='mix': expected one of none, single, mixed"):
        gpu_operator_values(driver_managed=True, rdma=False, mig_strategy="mix", dcgm_service_monitor=False)


def test_network_operator_chart_creates_no_nic_cluster_policy() -> None:
    # GIVEN the pinned chart's values and the kit's
    defaults = load_defaults(chart("network-operator")).values
    # WHEN / THEN neither has a NicClusterPolicy section: since v24.10 the policy is a custom resource
    policy_sections = {"nicClusterPolicy", "ofedDriver", "rdmaSharedDevicePlugin"}
    assert not policy_sections & (set(defaults) | set(network_operator_values()))


def test_metallb_installs_its_crds_and_runs_layer_2_only() -> None:
    values = metallb_values()
    assert values["crds"] == {"enabled": True}
    assert values["speaker"]["frr"] == {"enabled": False}


def test_value_builders_import_no_pulumi() -> None:
    # GIVEN the builders' module
    tree = ast.parse(inspect.getsource(_values))
    # WHEN its imports are listed
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    # THEN none is Pulumi's: the values are pure renders
    assert not [name for name in imported if name.startswith("pulumi")]


def test_no_system_nodes_named_leaves_every_controller_where_the_chart_puts_it() -> None:
    # GIVEN no cluster.systemNodeSelector WHEN the values are rendered THEN none of them names a node selector
    rendered = [
        gpu_operator_values(driver_managed=True, rdma=False, mig_strategy="single", dcgm_service_monitor=False),
        network_operator_values(),
        metallb_values(),
    ]
    assert [v for v in rendered if "nodeSelector" in str(v)] == []


def test_named_system_nodes_take_the_gpu_operator_and_its_nfd_master_but_not_the_workers() -> None:
    system = {"pool": "system"}
    # GIVEN a cluster without RDMA, where the GPU Operator runs the cluster's NFD
    values = gpu_operator_values(
        driver_managed=True, rdma=False, mig_strategy="single", dcgm_service_monitor=False, system_node_selector=system
    )
    # THEN the operator, NFD's master and its garbage collector run on the system nodes; NFD's worker everywhere
    assert values["operator"]["nodeSelector"] == system
    nfd = values["node-feature-discovery"]
    assert {pod: section.get("nodeSelector") for pod, section in nfd.items()} == {
        "master": system, "gc": system, "worker": None,
    }  # fmt: skip
    # AND with RDMA the GPU Operator's NFD is off, so its values say nothing of it
    rdma = gpu_operator_values(
        driver_managed=True, rdma=True, mig_strategy="single", dcgm_service_monitor=False, system_node_selector=system
    )
    assert "node-feature-discovery" not in rdma and rdma["operator"]["nodeSelector"] == system
