"""Fixtures of the serving-layer tests: golden files and the model loader under moto."""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
LOADER_DIR = ROOT / "images" / "model-loader"


@pytest.fixture
def golden() -> Callable[[str, str], None]:
    """Compare ``text`` with ``tests/serving/golden/<name>``; ``UPDATE_SNAPSHOT=1`` rewrites it."""

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("UPDATE_SNAPSHOT") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"golden file {path.relative_to(ROOT)} is missing; create it with UPDATE_SNAPSHOT=1")
        expected = path.read_text()
        if text != expected:
            diff = "".join(
                difflib.unified_diff(
                    expected.splitlines(keepends=True), text.splitlines(keepends=True), "golden", "rendered"
                )
            )
            pytest.fail(
                f"render differs from {path.relative_to(ROOT)}; review, then refresh with UPDATE_SNAPSHOT=1:\n{diff}"
            )

    return check


@pytest.fixture(scope="session")
def loader() -> ModuleType:
    """``images/model-loader/model_loader.py`` imported as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("model_loader", LOADER_DIR / "model_loader.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_loader"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A moto S3 client with fake credentials (forked children inherit both)."""
    import boto3
    from moto import mock_aws

    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="models")
        yield client
