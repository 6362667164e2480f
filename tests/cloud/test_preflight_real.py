"""``inferstack preflight`` against a real AWS account: every check asks the account, nothing is faked.

Marked ``cloud``; skipped unless ``INFERSTACK_CLOUD_TESTS=1`` and AWS credentials are present (no
Pulumi CLI needed: preflight only reads). Run:
``INFERSTACK_CLOUD_TESTS=1 pytest -m cloud tests/cloud/test_preflight_real.py``. The stack is
``INFERSTACK_CLOUD_STACK`` (default ``dev``); its verdict depends on the account, so the test asserts
that every check ran and answered, not that the account is ready.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.cloud

_ready = os.environ.get("INFERSTACK_CLOUD_TESTS") == "1" and any(
    os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE")
)


@pytest.mark.skipif(not _ready, reason="needs INFERSTACK_CLOUD_TESTS=1 and AWS credentials")
def test_preflight_answers_every_check_from_the_real_account() -> None:
    stack = os.environ.get("INFERSTACK_CLOUD_STACK", "dev")

    done = subprocess.run(
        [sys.executable, "-m", "inferstack_cli.main", "preflight", "--stack", stack],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # 0 (ready) or 4 (a blocker in this account) both mean the account answered; 5 means it could not be asked.
    assert done.returncode in (0, 4), done.stderr
    lines = done.stdout.splitlines()
    for check in ("instance offering", "AMI release", "EKS version"):
        assert any(line.startswith(check) for line in lines), done.stdout
    assert "could not check" not in done.stdout, done.stdout
    assert lines[-1].startswith("preflight: ")
