"""Fixtures for the observability and autoscaling renders: golden files and a shared model list."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from components.observability.alerts import ModelSlo

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def canonical_json(obj: Any) -> str:
    """Sorted keys, two-space indent, trailing newline: diffs in review show only what changed."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


@pytest.fixture
def golden() -> Callable[[str, Any], None]:
    """Compare ``obj`` with ``golden/<name>.json``; ``UPDATE_SNAPSHOT=1`` rewrites the file instead."""

    def check(name: str, obj: Any) -> None:
        path = GOLDEN_DIR / f"{name}.json"
        rendered = canonical_json(obj)
        if os.environ.get("UPDATE_SNAPSHOT") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered)
            return
        assert path.exists(), f"{path} is missing: run UPDATE_SNAPSHOT=1 pytest tests/observability and review it"
        assert rendered == path.read_text(), (
            f"{name} differs from {path}; if the change is intended, refresh with UPDATE_SNAPSHOT=1 and review the diff"
        )

    return check


@pytest.fixture
def fleet() -> list[ModelSlo]:
    """One model per shape the rules distinguish: vLLM Deployment, Triton Deployment, vLLM LeaderWorkerSet."""
    return [
        ModelSlo("llama-8b", "vllm", ttft_p99_ms=100, itl_p99_ms=20, namespace="serving"),
        ModelSlo(
            "llama-70b-trt", "triton", ttft_p99_ms=150, itl_p99_ms=25, namespace="serving", gateway_namespace="gateway"
        ),
        ModelSlo(
            "llama-405b",
            "vllm",
            ttft_p99_ms=300,
            itl_p99_ms=40,
            namespace="serving",
            workload_kind="LeaderWorkerSet",
        ),
    ]
