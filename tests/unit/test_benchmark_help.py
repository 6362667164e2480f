"""Every benchmark answers `--help` with its usage and exits, as benchmarks/README.md has users check their options.

A benchmark without an argument parser ignored `--help`, ran for a minute of both cores and overwrote its committed
results (benchmarks/results/plan_bench.json)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py"))


def _results() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (ROOT / "benchmarks" / "results").iterdir()}


def test_there_are_benchmarks_to_check() -> None:
    assert "plan_bench.py" in BENCHMARKS and len(BENCHMARKS) >= 5


@pytest.mark.parametrize("script", BENCHMARKS)
def test_help_prints_usage_and_runs_nothing(script: str) -> None:
    # GIVEN a benchmark and its committed results
    before = _results()

    # WHEN a user asks it for its options
    done = subprocess.run(
        [sys.executable, str(Path("benchmarks") / script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    # THEN it prints its usage and exits 0 at once, writing no result
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")
    assert _results() == before
