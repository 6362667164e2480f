"""The catalog's instance facts agree with EC2's DescribeInstanceTypes data (as moto carries it)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from components.aws.efa import efa_interface_layout
from components.catalog.instances import INSTANCES, SYSTEM_INSTANCES


@pytest.fixture(scope="module")
def described() -> dict[str, dict]:  # type: ignore[type-arg]
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        return {
            t["InstanceType"]: t for t in ec2.describe_instance_types(InstanceTypes=list(INSTANCES))["InstanceTypes"]
        }


@pytest.mark.parametrize("instance_type", sorted(INSTANCES))
def test_catalog_row_matches_ec2(described: dict, instance_type: str) -> None:  # type: ignore[type-arg]
    spec, ec2 = INSTANCES[instance_type], described[instance_type]
    (gpu,) = ec2["GpuInfo"]["Gpus"]
    assert (spec.gpu.model, spec.gpu_count, spec.gpu.memory_mib) == (
        gpu["Name"],
        gpu["Count"],
        gpu["MemoryInfo"]["SizeInMiB"],
    )
    assert spec.efa_interfaces == ec2["NetworkInfo"].get("EfaInfo", {}).get("MaximumEfaInterfaces", 0)
    assert spec.network_cards == ec2["NetworkInfo"]["MaximumNetworkCards"]
    (disk,) = ec2["InstanceStorageInfo"]["Disks"]
    assert (spec.nvme_disks, spec.nvme_disk_gb) == (disk["Count"], disk["SizeInGB"])
    assert spec.host_memory_gib == ec2["MemoryInfo"]["SizeInMiB"] // 1024
    assert spec.vcpus == ec2["VCpuInfo"]["DefaultVCpus"]


def test_efa_layout_counts() -> None:
    assert len(efa_interface_layout(INSTANCES["p5.48xlarge"])) == 33
    assert len(efa_interface_layout(INSTANCES["p5en.48xlarge"])) == 17
    assert efa_interface_layout(INSTANCES["g6e.xlarge"]) == []


@pytest.fixture(scope="module")
def described_system() -> dict[str, dict]:  # type: ignore[type-arg]
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        pages = ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=sorted(SYSTEM_INSTANCES))
        return {t["InstanceType"]: t for page in pages for t in page["InstanceTypes"]}


@pytest.mark.parametrize("instance_type", sorted(SYSTEM_INSTANCES))
def test_system_catalog_row_matches_ec2(described_system: dict, instance_type: str) -> None:  # type: ignore[type-arg]
    # GIVEN a type the system pool accepts THEN EC2 says it boots the x86_64 AMI, has no GPU, and the memory and
    # network interfaces the cache check and the pod limit read
    spec, ec2 = SYSTEM_INSTANCES[instance_type], described_system[instance_type]
    assert ec2["ProcessorInfo"]["SupportedArchitectures"] == ["x86_64"] and "GpuInfo" not in ec2
    assert (spec.vcpus, spec.memory_gib) == (ec2["VCpuInfo"]["DefaultVCpus"], ec2["MemoryInfo"]["SizeInMiB"] // 1024)
    network = ec2["NetworkInfo"]
    assert (spec.network_interfaces, spec.ipv4_per_interface) == (
        network["MaximumNetworkInterfaces"],
        network["Ipv4AddressesPerInterface"],
    )


def test_system_pod_limit_and_allocatable_memory_follow_the_eks_ami() -> None:
    # amazon-eks-ami eni-max-pods.txt: m7i.xlarge 58, m7i.4xlarge 234; kubeReserved 11 x 58 + 255 MiB, eviction 100 MiB
    assert (SYSTEM_INSTANCES["m7i.xlarge"].max_pods, SYSTEM_INSTANCES["m7i.4xlarge"].max_pods) == (58, 234)
    assert SYSTEM_INSTANCES["m7i.xlarge"].allocatable_memory_mib == 16 * 1024 - (11 * 58 + 255) - 100


def test_a_system_nodes_allocatable_cpu_is_the_eks_amis_kubelet_reserve_off_its_cores() -> None:
    # 6 % of the first core, 1 % of the second, 0.5 % of the third and fourth, 0.25 % above (amazon-eks-ami nodeadm)
    sizes = ("m7i.large", "m7i.xlarge", "m7i.4xlarge", "m7i.16xlarge")
    reserved = [SYSTEM_INSTANCES[t].vcpus * 1000 - SYSTEM_INSTANCES[t].allocatable_cpu_m for t in sizes]
    assert reserved == [70, 80, 110, 230]
