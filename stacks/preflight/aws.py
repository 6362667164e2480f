"""The cloud tier's preflight: read-only AWS calls, judged against the validated ``CloudEnvironment``.

Every call is a ``Describe``/``Get``; nothing here creates, changes or reserves anything. Each
check is a function of the environment and the clients, returning ``Finding`` rows, so a test
can drive it with moto (whose EC2 instance data is real) plus botocore's ``Stubber`` where moto
lacks the API or the data (the README's `inferstack preflight` section lists which).

boto3 is imported lazily: the on-prem and edge tiers never need it.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from stacks.environment import CONFIG_KEY, CloudEnvironment
from stacks.preflight import Finding, Report

# The kit's own facts, imported in one place: the SSM parameter the node groups read their AMI
# release from, so preflight resolves exactly what `pulumi up` will.
from components.aws.gpu_node_group import ami_release_parameter  # isort: skip

Clients = Callable[[str], Any]
"""``clients("ec2")`` → a boto3 client for the stack's region (``AwsClients``, or a test's)."""

# EC2 limits running instances per instance class in vCPUs, one Service Quotas code per class and
# market (service code ``ec2``). Codes as listed by ListServiceQuotas, e.g.
# https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-417A185B.
# Instances launched into an ODCR or a Capacity Block draw on the reservation instead: an ODCR
# took its quota when it was created, and a Capacity Block is bought capacity.
VCPU_QUOTAS: dict[tuple[str, str], tuple[str, str]] = {
    ("P", "on-demand"): ("L-417A185B", "Running On-Demand P instances"),
    ("P", "spot"): ("L-7212CCBC", "All P Spot Instance Requests"),
    ("G", "on-demand"): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("G", "spot"): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
}

RESERVATION_TYPES = {"odcr": "default", "capacity-block": "capacity-block"}
"""The kit's ``capacity.type`` → EC2's ``ReservationType``."""

USABLE_RESERVATION_STATES = ("active", "scheduled")

# Errors that mean "these credentials cannot be used at all": no check can run, so they stop the
# whole preflight with one line. A denied action stops only the check that needed it.
_CREDENTIAL_ERRORS = {
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "AuthFailure",
    "SignatureDoesNotMatch",
    "RequestExpired",
}
_DENIED_ERRORS = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}


class AwsAccessError(Exception):
    """The account cannot be reached with these credentials. ``str()`` is one line with the fix."""


class AwsClients:
    """One boto3 client per service, for one region, created on first use."""

    def __init__(self, region: str, profile: str | None = None, session: Any = None) -> None:
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]
        from botocore.exceptions import ProfileNotFound  # type: ignore[import-untyped]

        try:
            self._session = session or boto3.Session(profile_name=profile)
        except ProfileNotFound as err:
            if profile is not None:
                raise AwsAccessError(
                    f"AWS profile {profile!r} not found; fix: pick a profile from `aws configure list-profiles`"
                ) from None
            # Without --profile, boto3 took the name from the environment: name it and the variable.
            named = err.kwargs.get("profile")
            var = next((v for v in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE") if os.environ.get(v) == named), "AWS_PROFILE")
            raise AwsAccessError(
                f"AWS profile {named!r} (from {var}) not found; fix: pick a profile from "
                f"`aws configure list-profiles`, or unset {var}"
            ) from None
        # Standard retries ride out throttling; short timeouts keep a wrong network from hanging CI.
        self._config = Config(
            region_name=region, retries={"mode": "standard", "max_attempts": 4}, connect_timeout=5, read_timeout=20
        )
        self._clients: dict[str, Any] = {}

    def __call__(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service, config=self._config)
        return self._clients[service]


def run(env: CloudEnvironment, stack: str, clients: Clients, now: datetime) -> Report:
    """Every check for ``env``. Raises ``AwsAccessError`` when the credentials cannot be used."""
    from botocore.exceptions import ClientError

    try:
        account = str(_call(lambda: clients("sts").get_caller_identity()["Account"]))
    except ClientError as err:
        code = err.response["Error"]["Code"]
        raise AwsAccessError(
            f"STS refused to name the account ({code}); fix: check the credentials and that {env.region} is enabled"
        ) from None
    checks: list[tuple[str, Callable[[], list[Finding]]]] = [
        ("instance offering", lambda: check_offerings(env, clients)),
        ("vCPU quota", lambda: check_vcpu_quotas(env, clients)),
        ("reservation", lambda: check_reservations(env, clients, now)),
        ("AMI release", lambda: check_ami_release(env, clients)),
        ("EKS version", lambda: check_kubernetes_version(env, clients)),
        ("ElastiCache node type", lambda: check_cache_node_type(env, clients)),
    ]
    findings: list[Finding] = []
    for name, check in checks:
        findings += _guarded(check, name)
    return Report(stack=stack, region=env.region, account=account, findings=tuple(findings))


def pool_zone(env: CloudEnvironment, index: int) -> str:
    """A GPU pool's one zone: its own, or the network's first (as the cloud stack places it)."""
    return env.gpu_pools[index].zone or env.network.availability_zones[0]


def check_offerings(env: CloudEnvironment, clients: Clients) -> list[Finding]:
    """Each GPU pool's instance type is offered in its zone; the system pool's in every network zone."""
    wanted: list[tuple[str, str, str, str]] = []  # (subject, instance type, zone, key path)
    for i, pool in enumerate(env.gpu_pools):
        zone = pool_zone(env, i)
        wanted.append((f"pool {pool.name}", pool.instance_type, zone, f"gpuPools[{i}]"))
    for zone in env.network.availability_zones:
        wanted.append(("systemPool", env.system_pool.instance_type, zone, "systemPool"))

    offered: set[tuple[str, str]] = set()
    pages = (
        clients("ec2")
        .get_paginator("describe_instance_type_offerings")
        .paginate(
            LocationType="availability-zone",
            Filters=[
                {"Name": "instance-type", "Values": sorted({t for _, t, _, _ in wanted})},
                {"Name": "location", "Values": sorted({z for _, _, z, _ in wanted})},
            ],
        )
    )
    for page in pages:
        offered |= {(o["InstanceType"], o["Location"]) for o in page["InstanceTypeOfferings"]}

    findings = []
    for subject, instance_type, zone, path in wanted:
        if (instance_type, zone) in offered:
            findings.append(Finding("instance offering", f"{subject}: {instance_type} in {zone}", "ok", "offered"))
            continue
        elsewhere = sorted(z for t, z in offered if t == instance_type)
        where = f"offered in {', '.join(elsewhere)}" if elsewhere else "offered in none of the stack's zones"
        fix = (
            f"set {CONFIG_KEY}.{path}.zone to one of {', '.join(elsewhere)}"
            if elsewhere and path != "systemPool"
            else f"pick another instance type or zone for {path}"
        )
        findings.append(
            Finding(
                "instance offering",
                f"{subject}: {instance_type} in {zone}",
                "blocker",
                f"{instance_type} is not offered in {zone} ({where}); fix: {fix}",
            )
        )
    return findings


def check_vcpu_quotas(env: CloudEnvironment, clients: Clients) -> list[Finding]:
    """The vCPU quota of each instance class covers its on-demand and spot pools at their maximum size.

    Instances launched into an ODCR or a Capacity Block draw on the reservation, not on the quota.
    """
    demand: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)  # key → [(pool index, name)]
    for i, pool in enumerate(env.gpu_pools):
        # A reserved pool that may fall back to on-demand (`capacity.onDemandFallback`) can run its whole
        # maximum on-demand when the reservation is full or not active yet.
        fallback = pool.capacity.reserved and pool.capacity.on_demand_fallback
        market = "on-demand" if fallback else pool.capacity.type
        key = (pool.instance_type[0].upper(), market)
        if market in ("on-demand", "spot") and key in VCPU_QUOTAS:
            demand[key].append((i, pool.name))
    if not demand:
        return []

    types = sorted({env.gpu_pools[i].instance_type for pools in demand.values() for i, _ in pools})
    described = clients("ec2").describe_instance_types(InstanceTypes=types)["InstanceTypes"]
    vcpus = {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in described}

    findings = []
    for (klass, kind), pools in sorted(demand.items()):
        code, quota_name = VCPU_QUOTAS[(klass, kind)]
        parts = [
            (env.gpu_pools[i].max_size, env.gpu_pools[i].instance_type, vcpus[env.gpu_pools[i].instance_type], name, i)
            for i, name in pools
        ]
        needed = sum(n * v for n, _, v, _, _ in parts)
        sizing = " + ".join(f"{name}: {n} x {t} x {v}" for n, t, v, name, _ in parts)
        limit = _quota_value(clients("service-quotas"), code)
        subject = f"{quota_name} ({code})"
        if limit >= needed:
            detail = f"quota {limit:g} vCPUs ≥ {needed} needed ({sizing})"
            findings.append(Finding("vCPU quota", subject, "ok", detail))
        else:
            sizes = " or ".join(f"gpuPools[{i}].maxSize" for *_, i in parts)
            findings.append(
                Finding(
                    "vCPU quota",
                    subject,
                    "blocker",
                    f"quota {limit:g} vCPUs < {needed} needed at maximum size ({sizing}); fix: request an "
                    f"increase of {code} to ≥ {needed} in Service Quotas ({env.region}), or lower {sizes}",
                )
            )
    return findings


def check_reservations(env: CloudEnvironment, clients: Clients, now: datetime) -> list[Finding]:
    """Each ODCR or Capacity Block exists, is usable, and matches its pool's type, zone and size."""
    findings = []
    for i, pool in enumerate(env.gpu_pools):
        rid = pool.capacity.reservation_id
        if rid is None:
            continue
        at = f"{CONFIG_KEY}.gpuPools[{i}]"
        subject = f"pool {pool.name}: {pool.capacity.type} {rid}"
        found = _describe_reservation(clients("ec2"), rid)
        if found is None:
            findings.append(
                Finding(
                    "reservation",
                    subject,
                    "blocker",
                    f"{rid} does not exist in this account in {env.region}; fix: put the id from "
                    f"`aws ec2 describe-capacity-reservations --region {env.region}` in {at}.capacity.reservationId",
                )
            )
            continue
        problems = _reservation_problems(env, i, found)
        ends = _end_text(found, now)
        if not problems:
            detail = (
                f"{found['ReservationType']} {found['InstanceType']} x {found['TotalInstanceCount']} in "
                f"{found['AvailabilityZone']}, {found['State']}, {ends}"
            )
            findings.append(Finding("reservation", subject, "ok", detail))
        findings += [Finding("reservation", subject, "blocker", f"{p}; {ends}") for p in problems]
    return findings


def check_ami_release(env: CloudEnvironment, clients: Clients) -> list[Finding]:
    """The pinned AL2023 NVIDIA AMI release exists, or the recommended one resolves."""
    version = env.cluster.kubernetes_version
    # The config requires `cluster.amiReleaseVersion` (stacks.environment.cluster_checks); without one
    # (an environment built in code) the node groups would take SSM's recommendation, so check that.
    pinned = env.cluster.ami_release_version
    if pinned is None:
        name = ami_release_parameter(version)
        release = _parameter(clients("ssm"), name)
        if release is None:
            return [
                Finding(
                    "AMI release",
                    f"AL2023 NVIDIA, Kubernetes {version} (recommended)",
                    "blocker",
                    f"SSM parameter {name} does not exist in {env.region}: no EKS NVIDIA AMI for Kubernetes "
                    f"{version} here; fix: set {CONFIG_KEY}.cluster.kubernetesVersion to a version EKS supports",
                )
            ]
        return [
            Finding("AMI release", f"AL2023 NVIDIA, Kubernetes {version} (recommended)", "ok", f"resolves to {release}")
        ]

    subject = f"AL2023 NVIDIA, Kubernetes {version} (pinned {pinned})"
    match = re.fullmatch(r"(\d+\.\d+)\.\d+-(\d{8})", pinned)
    if match is None or match.group(1) != version:
        return [
            Finding(
                "AMI release",
                subject,
                "blocker",
                f"{pinned!r} is not a release of Kubernetes {version} (form {version}.<patch>-<yyyymmdd>); fix: set "
                f"{CONFIG_KEY}.cluster.amiReleaseVersion from `aws ssm get-parameter --name "
                f"{ami_release_parameter(version)}`",
            )
        ]
    # EKS names its optimized AMIs amazon-eks-node-al2023-x86_64-nvidia-<k8s minor>-v<date>.
    image_name = f"amazon-eks-node-al2023-x86_64-nvidia-{version}-v{match.group(2)}"
    images = clients("ec2").describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": [image_name]}])[
        "Images"
    ]
    available = [img for img in images if img.get("State") == "available"]
    if not available:
        return [
            Finding(
                "AMI release",
                subject,
                "blocker",
                f"no available Amazon image named {image_name} in {env.region}; fix: pin a published release "
                f"(the recommended one: `aws ssm get-parameter --name {ami_release_parameter(version)}`)",
            )
        ]
    return [Finding("AMI release", subject, "ok", f"{image_name} is {available[0]['ImageId']}")]


def check_kubernetes_version(env: CloudEnvironment, clients: Clients) -> list[Finding]:
    """EKS offers the stack's Kubernetes version in standard support (extended support costs extra)."""
    version = env.cluster.kubernetes_version
    subject = f"EKS Kubernetes {version}"
    listed = clients("eks").describe_cluster_versions(clusterVersions=[version], includeAll=True)["clusterVersions"]
    info = next((v for v in listed if v.get("clusterVersion") == version), None)
    status = str((info or {}).get("versionStatus") or (info or {}).get("status") or "unsupported")
    status = status.lower().replace("_", "-")
    fix = f"fix: set {CONFIG_KEY}.cluster.kubernetesVersion to a version in standard support"
    if status == "standard-support":
        ends = _date((info or {}).get("endOfStandardSupportDate"))
        return [Finding("EKS version", subject, "ok", f"standard support until {ends}")]
    if status == "extended-support":
        ends = _date((info or {}).get("endOfExtendedSupportDate"))
        return [
            Finding(
                "EKS version", subject, "warn", f"extended support (billed extra per cluster hour) until {ends}; {fix}"
            )
        ]
    return [Finding("EKS version", subject, "blocker", f"EKS does not support Kubernetes {version}; {fix}")]


def check_cache_node_type(env: CloudEnvironment, clients: Clients) -> list[Finding]:
    """The ElastiCache node type is sold in the region (only when the stack uses ElastiCache)."""
    if env.cache.kind != "elasticache":
        return []
    node_type = env.cache.node_type
    # ElastiCache has no "orderable node types" call; its reserved-node offerings list every node
    # type the region sells.
    offerings = clients("elasticache").describe_reserved_cache_nodes_offerings(CacheNodeType=node_type, MaxRecords=20)[
        "ReservedCacheNodesOfferings"
    ]
    if offerings:
        products = sorted({o.get("ProductDescription", "?") for o in offerings})
        return [Finding("ElastiCache node type", node_type, "ok", f"offered ({', '.join(products)})")]
    return [
        Finding(
            "ElastiCache node type",
            node_type,
            "blocker",
            f"{node_type} is not offered in {env.region}; fix: set {CONFIG_KEY}.cache.nodeType to a node type "
            "sold there (e.g. the same size of another generation)",
        )
    ]


def _reservation_problems(env: CloudEnvironment, index: int, found: dict[str, Any]) -> list[str]:
    pool = env.gpu_pools[index]
    at = f"{CONFIG_KEY}.gpuPools[{index}]"
    rid = found["CapacityReservationId"]
    zone = pool_zone(env, index)
    problems = []
    state = found.get("State", "?")
    if state not in USABLE_RESERVATION_STATES:
        problems.append(
            f"{rid} is {state}, not active or scheduled; fix: buy or create a new one and put its id in "
            f"{at}.capacity.reservationId"
        )
    expected_type = RESERVATION_TYPES[pool.capacity.type]
    if found.get("ReservationType", "default") != expected_type:
        actual = {v: k for k, v in RESERVATION_TYPES.items()}.get(found.get("ReservationType", "default"), "?")
        problems.append(
            f"{rid} is a {found.get('ReservationType')} reservation, the pool says {pool.capacity.type}; "
            f"fix: set {at}.capacity.type to {actual}"
        )
    if found["InstanceType"] != pool.instance_type:
        problems.append(
            f"{rid} reserves {found['InstanceType']}, the pool runs {pool.instance_type}; fix: set "
            f"{at}.instanceType to {found['InstanceType']}, or use a reservation for {pool.instance_type}"
        )
    if found["AvailabilityZone"] != zone:
        problems.append(
            f"{rid} is in {found['AvailabilityZone']}, the pool is in {zone}; fix: set {at}.zone to "
            f"{found['AvailabilityZone']}"
        )
    total = int(found.get("TotalInstanceCount", 0))
    if total < pool.max_size:
        problems.append(
            f"{rid} holds {total} instance(s), the pool grows to {pool.max_size}; fix: lower {at}.maxSize "
            f"(and minSize) to {total}, or reserve {pool.max_size}"
        )
    return problems


def _describe_reservation(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except ClientError as err:
        if err.response["Error"]["Code"].startswith("InvalidCapacityReservationId"):
            return None
        raise
    return next((r for r in found if r["CapacityReservationId"] == reservation_id), None)


def _end_text(found: dict[str, Any], now: datetime) -> str:
    """When the reservation ends, absolute and relative: a block's instances are terminated at its end."""
    end = found.get("EndDate")
    if found.get("EndDateType") == "unlimited" or not isinstance(end, datetime):
        return "no end date"
    left = end - now
    span = abs(left)
    amount = (
        f"{span.days} day{'s' if span.days != 1 else ''}"
        if span.days
        else f"{span.seconds // 3600} h"
        if span.seconds >= 3600
        else f"{span.seconds // 60} min"
    )
    return f"ends {_date(end)} (in {amount})" if left.total_seconds() > 0 else f"ended {_date(end)} ({amount} ago)"


def _quota_value(service_quotas: Any, code: str) -> float:
    """The account's applied quota, or AWS's default where the account has none applied."""
    from botocore.exceptions import ClientError

    try:
        return float(service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
    except ClientError as err:
        if err.response["Error"]["Code"] != "NoSuchResourceException":
            raise
    return float(service_quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])


def _parameter(ssm: Any, name: str) -> str | None:
    from botocore.exceptions import ClientError

    try:
        return str(ssm.get_parameter(Name=name)["Parameter"]["Value"])
    except ClientError as err:
        if err.response["Error"]["Code"] == "ParameterNotFound":
            return None
        raise


def _date(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M UTC") if value.hour or value.minute else value.strftime("%Y-%m-%d")
    return "unknown"


def _call(fn: Callable[[], Any]) -> Any:
    """Run one AWS call; credential and connection problems become ``AwsAccessError``."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    try:
        return fn()
    except (NoCredentialsError, PartialCredentialsError):
        raise AwsAccessError(
            "no AWS credentials found; fix: `aws configure`, `aws sso login`, or export AWS_PROFILE"
        ) from None
    except NoRegionError:
        raise AwsAccessError("no AWS region; fix: set `region` in the stack's environment") from None
    except EndpointConnectionError as err:
        raise AwsAccessError(f"cannot reach AWS ({err}); fix: check the network or proxy") from None
    except ClientError as err:
        code = err.response["Error"]["Code"]
        if code in _CREDENTIAL_ERRORS:
            raise AwsAccessError(
                f"AWS refused the credentials ({code}: {err.response['Error'].get('Message', '')}); fix: refresh "
                "them (`aws sso login`, or new access keys)"
            ) from None
        raise
    except BotoCoreError as err:
        raise AwsAccessError(f"AWS call failed before reaching the account ({err})") from None


def _guarded(check: Callable[[], Iterable[Finding]], name: str) -> list[Finding]:
    """Run one check. A denied action, or any other error AWS answers, is a blocker row for that check."""
    from botocore.exceptions import ClientError

    try:
        return list(_call(lambda: list(check())))
    except ClientError as err:
        code = err.response["Error"]["Code"]
        action = f"{err.operation_name}"
        if code in _DENIED_ERRORS:
            detail = f"{code} on {action}; fix: grant the read-only actions listed in the README's Preflight section"
        else:
            detail = f"AWS answered {code} to {action}: {err.response['Error'].get('Message', '')}"
        return [Finding(name, "could not check", "blocker", detail)]
