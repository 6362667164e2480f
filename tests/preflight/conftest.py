"""A test AWS account for preflight: moto, plus recorded answers for the APIs moto lacks.

moto answers EC2's DescribeInstanceTypeOfferings and DescribeInstanceTypes from real EC2 data, and
STS. It does not implement, or carries no data for, the calls below; each gets a response recorded
in the shape of AWS's documented answer and queued on botocore's ``Stubber``, which validates it
against the service model (and the request against ``expected_params``):

- Service Quotas GetServiceQuota / GetAWSDefaultServiceQuota (moto knows only the ``vpc`` quotas);
- EC2 DescribeCapacityReservations (not implemented);
- EC2 DescribeImages for EKS AMIs (implemented, but moto carries no EKS-optimized images);
- EKS DescribeClusterVersions, ElastiCache DescribeReservedCacheNodesOfferings (not implemented);
- SSM GetParameter for EKS's public AMI parameters (implemented, but moto carries none of them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from components.specs import GpuPoolSpec
from helpers import raw_environment
from stacks.environment import CloudEnvironment, load_environment
from stacks.preflight.aws import VCPU_QUOTAS, AwsClients

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
"""The preflight's clock in these tests: block dates are relative to it."""

STUBBED = {
    "service-quotas": None,
    "eks": None,
    "elasticache": None,
    "ssm": None,
    "ec2": {"DescribeCapacityReservations", "DescribeImages"},
}
"""Service → the operations answered from recordings (``None``: all); every other call reaches moto."""


class PartialStubber(Stubber):  # type: ignore[misc]
    """botocore's ``Stubber`` for some operations of a client; the client's other calls reach moto."""

    def __init__(self, client: Any, operations: set[str] | None) -> None:
        super().__init__(client)
        self.operations = operations

    def _stubbed(self, model: Any) -> bool:
        return self.operations is None or model.name in self.operations

    def _assert_expected_params(self, model: Any, params: Any, context: Any, **kwargs: Any) -> None:
        if self._stubbed(model):
            super()._assert_expected_params(model, params, context, **kwargs)

    def _get_response_handler(self, model: Any, params: Any, context: Any, **kwargs: Any) -> Any:
        return super()._get_response_handler(model, params, context, **kwargs) if self._stubbed(model) else None


class FakeAccount:
    """Account 123456789012 in one region: moto's real EC2 data plus recorded answers (see module doc)."""

    def __init__(self, region: str) -> None:
        self.region = region
        self.now = NOW
        self.clients = AwsClients(region, session=boto3.Session(region_name=region))
        self.stubs = {name: PartialStubber(self.clients(name), ops) for name, ops in STUBBED.items()}
        for stub in self.stubs.values():
            stub.activate()

    def assert_all_answers_used(self) -> None:
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()

    # --- recorded answers, one method per API -------------------------------------------------

    def quota(self, code: str, value: float) -> None:
        name = next(n for c, n in VCPU_QUOTAS.values() if c == code)
        self.stubs["service-quotas"].add_response(
            "get_service_quota",
            {
                "Quota": {
                    "ServiceCode": "ec2",
                    "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                    "QuotaArn": f"arn:aws:servicequotas:{self.region}:123456789012:ec2/{code}",
                    "QuotaCode": code,
                    "QuotaName": name,
                    "Value": value,
                    "Unit": "None",
                    "Adjustable": True,
                    "GlobalQuota": False,
                    "UsageMetric": {
                        "MetricNamespace": "AWS/Usage",
                        "MetricName": "ResourceCount",
                        "MetricDimensions": {
                            "Class": "P/OnDemand",
                            "Resource": "vCPU",
                            "Service": "EC2",
                            "Type": "Resource",
                        },
                        "MetricStatisticRecommendation": "Maximum",
                    },
                    "QuotaAppliedAtLevel": "ACCOUNT",
                }
            },
            expected_params={"ServiceCode": "ec2", "QuotaCode": code},
        )

    def reservation(
        self,
        reservation_id: str,
        *,
        instance_type: str,
        zone: str,
        count: int,
        state: str = "active",
        kind: str = "capacity-block",
        ends: datetime | None = NOW + timedelta(days=6),
    ) -> None:
        self.stubs["ec2"].add_response(
            "describe_capacity_reservations",
            {
                "CapacityReservations": [
                    {
                        "CapacityReservationId": reservation_id,
                        "OwnerId": "123456789012",
                        "CapacityReservationArn": (
                            f"arn:aws:ec2:{self.region}:123456789012:capacity-reservation/{reservation_id}"
                        ),
                        "InstanceType": instance_type,
                        "InstancePlatform": "Linux/UNIX",
                        "AvailabilityZone": zone,
                        "Tenancy": "default",
                        "TotalInstanceCount": count,
                        "AvailableInstanceCount": count,
                        "EbsOptimized": True,
                        "EphemeralStorage": False,
                        "State": state,
                        "StartDate": NOW - timedelta(days=1),
                        **({"EndDate": ends, "EndDateType": "limited"} if ends else {"EndDateType": "unlimited"}),
                        "InstanceMatchCriteria": "targeted",
                        "CreateDate": NOW - timedelta(days=14),
                        "Tags": [],
                        "ReservationType": kind,
                    }
                ]
            },
            expected_params={"CapacityReservationIds": [reservation_id]},
        )

    def reservation_missing(self, reservation_id: str) -> None:
        self.stubs["ec2"].add_client_error(
            "describe_capacity_reservations",
            service_error_code="InvalidCapacityReservationId.NotFound",
            service_message=f"The capacity reservation ID '{reservation_id}' does not exist",
            http_status_code=400,
            expected_params={"CapacityReservationIds": [reservation_id]},
        )

    def kubernetes(self, version: str, status: str = "STANDARD_SUPPORT") -> None:
        listed = (
            []
            if status == "UNLISTED"
            else [
                {
                    "clusterVersion": version,
                    "clusterType": "eks",
                    "defaultPlatformVersion": "eks.9",
                    "defaultVersion": False,
                    "releaseDate": datetime(2025, 5, 29, tzinfo=UTC),
                    # EKS's calendar for 1.33 (standard support ended 2026-07-29), or, for a version
                    # still in standard support at the test clock, dates after it.
                    "endOfStandardSupportDate": (
                        datetime(2026, 7, 29, tzinfo=UTC) if status != "STANDARD_SUPPORT" else NOW + timedelta(days=126)
                    ),
                    "endOfExtendedSupportDate": datetime(2027, 7, 29, tzinfo=UTC),
                    "status": status.lower().replace("_", "-"),
                    "versionStatus": status,
                    "kubernetesPatchVersion": f"{version}.5",
                }
            ]
        )
        self.stubs["eks"].add_response(
            "describe_cluster_versions",
            {"clusterVersions": listed},
            expected_params={"clusterVersions": [version], "includeAll": True},
        )

    def cache_offered(self, node_type: str, offered: bool = True) -> None:
        offerings = [
            {
                "ReservedCacheNodesOfferingId": "7d2b1c6a-0f3e-4c1b-9a55-2f8e6d1b3c90",
                "CacheNodeType": node_type,
                "Duration": 31536000,
                "FixedPrice": 0.0,
                "UsagePrice": 0.0,
                "ProductDescription": "valkey",
                "OfferingType": "No Upfront",
                "RecurringCharges": [{"RecurringChargeAmount": 0.156, "RecurringChargeFrequency": "Hourly"}],
            }
        ]
        self.stubs["elasticache"].add_response(
            "describe_reserved_cache_nodes_offerings",
            {"ReservedCacheNodesOfferings": offerings if offered else []},
            expected_params={"CacheNodeType": node_type, "MaxRecords": 20},
        )

    def recommended_release(self, version: str, release: str | None) -> None:
        name = f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/nvidia/recommended/release_version"
        if release is None:
            self.stubs["ssm"].add_client_error(
                "get_parameter",
                service_error_code="ParameterNotFound",
                http_status_code=400,
                expected_params={"Name": name},
            )
            return
        self.stubs["ssm"].add_response(
            "get_parameter",
            {
                "Parameter": {
                    "Name": name,
                    "Type": "String",
                    "Value": release,
                    "Version": 57,
                    "LastModifiedDate": NOW - timedelta(days=3),
                    "ARN": f"arn:aws:ssm:{self.region}::parameter{name}",
                    "DataType": "text",
                }
            },
            expected_params={"Name": name},
        )

    def eks_image(self, name: str, found: bool = True) -> None:
        image = {
            "ImageId": "ami-0c1e2d3f4a5b6c7d8",
            "Name": name,
            "OwnerId": "602401143452",
            "ImageOwnerAlias": "amazon",
            "State": "available",
            "Architecture": "x86_64",
            "ImageType": "machine",
            "Public": True,
            "RootDeviceType": "ebs",
            "VirtualizationType": "hvm",
            "CreationDate": "2025-11-20T06:12:40.000Z",
        }
        self.stubs["ec2"].add_response(
            "describe_images",
            {"Images": [image] if found else []},
            expected_params={"Owners": ["amazon"], "Filters": [{"Name": "name", "Values": [name]}]},
        )

    def ready_for(self, env: CloudEnvironment, *, reservations: Callable[[], None] | None = None) -> None:
        """Queue the answers of an account that can run ``env``: ample quota, matching reservations.

        ``reservations`` queues the DescribeCapacityReservations answers instead (a test's missing,
        expired or mismatched reservation), in their place: EC2's recorded answers are one queue, and
        the AMI check's DescribeImages comes after them.
        """
        # In the order the check asks: by instance class, then market.
        markets = sorted(
            {
                (p.instance_type[0].upper(), "on-demand" if _falls_back(p) else p.capacity.type)
                for p in env.gpu_pools
                if p.capacity.type in ("on-demand", "spot") or _falls_back(p)
            }
        )
        for key in markets:
            self.quota(VCPU_QUOTAS[key][0], 4096)
        if reservations is not None:
            reservations()
        else:
            for pool in env.gpu_pools:
                if pool.capacity.reservation_id:
                    self.reservation(
                        pool.capacity.reservation_id,
                        instance_type=pool.instance_type,
                        zone=pool.zone or env.network.availability_zones[0],
                        count=pool.max_size,
                        kind="capacity-block" if pool.capacity.type == "capacity-block" else "default",
                    )
        version = env.cluster.kubernetes_version
        pinned = env.cluster.ami_release_version
        if pinned:
            self.eks_image(f"amazon-eks-node-al2023-x86_64-nvidia-{version}-v{pinned.rsplit('-', 1)[1]}")
        else:
            self.recommended_release(version, f"{version}.5-20251120")
        self.kubernetes(version)
        if env.cache.kind == "elasticache":
            self.cache_offered(env.cache.node_type)


def _falls_back(pool: GpuPoolSpec) -> bool:
    return pool.capacity.reserved and pool.capacity.on_demand_fallback


@pytest.fixture(scope="module")
def _moto_accounts() -> Iterator[dict[str, FakeAccount]]:
    """One moto account per region for a test module: clients are slow to make, and moto's data is static."""
    with mock_aws():
        yield {}


@pytest.fixture
def account(_moto_accounts: dict[str, FakeAccount]) -> Iterator[Callable[[str], FakeAccount]]:
    """``account(region)``: the moto account with no answers queued; checks every answer was used."""
    used: list[FakeAccount] = []

    def get(region: str) -> FakeAccount:
        fake = _moto_accounts.get(region) or _moto_accounts.setdefault(region, FakeAccount(region))
        for stub in fake.stubs.values():
            stub._queue.clear()
        used.append(fake)
        return fake

    yield get
    for fake in used:
        fake.assert_all_answers_used()


@pytest.fixture
def prod_env() -> Callable[..., CloudEnvironment]:
    """The bundled prod stack, with the H200 block moved to a zone that offers p5en (us-east-1c).

    As bundled: h100 (4 x p5.48xlarge, on-demand) in us-east-1a; h200 (2 x p5en.48xlarge) on Capacity
    Block cr-0a1b2c3d4e5f60718 with ``onDemandFallback``; AMI release pinned to 1.33.5-20251120.
    """

    def build(**h200: Any) -> CloudEnvironment:
        raw = raw_environment("prod")
        pools = [dict(p) for p in raw["gpuPools"]]
        pools[1] = {**pools[1], "zone": "us-east-1c", **h200}
        env = load_environment({**raw, "gpuPools": pools}, "tests/preflight")
        assert isinstance(env, CloudEnvironment)
        return env

    return build
