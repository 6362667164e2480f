"""``inferstack preflight``: parse, load the stack, run the tier's checks, print the table, exit."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inferstack_cli.output import EXIT_CONFIG, EXIT_NO_AWS, EXIT_NOT_READY, table
from stacks.environment import ConfigError


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "preflight",
        help="read-only checks against the real AWS account: offerings, quota, reservations, AMI, EKS version",
    )
    cmd.add_argument("--stack", required=True, help="stack name: reads stacks/Pulumi.<stack>.yaml")
    cmd.add_argument("--profile", help="AWS profile (default: boto3's credential chain)")
    cmd.add_argument("--stacks-dir", metavar="DIR", help="where the Pulumi.<stack>.yaml files live (default: bundled)")
    cmd.set_defaults(func=cmd_preflight)


def cmd_preflight(args: argparse.Namespace) -> int:
    from inferstack_cli.plan import load_stack
    from stacks import program
    from stacks.preflight import NOT_COVERED, TIERS

    stacks_dir = Path(args.stacks_dir) if args.stacks_dir else program.STACKS_DIR
    try:
        # The account's answers are for env.region; `pulumi up` deploys to aws:region (load_stack checks they agree).
        _, env = load_stack(args.stack, stacks_dir)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return EXIT_CONFIG
    if env.tier not in TIERS:
        reason = NOT_COVERED.get(env.tier, "it has no checks")
        print(
            f"preflight covers the cloud tier only: stack {args.stack} is tier {env.tier} ({reason}); nothing checked"
        )
        return 0

    from stacks.environment import CloudEnvironment
    from stacks.preflight import aws

    assert isinstance(env, CloudEnvironment)  # NOT_COVERED returned above for every other tier

    try:
        report = aws.run(env, args.stack, aws.AwsClients(env.region, profile=args.profile), datetime.now(UTC))
    except aws.AwsAccessError as err:
        print(f"inferstack preflight: {err}", file=sys.stderr)
        return EXIT_NO_AWS
    print(f"inferstack preflight: stack {report.stack} — account {report.account}, region {report.region}\n")
    rows = [[f.check, f.subject, f.verdict.upper() if f.verdict != "ok" else "ok", f.detail] for f in report.findings]
    print(table(rows, ["check", "subject", "verdict", "detail"]))
    print(f"\n{report.verdict_line()}")
    return 0 if report.ready else EXIT_NOT_READY
