"""Karpenter GPU pools keep every guarantee of a managed GPU pool."""

from __future__ import annotations

from typing import Any

import pytest

from components.aws._karpenter import KarpenterGpuPool, karpenter_node_class, karpenter_node_pool
from components.aws.efa import efa_interface_layout
from components.catalog.instances import InstanceSpec, instance
from crdcheck import validate

RESERVATION = "cr-0123456789abcdef0"


def _pool(instance_type: str = "p5.48xlarge", **overrides: Any) -> KarpenterGpuPool:
    args: dict[str, Any] = {
        "name": "gpu-h100",
        "spec": instance(instance_type),
        "node_role_name": "inferstack-node",
        "cluster_name": "inferstack-dev",
        "max_nodes": 4,
    }
    return KarpenterGpuPool(**(args | overrides))


def _requirement(pool: dict[str, Any], key: str) -> list[str] | None:
    for r in pool["spec"]["template"]["spec"]["requirements"]:
        if r["key"] == key:
            assert r["operator"] == "In"
            return list(r["values"])
    return None


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p5en.48xlarge"])
def test_efa_types_get_the_shared_interface_layout(instance_type: str) -> None:
    # GIVEN an EFA instance type
    # WHEN its EC2NodeClass is rendered
    interfaces = karpenter_node_class(_pool(instance_type))["spec"]["networkInterfaces"]
    # THEN it carries exactly the layout the managed launch template uses
    expected = [
        {"networkCardIndex": c, "deviceIndex": d, "interfaceType": t}
        for c, d, t in efa_interface_layout(instance(instance_type))
    ]
    assert interfaces == expected


def test_non_efa_type_has_no_interface_list() -> None:
    # GIVEN g6e.xlarge (no EFA)
    # WHEN its EC2NodeClass is rendered
    # THEN Karpenter's default single interface applies
    assert "networkInterfaces" not in karpenter_node_class(_pool("g6e.xlarge"))["spec"]


def test_nvme_is_striped_raid0() -> None:
    # GIVEN an instance type with instance-store NVMe
    # WHEN its EC2NodeClass is rendered
    # THEN Karpenter builds the RAID0 array for containerd and the kubelet
    assert karpenter_node_class(_pool())["spec"]["instanceStorePolicy"] == "RAID0"


def test_no_raid0_without_instance_store() -> None:
    # GIVEN a (hypothetical) type without instance store
    spec = instance("g6e.xlarge")
    bare = InstanceSpec(spec.instance_type, spec.gpu, spec.gpu_count, spec.host_memory_gib, 0, 1, 0, 0)
    # WHEN its EC2NodeClass is rendered
    # THEN no instance-store policy is set
    assert "instanceStorePolicy" not in karpenter_node_class(_pool(spec=bare))["spec"]


def test_al2023_alias_and_node_role() -> None:
    # GIVEN a pool
    # WHEN its EC2NodeClass is rendered
    spec = karpenter_node_class(_pool())["spec"]
    # THEN nodes boot the EKS AL2023 AMI (NVIDIA variant for GPU types) as the node role
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert spec["role"] == "inferstack-node"


def test_subnets_and_security_groups_by_discovery_tag() -> None:
    # GIVEN a cluster name
    # WHEN the EC2NodeClass is rendered
    spec = karpenter_node_class(_pool())["spec"]
    # THEN subnets and security groups are discovered by the cluster's tag
    expected = [{"tags": {"karpenter.sh/discovery": "inferstack-dev"}}]
    assert spec["subnetSelectorTerms"] == expected
    assert spec["securityGroupSelectorTerms"] == expected


def test_efa_security_group_selected_beside_the_discovery_tag() -> None:
    # GIVEN an EFA pool with its self-referencing security group
    spec = karpenter_node_class(_pool(efa_security_group_id="sg-0efa"))["spec"]
    # WHEN / THEN its nodes carry that group as well as the cluster's (selector terms are ORed)
    assert spec["securityGroupSelectorTerms"] == [
        {"tags": {"karpenter.sh/discovery": "inferstack-dev"}},
        {"id": "sg-0efa"},
    ]


def test_efa_turned_off_gives_no_efa_interfaces() -> None:
    # GIVEN an EFA-capable type with EFA turned off (gpuPools[].efa: false)
    pool = _pool(efa=False)
    # WHEN / THEN the node class keeps EC2's single ENA and the nodes are not labelled for the EFA plugin
    assert "networkInterfaces" not in karpenter_node_class(pool)["spec"]
    assert karpenter_node_pool(pool)["spec"]["template"]["metadata"]["labels"]["inferstack.io/efa"] == "false"


def test_imdsv2_required() -> None:
    # GIVEN a pool
    # WHEN its EC2NodeClass is rendered
    options = karpenter_node_class(_pool())["spec"]["metadataOptions"]
    # THEN IMDSv2 is required and pods cannot reach the node's IMDS
    assert (options["httpTokens"], options["httpPutResponseHopLimit"]) == ("required", 1)


def test_root_volume_encrypted() -> None:
    # GIVEN a pool
    # WHEN its EC2NodeClass is rendered
    root = karpenter_node_class(_pool(root_volume_gib=150))["spec"]["blockDeviceMappings"][0]
    # THEN the root volume is encrypted gp3 of the given size
    assert root["ebs"] == {"volumeSize": "150Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}


def test_placement_group_selected_by_name() -> None:
    # GIVEN a placement group name
    # WHEN the EC2NodeClass is rendered
    spec = karpenter_node_class(_pool(placement_group_name="inferstack-gpu-h100"))["spec"]
    # THEN Karpenter launches into it
    assert spec["placementGroupSelector"] == {"name": "inferstack-gpu-h100"}


def test_no_placement_group_unless_given() -> None:
    # GIVEN no placement group (e.g. a reservation made outside one)
    # WHEN / THEN none is selected
    assert "placementGroupSelector" not in karpenter_node_class(_pool())["spec"]


def test_reservation_selected_and_capacity_type_reserved() -> None:
    # GIVEN a capacity reservation
    pool = _pool(capacity_type="reserved", reservation_id=RESERVATION)
    # WHEN the pool is rendered
    node_class, node_pool = karpenter_node_class(pool), karpenter_node_pool(pool)
    # THEN the node class selects it and the node pool asks for reserved capacity only
    assert node_class["spec"]["capacityReservationSelectorTerms"] == [{"id": RESERVATION}]
    assert _requirement(node_pool, "karpenter.sh/capacity-type") == ["reserved"]


def test_on_demand_without_reservation() -> None:
    # GIVEN no reservation
    pool = _pool()
    # WHEN the pool is rendered
    # THEN it launches on-demand and selects no reservation
    assert _requirement(karpenter_node_pool(pool), "karpenter.sh/capacity-type") == ["on-demand"]
    assert "capacityReservationSelectorTerms" not in karpenter_node_class(pool)["spec"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"reservation_id": RESERVATION}, "capacity_type='reserved'"),
        ({"capacity_type": "reserved"}, "reservation_id: required"),
        ({"max_nodes": 0}, "max_nodes"),
        ({"name": "GPU_pool"}, "DNS-1123"),
    ],
)
def test_inconsistent_inputs_are_refused(overrides: dict[str, Any], message: str) -> None:
    # GIVEN inputs that contradict each other
    # WHEN / THEN the error names the field and the fix
    with pytest.raises(ValueError, match=message):
        _pool(**overrides)


def test_one_instance_type_and_zone() -> None:
    # GIVEN a pool pinned to a zone (a cluster placement group lives in one)
    node_pool = karpenter_node_pool(_pool(zone="us-east-1a"))
    # WHEN / THEN it launches only that type, only there
    assert _requirement(node_pool, "node.kubernetes.io/instance-type") == ["p5.48xlarge"]
    assert _requirement(node_pool, "topology.kubernetes.io/zone") == ["us-east-1a"]


def test_gpu_taint() -> None:
    # GIVEN a pool
    # WHEN its NodePool is rendered
    taints = karpenter_node_pool(_pool())["spec"]["template"]["spec"]["taints"]
    # THEN only pods tolerating the GPU taint land there
    assert taints == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_serving_gpu_nodes_are_never_consolidated() -> None:
    # GIVEN a pool
    # WHEN its NodePool is rendered
    disruption = karpenter_node_pool(_pool())["spec"]["disruption"]
    # THEN only empty nodes are consolidated, after a warm period, one node at a time
    assert disruption == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "10m", "budgets": [{"nodes": "1"}]}


def test_nodes_expire() -> None:
    # GIVEN a pool
    # WHEN / THEN nodes are replaced after 30 days
    assert karpenter_node_pool(_pool())["spec"]["template"]["spec"]["expireAfter"] == "720h"


@pytest.mark.parametrize(
    ("instance_type", "max_nodes", "gpus", "memory"),
    [("p5.48xlarge", 4, 32, "8192Gi"), ("g6e.xlarge", 3, 3, "96Gi")],
)
def test_limits_follow_max_nodes(instance_type: str, max_nodes: int, gpus: int, memory: str) -> None:
    # GIVEN a pool's maximum node count
    # WHEN its NodePool is rendered
    limits = karpenter_node_pool(_pool(instance_type, max_nodes=max_nodes))["spec"]["limits"]
    # THEN Karpenter stops at max_nodes x the instance's GPUs and memory (read from the catalog)
    assert limits == {"nvidia.com/gpu": gpus, "memory": memory}


def test_node_pool_references_its_node_class() -> None:
    # GIVEN a pool
    # WHEN both objects are rendered
    ref = karpenter_node_pool(_pool())["spec"]["template"]["spec"]["nodeClassRef"]
    # THEN the NodePool points at the EC2NodeClass of the same name
    assert ref == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu-h100"}


@pytest.mark.parametrize("instance_type", ["p5.48xlarge", "p5en.48xlarge", "p4d.24xlarge", "g6e.xlarge"])
@pytest.mark.parametrize("reserved", [False, True])
def test_validates_against_karpenter_crds(instance_type: str, reserved: bool) -> None:
    # GIVEN pools across instance shapes, with and without a reservation and placement group
    extra: dict[str, Any] = (
        {"capacity_type": "reserved", "reservation_id": RESERVATION}
        if reserved
        else {"placement_group_name": "pg", "zone": "us-east-1a"}
    )
    pool = _pool(instance_type, **extra)
    # WHEN both objects are checked strictly against Karpenter v1.14.1's CRDs
    # THEN both are valid
    assert validate(karpenter_node_class(pool)) == []
    assert validate(karpenter_node_pool(pool)) == []
