"""Real-cloud checks: a real `pulumi preview` (and, when asked, `up` + a no-change preview + `destroy`).

These need the Pulumi CLI, AWS credentials and a Pulumi backend. They are marked ``cloud`` and
skipped unless ``INFERSTACK_CLOUD_TESTS=1`` is set with credentials present; nothing here is
simulated. Run: ``INFERSTACK_CLOUD_TESTS=1 pytest -m cloud tests/cloud``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from helpers import ROOT

pytestmark = pytest.mark.cloud

_ready = (
    os.environ.get("INFERSTACK_CLOUD_TESTS") == "1"
    and shutil.which("pulumi") is not None
    and any(os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE"))
)
skip_without_cloud = pytest.mark.skipif(
    not _ready, reason="needs INFERSTACK_CLOUD_TESTS=1, the Pulumi CLI and AWS credentials"
)


@skip_without_cloud
def test_dev_stack_previews_against_real_aws() -> None:
    from pulumi import automation as auto

    stack = auto.select_stack(stack_name=os.environ.get("INFERSTACK_CLOUD_STACK", "dev"), work_dir=str(ROOT))
    result = stack.preview(policy_packs=[str(ROOT / "policies")])
    assert result.change_summary.get("create", 0) > 0 or result.change_summary.get("same", 0) > 0


@skip_without_cloud
@pytest.mark.skipif(
    os.environ.get("INFERSTACK_CLOUD_UP") != "1",
    reason="creating an EKS cluster costs money: set INFERSTACK_CLOUD_UP=1",
)
def test_dev_stack_up_is_stable_then_destroys() -> None:
    from pulumi import automation as auto

    stack = auto.select_stack(stack_name=os.environ.get("INFERSTACK_CLOUD_STACK", "dev"), work_dir=str(ROOT))
    try:
        stack.up(on_output=print)
        # A second preview right after `up` must show no replacements and no updates: no config drift.
        again = stack.preview()
        assert again.change_summary.get("replace", 0) == 0
        assert again.change_summary.get("update", 0) == 0
    finally:
        stack.destroy(on_output=print)
