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


def _renamer(path: tuple[str | int, ...], typo: str) -> Any:
    def edit(env: dict[str, Any]) -> None:
        node: Any = env
        for part in path[:-1]:
            node = node[part]
        node[typo] = node.pop(path[-1])

    return edit


@pytest.mark.parametrize(
    ("stack", "path", "typo", "at"),
    [
        ("prod", ("region",), "regoin", ""),  # required
        ("onprem", ("imageRegistry",), "imageRegisty", ""),  # required on the tier
        ("edge", ("nodes", 0, "memoryGib"), "memoryGb", "nodes[0]."),  # required in a list item
        ("dev", ("network", "availabilityZones"), "availabiltyZones", "network."),  # a default that fails its rule
        ("edge", ("gateway", "burst", "spillAboveInflight"), "spillAboveInflght", "gateway.burst."),  # a section rule
        ("onprem", ("observability", "remoteWriteReceiver"), "remoteWriteReciever", "observability."),
    ],
)
def test_a_misspelt_key_the_section_needs_is_one_line_naming_the_key(
    stack: str, path: tuple[str | int, ...], typo: str, at: str
) -> None:
    # Before: the unknown key's line, and a second one for the same mistake ("region: got nothing; allowed: a value
    # (this key is required)", "returnBelowInflight without spillAboveInflight", ...).
    (line,) = config_errors(_renamer(path, typo), stack)
    assert f"inferstack:environment.{at}{typo}: got unknown key {typo!r}; " in line
    assert line.endswith(f"fix: rename it to `{path[-1]}`, which this section needs")


def test_a_misspelt_optional_key_may_still_be_removed() -> None:
    (line,) = config_errors(lambda e: e["gateway"].update(maxReplica=4))
    assert line.endswith("fix: remove the key, or rename it (did you mean 'maxReplicas'?)")


@pytest.mark.parametrize(
    ("stack", "zone"), [("dev", "us-west-2az"), ("prod", "us-east-1-bos-1a"), ("prod", "eu-west-1a")]
)
def test_a_network_zone_that_is_no_zone_of_the_region_is_one_line_at_its_index(stack: str, zone: str) -> None:
    # Before: us-west-2az (which starts with the region) passed to fail at `pulumi up`; a zone of another region was
    # reported at network.availabilityZones without its index, and again at the pool pinned to the zone it replaced
    # ("gpuPools[0].zone: got 'us-east-1a'", which is right).
    (line,) = config_errors(lambda e: e["network"]["availabilityZones"].__setitem__(0, zone), stack)
    region = "us-west-2" if stack == "dev" else "us-east-1"
    assert f"inferstack:environment.network.availabilityZones[0]: got {zone!r}; " in line
    assert f"allowed: availability zones of region {region}: {region}<letter>, e.g. {region}a; " in line


def test_a_pool_zone_outside_a_sound_network_is_still_refused() -> None:
    (line,) = config_errors(lambda e: e["gpuPools"][0].update(zone="us-east-1d"))
    assert "inferstack:environment.gpuPools[0].zone: got 'us-east-1d'" in line


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda e: e["gateway"].update(replicas=50), "gateway.replicas: got 50 (maxReplicas is 2)"),
        (lambda e: e.pop("gateway"), "gateway.apiKeys: got no keys"),  # the default gateway, at 10 replicas
    ],
)
def test_a_site_is_budgeted_only_once_its_config_is_otherwise_sound(edit: Any, key: str) -> None:
    # As on the cloud and on-prem tiers. Before, the same mistake came back as a second line, the site short of CPU
    # for the 50 (or the default 10) gateways.
    (line,) = config_errors(edit, "edge")
    assert f"inferstack:environment.{key}" in line


@pytest.mark.parametrize(
    ("stack", "key", "count"),
    [("dev", "gpuPools", 1), ("onprem", "gpuPools", 2), ("edge", "nodes", 1), ("prod", "models", 2)],
)
def test_a_repeated_name_is_one_line_at_the_repeat(stack: str, key: str, count: int) -> None:
    # Before: one line at each copy, two problems for one repeated name.
    def edit(env: dict[str, Any]) -> None:
        env[key].append(dict(env[key][0]))

    lines = config_errors(edit, stack)
    at = f"inferstack:environment.{key}[{count}].name: got "
    assert [line for line in lines if ".name: got " in line] == [
        line
        for line in lines
        if at in line and f", the name of {key}[0] too; allowed: a name unique among {key}" in line
    ]
    assert len([line for line in lines if at in line]) == 1
