"""Preflight checks against a moto account (real EC2 offerings) plus recorded answers (see conftest)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from botocore.stub import Stubber

from stacks.preflight import Finding, Report
from stacks.preflight.aws import AwsAccessError, run

H200_BLOCK = "cr-0a1b2c3d4e5f60718"


def blockers(report: Report) -> list[Finding]:
    return [f for f in report.findings if f.verdict == "blocker"]


def test_ready_prod_stack_passes_every_check(account: Any, prod_env: Any) -> None:
    # GIVEN the prod stack (H200 block in us-east-1c) and an account that can run it
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN every check passes, and the block's end time is shown
    assert report.ready, blockers(report)
    assert {f.check for f in report.findings} == {
        "instance offering",
        "vCPU quota",
        "reservation",
        "AMI release",
        "EKS version",
        "ElastiCache node type",
    }
    assert report.account == "123456789012"
    (block,) = [f for f in report.findings if f.check == "reservation"]
    assert "ends 2026-11-29 12:00 UTC (in 6 days)" in block.detail
    # 4 x 192 (h100, on-demand) + 2 x 192 (h200: its block may fall back to on-demand) = 1152 vCPUs
    (quota,) = [f for f in report.findings if f.check == "vCPU quota"]
    assert "1152 needed (h100: 4 x p5.48xlarge x 192 + h200: 2 x p5en.48xlarge x 192)" in quota.detail
    assert report.verdict_line() == f"preflight: {len(report.findings)} checks passed — ready"


def test_reservation_in_another_zone_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN the H200 pool in us-east-1c, but its Capacity Block lives in us-east-1a
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(
        env, reservations=lambda: aws.reservation(H200_BLOCK, instance_type="p5en.48xlarge", zone="us-east-1a", count=2)
    )

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN one blocker names the pool, the reservation, both zones and the fix
    (problem,) = blockers(report)
    assert problem.subject == f"pool h200: capacity-block {H200_BLOCK}"
    assert "is in us-east-1a, the pool is in us-east-1c" in problem.detail
    assert "fix: set inferstack:environment.gpuPools[1].zone to us-east-1a" in problem.detail
    assert report.verdict_line() == "preflight: 1 blocker — not ready"


def test_quota_below_the_pools_maximum_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN an account whose on-demand P quota (384 vCPUs) is a third of what the pools need at their maximum:
    # 4 x 192 (h100) + 2 x 192 (h200, whose block may fall back to on-demand) = 1152
    env = prod_env()
    aws = account("us-east-1")
    aws.quota("L-417A185B", 384)
    aws.reservation(H200_BLOCK, instance_type="p5en.48xlarge", zone="us-east-1c", count=2)
    aws.eks_image("amazon-eks-node-al2023-x86_64-nvidia-1.33-v20251120")  # the pinned AMI release
    aws.kubernetes("1.33")
    aws.cache_offered("cache.r7g.large")

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the quota is a blocker naming the quota code, the numbers, the pool and both fixes
    (problem,) = blockers(report)
    assert problem.check == "vCPU quota"
    assert problem.subject == "Running On-Demand P instances (L-417A185B)"
    assert (
        "quota 384 vCPUs < 1152 needed at maximum size (h100: 4 x p5.48xlarge x 192 + h200: 2 x p5en.48xlarge x 192)"
        in problem.detail
    )
    assert "request an increase of L-417A185B to ≥ 1152" in problem.detail
    assert "or lower gpuPools[0].maxSize or gpuPools[1].maxSize" in problem.detail


def test_instance_type_not_offered_in_the_pools_zone_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN the H200 pool in us-east-1b, where EC2's offerings (moto's real data) have no p5en.48xlarge
    env = prod_env(zone="us-east-1b")
    aws = account("us-east-1")
    aws.ready_for(env)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the offering is a blocker that names where the type is offered instead
    (problem,) = blockers(report)
    assert problem.check == "instance offering"
    assert problem.subject == "pool h200: p5en.48xlarge in us-east-1b"
    assert "p5en.48xlarge is not offered in us-east-1b (offered in us-east-1a, us-east-1c)" in problem.detail
    assert "fix: set inferstack:environment.gpuPools[1].zone to one of us-east-1a, us-east-1c" in problem.detail


def test_reservation_that_does_not_exist_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN a Capacity Block id that EC2 does not know
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env, reservations=lambda: aws.reservation_missing(H200_BLOCK))

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the blocker names the pool, the id and where to find the right one
    (problem,) = blockers(report)
    assert problem.subject == f"pool h200: capacity-block {H200_BLOCK}"
    assert f"{H200_BLOCK} does not exist in this account in us-east-1" in problem.detail
    assert "gpuPools[1].capacity.reservationId" in problem.detail


def test_expired_block_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN a Capacity Block that ended yesterday
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(
        env,
        reservations=lambda: aws.reservation(
            H200_BLOCK,
            instance_type="p5en.48xlarge",
            zone="us-east-1c",
            count=2,
            state="expired",
            ends=aws.now - timedelta(days=1),
        ),
    )

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN it is a blocker that shows when the block ended
    (problem,) = blockers(report)
    assert f"{H200_BLOCK} is expired, not active or scheduled" in problem.detail
    assert "ended 2026-11-22 12:00 UTC (1 day ago)" in problem.detail


def test_block_of_another_type_and_smaller_count_gives_one_blocker_each(account: Any, prod_env: Any) -> None:
    # GIVEN a scheduled block of one p5.48xlarge for a pool of two p5en.48xlarge
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(
        env,
        reservations=lambda: aws.reservation(
            H200_BLOCK, instance_type="p5.48xlarge", zone="us-east-1c", count=1, state="scheduled"
        ),
    )

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the instance type and the count are each a blocker with their own fix
    details = [f.detail for f in blockers(report)]
    assert len(details) == 2, details
    assert (
        "reserves p5.48xlarge, the pool runs p5en.48xlarge; fix: set inferstack:environment.gpuPools[1]" in details[0]
    )
    assert "holds 1 instance(s), the pool grows to 2; fix: lower" in details[1]


def test_odcr_named_as_capacity_block_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN the pool says capacity-block but the id is an On-Demand Capacity Reservation
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(
        env,
        reservations=lambda: aws.reservation(
            H200_BLOCK, instance_type="p5en.48xlarge", zone="us-east-1c", count=2, kind="default", ends=None
        ),
    )

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the blocker says which capacity.type to set
    (problem,) = blockers(report)
    assert "is a default reservation, the pool says capacity-block; fix: set" in problem.detail
    assert "gpuPools[1].capacity.type to odcr" in problem.detail
    assert "no end date" in problem.detail


def test_quota_never_raised_is_read_from_the_aws_default(account: Any, prod_env: Any) -> None:
    # GIVEN an account with no applied value for L-417A185B, whose AWS default is 0 vCPUs
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env)
    quotas = aws.stubs["service-quotas"]
    quotas._queue.clear()
    quotas.add_client_error("get_service_quota", service_error_code="NoSuchResourceException")
    quotas.add_response(
        "get_aws_default_service_quota",
        {
            "Quota": {
                "ServiceCode": "ec2",
                "QuotaCode": "L-417A185B",
                "QuotaName": "Running On-Demand P instances",
                "Value": 0.0,
            }
        },
        expected_params={"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
    )

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the default is what the pools are measured against (4 x 192 + 2 x 192 with h200's on-demand fallback)
    (problem,) = blockers(report)
    assert "quota 0 vCPUs < 1152 needed" in problem.detail


def test_reserved_pool_with_on_demand_fallback_counts_against_the_on_demand_quota(account: Any, prod_env: Any) -> None:
    # GIVEN the H200 block pool may fall back to on-demand p5en (capacity.onDemandFallback, as bundled)
    env = prod_env()
    assert env.gpu_pools[1].capacity.on_demand_fallback
    aws = account("us-east-1")
    aws.ready_for(env)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN its maximum joins h100's in the on-demand P quota
    (quota,) = [f for f in report.findings if f.check == "vCPU quota"]
    assert "1152 needed (h100: 4 x p5.48xlarge x 192 + h200: 2 x p5en.48xlarge x 192)" in quota.detail


def test_reserved_pool_without_fallback_draws_on_its_block_not_the_quota(account: Any, prod_env: Any) -> None:
    # GIVEN the H200 pool on its Capacity Block only (onDemandFallback off)
    env = prod_env(capacity={"type": "capacity-block", "reservationId": H200_BLOCK, "onDemandFallback": False})
    aws = account("us-east-1")
    aws.ready_for(env)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN only h100 counts against the on-demand P quota (4 x 192 = 768): the block is bought capacity
    assert report.ready, blockers(report)
    (quota,) = [f for f in report.findings if f.check == "vCPU quota"]
    assert "768 needed (h100: 4 x p5.48xlarge x 192)" in quota.detail
    assert "h200" not in quota.detail


def test_spot_pool_is_measured_against_the_spot_quota(account: Any, prod_env: Any) -> None:
    # GIVEN the H200 pool on spot instead of a block, up to 3 nodes
    env = prod_env(capacity={"type": "spot"}, minSize=0, maxSize=3)
    aws = account("us-east-1")
    aws.ready_for(env)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the P spot quota (not the on-demand one) covers it
    quotas = {f.subject: f.detail for f in report.findings if f.check == "vCPU quota"}
    assert "576 needed (h200: 3 x p5en.48xlarge x 192)" in quotas["All P Spot Instance Requests (L-7212CCBC)"]
    assert "768 needed (h100: 4 x p5.48xlarge x 192)" in quotas["Running On-Demand P instances (L-417A185B)"]


@pytest.mark.parametrize(
    ("status", "verdict", "detail"),
    [
        ("EXTENDED_SUPPORT", "warn", "extended support (billed extra per cluster hour) until 2027-07-29"),
        ("UNLISTED", "blocker", "EKS does not support Kubernetes 1.33"),
    ],
)
def test_kubernetes_version_outside_standard_support(
    account: Any, prod_env: Any, status: str, verdict: str, detail: str
) -> None:
    # GIVEN EKS lists 1.33 in extended support, or not at all
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env)
    aws.stubs["eks"]._queue.clear()
    aws.kubernetes("1.33", status)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN extended support warns (still ready), no support blocks
    (found,) = [f for f in report.findings if f.check == "EKS version"]
    assert (found.verdict, detail in found.detail) == (verdict, True)
    assert report.ready == (verdict == "warn")


def test_pinned_ami_release_is_looked_up_by_its_image_name(account: Any, prod_env: Any) -> None:
    # GIVEN a stack that pins AMI release 1.33.5-20251120 (cluster.amiReleaseVersion)
    env = prod_env()
    env = env.model_copy(update={"cluster": env.cluster.model_copy(update={"ami_release_version": "1.33.5-20251120"})})
    aws = account("us-east-1")
    aws.ready_for(env)  # a pinned release is looked up in EC2's images, not resolved through SSM

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the check finds EKS's image of that name
    (ami,) = [f for f in report.findings if f.check == "AMI release"]
    assert (ami.verdict, ami.detail) == (
        "ok",
        "amazon-eks-node-al2023-x86_64-nvidia-1.33-v20251120 is ami-0c1e2d3f4a5b6c7d8",
    )


def test_unpinned_ami_release_is_resolved_through_ssm(account: Any, prod_env: Any) -> None:
    # GIVEN an environment built without cluster.amiReleaseVersion (the stack files must pin one)
    env = prod_env()
    env = env.model_copy(update={"cluster": env.cluster.model_copy(update={"ami_release_version": None})})
    aws = account("us-east-1")
    aws.ready_for(env)  # an unpinned release is SSM's recommended one, the parameter the node groups read

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the check resolves the recommended release
    (ami,) = [f for f in report.findings if f.check == "AMI release"]
    assert (ami.subject, ami.verdict, ami.detail) == (
        "AL2023 NVIDIA, Kubernetes 1.33 (recommended)",
        "ok",
        "resolves to 1.33.5-20251120",
    )


def test_pinned_ami_release_that_was_never_published_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN a pinned release with no image behind it
    env = prod_env()
    env = env.model_copy(update={"cluster": env.cluster.model_copy(update={"ami_release_version": "1.33.5-20250231"})})
    aws = account("us-east-1")
    aws.ready_for(env)
    aws.stubs["ec2"]._queue.pop()  # the image answer ready_for queued last
    aws.eks_image("amazon-eks-node-al2023-x86_64-nvidia-1.33-v20250231", found=False)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN it is a blocker that points at the recommended release
    (problem,) = blockers(report)
    assert "no available Amazon image named amazon-eks-node-al2023-x86_64-nvidia-1.33-v20250231" in problem.detail


def test_elasticache_node_type_not_sold_in_the_region_is_a_blocker(account: Any, prod_env: Any) -> None:
    # GIVEN a region with no offering for the cache's node type
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env)
    aws.stubs["elasticache"]._queue.clear()
    aws.cache_offered("cache.r7g.large", offered=False)

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the blocker names the key to change
    (problem,) = blockers(report)
    assert problem.check == "ElastiCache node type"
    assert "fix: set inferstack:environment.cache.nodeType" in problem.detail


def test_a_denied_action_blocks_only_its_check(account: Any, prod_env: Any) -> None:
    # GIVEN credentials without servicequotas:GetServiceQuota
    env = prod_env()
    aws = account("us-east-1")
    aws.ready_for(env)
    aws.stubs["service-quotas"]._queue.clear()
    aws.stubs["service-quotas"].add_client_error("get_service_quota", service_error_code="AccessDeniedException")

    # WHEN preflight runs
    report = run(env, "prod", aws.clients, aws.now)

    # THEN the quota row says what was denied; every other check still ran and passed
    (problem,) = blockers(report)
    assert (problem.check, problem.subject) == ("vCPU quota", "could not check")
    assert "AccessDeniedException on GetServiceQuota; fix: grant the read-only actions" in problem.detail
    assert sum(f.verdict == "ok" for f in report.findings) == len(report.findings) - 1


def test_refused_credentials_stop_preflight_with_one_line(account: Any, prod_env: Any) -> None:
    # GIVEN credentials that STS refuses
    env = prod_env()
    aws = account("us-east-1")
    sts = aws.clients("sts")
    with Stubber(sts) as stub:
        stub.add_client_error("get_caller_identity", service_error_code="ExpiredToken", service_message="expired")

        # WHEN preflight runs
        with pytest.raises(AwsAccessError) as err:
            run(env, "prod", aws.clients, aws.now)

    # THEN the error is one line with the fix
    assert str(err.value) == (
        "AWS refused the credentials (ExpiredToken: expired); fix: refresh them (`aws sso login`, or new access keys)"
    )
