"""Every Helm value the kit sets exists in the pinned chart version's own values.yaml (issues 10 and 11)."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable

import pytest

from components.catalog.charts import CHARTS, chart
from helm_values import STAND_INS, VALUES_DIR, explain, load_defaults, unknown_paths, values_path
from helpers import bundled_stacks
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]
RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_key_the_kit_sets_exists_in_the_pinned_chart(plan_of: PlanOf, stack: str) -> None:
    # GIVEN every Helm release a bundled stack installs
    releases = plan_of(stack).of_type(RELEASE)
    assert releases, f"stack {stack} installs no Helm release"
    # WHEN each release's values are walked against its pinned chart's default values
    errors = []
    for release in releases:
        name = release.inputs["name"]
        defaults = load_defaults(CHARTS[name])
        unknown = unknown_paths(release.inputs.get("values") or {}, defaults)
        if unknown:
            errors.append(explain(name, defaults, unknown))
    # THEN every key path the kit sets is one the chart reads
    assert errors == [], "\n".join(errors)


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_release_installs_its_pinned_chart_version(plan_of: PlanOf, stack: str) -> None:
    # GIVEN every Helm release a bundled stack installs
    releases = plan_of(stack).of_type(RELEASE)
    # WHEN / THEN each one installs exactly the chart, version and namespace its pin names
    installed = {r.inputs["name"]: (r.inputs["chart"], r.inputs["version"], r.inputs["namespace"]) for r in releases}
    pinned = {name: (chart(name).chart_ref, chart(name).version, chart(name).namespace) for name in installed}
    assert installed == pinned


@pytest.mark.parametrize("name", sorted(CHARTS))
def test_every_pinned_chart_has_its_values_file(name: str) -> None:
    # GIVEN a pinned chart
    path = values_path(CHARTS[name])
    # WHEN / THEN its default values are vendored, as a mapping
    assert path.is_file(), f"vendor {CHARTS[name].chart}'s values.yaml at {CHARTS[name].version} as {path}"
    assert load_defaults(CHARTS[name]).values


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_a_stand_in_is_only_used_while_the_pinned_file_is_missing(name: str) -> None:
    # GIVEN a pin checked against another release's values.yaml
    pin = CHARTS[name]
    own = VALUES_DIR / f"{pin.chart}-{pin.version}.values.yaml"
    # WHEN / THEN the pin's own file is still missing (once vendored, the stand-in must go), and the
    # stand-in is an older release of the same chart
    assert not own.exists(), f"{own.name} is vendored: delete STAND_INS[{name!r}] in tests/helm_values.py"
    assert STAND_INS[name].stored != pin.version


def test_notice_lists_every_vendored_values_file_with_its_hash() -> None:
    # GIVEN the vendored values files and the NOTICE that cites them
    notice = (VALUES_DIR / "NOTICE.md").read_text()
    rows = dict(re.findall(r"^\| `([^`]+\.values\.yaml)` \|.*\| `([0-9a-f]{64})` \|$", notice, re.MULTILINE))
    # WHEN each file is hashed
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in VALUES_DIR.glob("*.values.yaml")}
    # THEN each one is cited, unmodified
    assert rows == files


def test_a_misspelled_key_is_caught_and_named() -> None:
    # GIVEN GPU Operator values with `enabled` misspelled under `driver`
    defaults = load_defaults(chart("gpu-operator"))
    values = {"driver": {"enabeld": False}, "toolkit": {"enabled": True}}
    # WHEN they are checked
    unknown = unknown_paths(values, defaults)
    # THEN the path is reported, and the message names release, path, chart version and the fix
    assert unknown == ["driver.enabeld"]
    message = explain("gpu-operator", defaults, unknown)
    assert "release 'gpu-operator' sets `driver.enabeld`" in message
    assert "the values.yaml of gpu-operator v26.7.0 does not have" in message
    assert "Fix the key in the component" in message


def test_a_misspelled_key_in_a_planned_release_is_caught(plan_of: PlanOf) -> None:
    # GIVEN a copy of the values the dev stack gives kube-prometheus-stack, with a typo in a Grafana
    # (subchart) key and one in a key of the chart itself
    release = next(r for r in plan_of("dev").of_type(RELEASE) if r.inputs["name"] == "kube-prometheus-stack")
    values = copy.deepcopy(release.inputs["values"])
    values["grafana"]["sidecar"]["dashboards"]["lable"] = "grafana_dashboard"
    values["prometheus"]["prometheusSpec"]["retension"] = "15d"
    # WHEN / THEN both are caught
    assert sorted(unknown_paths(values, load_defaults(chart("kube-prometheus-stack")))) == [
        "grafana.sidecar.dashboards.lable",
        "prometheus.prometheusSpec.retension",
    ]


def test_subchart_keys_resolve_against_the_subchart_values() -> None:
    # GIVEN a key the kube-prometheus-stack values never mention, but its Grafana subchart's do
    defaults = load_defaults(chart("kube-prometheus-stack"))
    assert "persistence" not in defaults.values["grafana"]
    # WHEN / THEN it is accepted under `grafana:`, and so is kube-state-metrics' own `replicas`
    assert unknown_paths({"grafana": {"persistence": {"enabled": True}}}, defaults) == []
    assert unknown_paths({"kube-state-metrics": {"replicas": 2}}, defaults) == []
    # and the GPU Operator's NFD subchart resolves the same way
    gpu_operator = load_defaults(chart("gpu-operator"))
    assert "replicaCount" not in gpu_operator.values["node-feature-discovery"]["master"]
    assert unknown_paths({"node-feature-discovery": {"master": {"replicaCount": 2}}}, gpu_operator) == []
    assert unknown_paths({"node-feature-discovery": {"master": {"replicas": 2}}}, gpu_operator) == [
        "node-feature-discovery.master.replicas"
    ]


def test_free_form_defaults_accept_any_keys_below() -> None:
    # GIVEN defaults that leave the shape to the user: an empty map, a list, a label map with a default
    # entry, and the collector's config
    karpenter = load_defaults(chart("karpenter"))
    collector = load_defaults(chart("opentelemetry-collector"))
    # WHEN / THEN anything below them is accepted
    assert unknown_paths({"nodeSelector": {"inferstack.io/pool": "system"}}, karpenter) == []
    assert unknown_paths({"tolerations": [{"key": "nvidia.com/gpu"}], "podAnnotations": {"a": "b"}}, karpenter) == []
    assert unknown_paths({"config": {"connectors": {"spanmetrics": {}}}}, collector) == []


def test_a_map_where_the_chart_has_a_scalar_is_caught() -> None:
    # GIVEN a map set where the chart reads a boolean
    defaults = load_defaults(chart("gpu-operator"))
    # WHEN / THEN it is reported: the template would read the map as the boolean
    assert unknown_paths({"driver": {"enabled": {"value": False}}}, defaults) == ["driver.enabled"]


def test_a_scalar_where_the_chart_has_a_map_is_caught() -> None:
    # GIVEN an image reference as one string, where the chart reads {repository, tag}
    defaults = load_defaults(chart("opentelemetry-collector"))
    # WHEN / THEN it is reported
    assert unknown_paths({"image": "otel/opentelemetry-collector-contrib:0.158.0"}, defaults) == ["image"]


def test_null_drops_a_key_anywhere() -> None:
    # GIVEN null, which Helm reads as "delete this key" (Karpenter's interruptionQueue in the dev stack)
    defaults = load_defaults(chart("karpenter"))
    # WHEN / THEN it is accepted
    assert unknown_paths({"settings": {"interruptionQueue": None}}, defaults) == []
