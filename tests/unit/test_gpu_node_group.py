"""GpuNodeGroup under the mock engine: what a GPU platform engineer checks on a launch template."""

from __future__ import annotations

from typing import Any

import pytest

from components.aws.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.specs import GpuPoolSpec
from helpers import children, only, user_data_node_config
from inferstack_cli.mocks import MOCK_AMI_RELEASE
from inferstack_cli.plan import MockEngine

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"


def build(engine: MockEngine, **pool: Any) -> list[Any]:
    spec = GpuPoolSpec.model_validate({"name": "gpu", "maxSize": 2, **pool})
    GpuNodeGroup(
        f"gpu-{spec.name}",
        GpuNodeGroupArgs(
            pool=spec,
            cluster_name="c",
            kubernetes_version="1.33",
            cluster_security_group_id="sg-cluster",
            vpc_id="vpc-1",
            subnet_id="subnet-a",
            node_role_arn="arn:aws:iam::123456789012:role/nodes",
        ),
    )
    return engine.settle()


@pytest.mark.parametrize(
    ("instance_type", "efa_only"),
    [("p5.48xlarge", 32), ("p5e.48xlarge", 32), ("p5en.48xlarge", 16), ("p4d.24xlarge", 4), ("p6-b200.48xlarge", 8)],
)
def test_efa_layout_is_one_ena_primary_then_one_efa_only_per_card(
    engine: MockEngine, instance_type: str, efa_only: int
) -> None:
    # GIVEN an EFA instance type, WHEN the pool is built
    interfaces = only(build(engine, instanceType=instance_type), LT).inputs["networkInterfaces"]
    # THEN card 0/device 0 is ENA, card 0/device 1 is efa-only, and every other card has efa-only at device 0
    assert interfaces[0] == {**interfaces[0], "networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    assert (interfaces[1]["networkCardIndex"], interfaces[1]["deviceIndex"], interfaces[1]["interfaceType"]) == (
        0,
        1,
        "efa-only",
    )
    assert [(i["networkCardIndex"], i["deviceIndex"]) for i in interfaces[2:]] == [(c, 0) for c in range(1, efa_only)]
    assert sum(i["interfaceType"] == "efa-only" for i in interfaces) == efa_only
    assert len(interfaces) == 1 + efa_only


def test_efa_interfaces_carry_the_cluster_and_self_referencing_efa_groups(engine: MockEngine) -> None:
    resources = build(engine, instanceType="p5en.48xlarge")
    efa_sg = only(resources, "aws:ec2/securityGroup:SecurityGroup")
    assert efa_sg.inputs["ingress"][0]["self"] is True and efa_sg.inputs["ingress"][0]["protocol"] == "-1"
    template = only(resources, LT).inputs
    assert "vpcSecurityGroupIds" not in template, "EC2 refuses groups on both the template and its interfaces"
    assert all(
        len(i["securityGroups"]) == 2 and "sg-cluster" in i["securityGroups"] for i in template["networkInterfaces"]
    )


def test_instance_without_efa_gets_no_interfaces_and_no_placement_group(engine: MockEngine) -> None:
    resources = build(engine, instanceType="g6e.xlarge")
    template = only(resources, LT).inputs
    assert "networkInterfaces" not in template
    assert template["vpcSecurityGroupIds"] == ["sg-cluster"]
    assert not [r for r in resources if r.type == PG]


def test_efa_pool_launches_into_its_cluster_placement_group(engine: MockEngine) -> None:
    resources = build(engine, instanceType="p5.48xlarge")
    group = only(resources, PG)
    assert group.inputs["strategy"] == "cluster"
    placement = only(resources, LT).inputs["placement"]
    # The mock engine echoes the group's name: the template must reference that exact group.
    assert placement["groupName"].startswith(group.name)


def test_reserved_pool_gets_no_forced_placement_group(engine: MockEngine) -> None:
    resources = build(
        engine, instanceType="p5.48xlarge", capacity={"type": "odcr", "reservationId": "cr-0123456789abcdef0"}
    )
    assert not [r for r in resources if r.type == PG]
    template = only(resources, LT).inputs
    assert "placement" not in template
    target = template["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
    assert only(resources, NG).inputs["capacityType"] == "ON_DEMAND"


def test_capacity_block_sets_market_type_and_node_group_capacity_type(engine: MockEngine) -> None:
    resources = build(
        engine,
        instanceType="p5en.48xlarge",
        minSize=2,
        maxSize=2,
        capacity={"type": "capacity-block", "reservationId": "cr-0a1b2c3d4e5f60718"},
    )
    template = only(resources, LT).inputs
    assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert (
        template["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"]
        == "cr-0a1b2c3d4e5f60718"
    )
    assert only(resources, NG).inputs["capacityType"] == "CAPACITY_BLOCK"


def test_placement_group_can_be_forced_on_with_a_reservation(engine: MockEngine) -> None:
    resources = build(
        engine,
        instanceType="p5.48xlarge",
        placementGroup=True,
        capacity={"type": "odcr", "reservationId": "cr-0123456789abcdef0"},
    )
    assert only(resources, PG)


def test_user_data_carries_a_raid0_nodeconfig_for_nvme(engine: MockEngine) -> None:
    content_type, node_config = user_data_node_config(only(build(engine, instanceType="p5.48xlarge"), LT))
    assert content_type == "application/node.eks.aws"
    assert node_config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert node_config["kind"] == "NodeConfig"
    assert node_config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"


def test_launch_template_requires_imdsv2_and_an_encrypted_gp3_root(engine: MockEngine) -> None:
    template = only(build(engine, instanceType="p5.48xlarge"), LT).inputs
    assert template["metadataOptions"]["httpTokens"] == "required"
    assert template["metadataOptions"]["httpPutResponseHopLimit"] == 1
    (root,) = template["blockDeviceMappings"]
    assert root["ebs"]["volumeType"] == "gp3"
    assert root["ebs"]["encrypted"] == "true"
    assert root["ebs"]["volumeSize"] == 200


def test_node_group_is_tainted_labelled_and_on_the_nvidia_ami(engine: MockEngine) -> None:
    group = only(build(engine, name="h100", instanceType="p5.48xlarge", minSize=1, maxSize=4), NG).inputs
    assert group["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
    assert group["labels"]["inferstack.io/pool"] == "h100"
    assert group["labels"]["inferstack.io/gpu-model"] == "H100"
    assert group["labels"]["inferstack.io/gpu-count"] == "8"
    assert group["amiType"] == "AL2023_x86_64_NVIDIA"
    assert group["releaseVersion"] == MOCK_AMI_RELEASE
    assert group["scalingConfig"] == {"minSize": 1, "maxSize": 4, "desiredSize": 1}
    assert group["subnetIds"] == ["subnet-a"]
    assert group["instanceTypes"] == ["p5.48xlarge"]


def test_every_child_is_parented_to_the_component(engine: MockEngine) -> None:
    resources = build(engine, instanceType="p5.48xlarge")
    component = only(resources, "inferstack:aws_gpu_node_group:GpuNodeGroup")
    assert {r.type for r in children(resources, component)} == {LT, NG, PG, "aws:ec2/securityGroup:SecurityGroup"}


def test_a_managed_groups_size_is_the_stacks_so_a_changed_desired_size_resizes_it(engine: MockEngine) -> None:
    # GIVEN a managed GPU node group: no autoscaler runs on it (Karpenter pools are NodePools)
    resources = build(engine, name="h100", instanceType="p5.48xlarge", minSize=1, maxSize=4, desiredSize=3)
    group = only(resources, NG)
    # WHEN / THEN its desired size is the stack's, and `pulumi up` does not ignore a change to it
    assert group.inputs["scalingConfig"]["desiredSize"] == 3
    assert group.ignore_changes == ()
