"""Classes of bad value that any key of any tier can receive: each gets one line in the common shape, at the key the
user wrote, with no pydantic wording (found by fuzzing every key of the four bundled stacks)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from helpers import config_errors, refused_by_plan

# (stack, a path to a number, the key's camelCase path as the error must name it)
NUMBER_KEYS = [
    ("prod", ("models", 0, "replicas"), "models[0].replicas"),
    ("prod", ("models", 0, "slo", "ttftP99Ms"), "models[0].slo.ttftP99Ms"),
    ("dev", ("gpuPools", 0, "maxSize"), "gpuPools[0].maxSize"),
    ("onprem", ("gpuPools", 1, "hostMemoryGib"), "gpuPools[1].hostMemoryGib"),
    ("onprem", ("gateway", "burst", "spillAboveTtftMs"), "gateway.burst.spillAboveTtftMs"),
    ("edge", ("nodes", 0, "memoryBandwidthGbS"), "nodes[0].memoryBandwidthGbS"),
    ("edge", ("observability", "retentionDays"), "observability.retentionDays"),
]


def _setter(path: tuple[str | int, ...], value: Any) -> Any:
    def edit(env: dict[str, Any]) -> None:
        node: Any = env
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value

    return edit


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(("stack", "path", "key"), NUMBER_KEYS)
def test_nan_or_infinity_for_a_number_is_refused_in_words(
    stack: str, path: tuple[str | int, ...], key: str, value: float
) -> None:
    # YAML's .nan and .inf are floats: a whole-number key answered "Input should be a finite number" with no fix, and
    # a decimal one passed .inf on (slo.ttftP99Ms: .inf planned) or said NaN is out of its bounds.
    (line,) = config_errors(_setter(path, value), stack)
    assert f"inferstack:environment.{key}: got " in line
    assert "allowed: a finite number; fix: write the number itself" in line
    assert "Input should" not in line


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("stack", "path", "key"), NUMBER_KEYS)
def test_true_or_false_for_a_number_is_refused(stack: str, path: tuple[str | int, ...], key: str, value: bool) -> None:
    # pydantic reads true as 1 and false as 0: `replicas: true` planned one replica, `maxSize: false` a pool of none.
    (line,) = config_errors(_setter(path, value), stack)
    assert (
        f"inferstack:environment.{key}: got {str(value).lower()} (true or false is not a number); allowed: a " in line
    )
    assert "fix: write the number itself" in line


def test_nan_in_a_stack_file_is_refused_by_plan(tmp_path: Path) -> None:
    line = refused_by_plan(tmp_path, "edge", _setter(("nodes", 0, "cpu"), math.nan))
    assert line.endswith(
        "inferstack:environment.nodes[0].cpu: got NaN; allowed: a finite number; fix: write the number itself, e.g. 2"
    )
