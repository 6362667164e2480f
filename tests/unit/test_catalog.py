"""The catalog's instance facts agree with EC2's DescribeInstanceTypes data (as moto carries it)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from components.aws.efa import efa_interface_layout
from components.catalog.instances import INSTANCES


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
