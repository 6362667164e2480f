"""Check the Helm values the kit sets against the pinned chart's own ``values.yaml`` (issues 10 and 11).

Helm accepts any key: a misspelled one (``driver: {enabeld: false}``) installs cleanly and changes
nothing, so the default the kit meant to override stays in force. This module walks the values a
``helm.v3.Release`` is given and reports every key path that the chart's default values do not have.

The chart defaults are vendored under ``tests/charts/`` (see ``tests/charts/NOTICE.md``), named
``<chart>-<version>.values.yaml`` for the chart and ``<chart>-<version>.<section>-<subversion>.values.yaml``
for a subchart whose values sit under ``<section>:`` in the parent's (kube-prometheus-stack's
``grafana:``). Nothing here imports the kit's components: the kit's only input is the chart table.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.catalog.charts import ChartPin

VALUES_DIR = Path(__file__).resolve().parent / "charts"


@dataclass(frozen=True)
class StandIn:
    """A pin whose own ``values.yaml`` is in none of the sources the project reads from (yet)."""

    stored: str
    """The version whose ``values.yaml`` is vendored and checked against instead."""
    why: str


STAND_INS: Mapping[str, StandIn] = {
    # The pinned patch releases are newer than every upstream snapshot the project can read (the newest
    # tags there are dcgm-exporter 4.5.3-4.8.2, prometheus-redis-exporter-6.29.0 and
    # opentelemetry-collector-0.170.0). The pins stay: dcgm-exporter >= 4.8.3 is what exports the
    # `hostname` label the GPU dashboard selects on (components/observability/dashboards.py). The keys
    # the kit sets are checked against the newest release that can be read; vendor the pinned file and
    # delete the entry (test_helm_values fails while both exist).
    "dcgm-exporter": StandIn("4.8.2", "4.8.4 not in the upstream snapshot (newest tag 4.5.3-4.8.2)"),
    "prometheus-redis-exporter": StandIn(
        "6.29.0", "6.31.1 not in the upstream snapshot (newest tag prometheus-redis-exporter-6.29.0)"
    ),
    "opentelemetry-collector": StandIn(
        "0.170.0", "0.177.0 not in the upstream snapshot (newest tag opentelemetry-collector-0.170.0)"
    ),
}

FREE_FORM: Mapping[str, frozenset[tuple[str, ...]]] = {
    # "Base collector configuration. Supports templating." The chart merges `config` into its own
    # default pipelines as an OpenTelemetry Collector config, whose components (connectors, receivers
    # ...) are the collector's, not the chart's (charts/opentelemetry-collector/values.yaml, `config:`).
    "opentelemetry-collector": frozenset({("config",)}),
}
"""Key paths, per chart, whose non-empty defaults are an example of a free-form object, not its schema."""


def values_path(pin: ChartPin) -> Path:
    """The vendored defaults for ``pin``: its own version's file, or its declared stand-in."""
    stand_in = STAND_INS.get(pin.name)
    return VALUES_DIR / f"{pin.chart}-{stand_in.stored if stand_in else pin.version}.values.yaml"


@dataclass(frozen=True)
class ChartDefaults:
    """One chart version's default values, with its subcharts' under the section each one owns."""

    label: str
    """``chart version`` as the error message names it."""
    values: Mapping[str, Any]
    subcharts: Mapping[str, Mapping[str, Any]]
    free_form: frozenset[tuple[str, ...]] = frozenset()


def load_defaults(pin: ChartPin) -> ChartDefaults:
    """``pin``'s default values, and its vendored subcharts' keyed by the section the parent passes on."""
    path = values_path(pin)
    stem = path.name.removesuffix(".values.yaml")
    subcharts = {}
    for sub in sorted(VALUES_DIR.glob(f"{stem}.*.values.yaml")):
        # `<stem>.<section>-<subchart version>.values.yaml`, e.g. `...-88.0.0.kube-state-metrics-8.0.0...`
        section, _version = sub.name.removeprefix(f"{stem}.").removesuffix(".values.yaml").rsplit("-", 1)
        subcharts[section] = yaml.safe_load(sub.read_text()) or {}
    label = f"{pin.chart} {pin.version}"
    if pin.name in STAND_INS:
        label += f" (checked against {STAND_INS[pin.name].stored})"
    return ChartDefaults(label, yaml.safe_load(path.read_text()) or {}, subcharts, FREE_FORM.get(pin.name, frozenset()))


_KUBERNETES_MAPS = frozenset({"nodeSelector", "affinity", "labels", "annotations"})
"""Keys that every chart passes through to a Kubernetes field of the same name: a label map
(``map[string]string`` in the Pod/ObjectMeta API) or an ``Affinity`` object. Their keys are the user's
(label names), even where a chart ships a non-empty default (Karpenter: ``nodeSelector:
{kubernetes.io/os: linux}``)."""


def _free_form(key: str, default: Any) -> bool:
    """An empty map, a list, null or a Kubernetes label map: the chart leaves the keys to the user."""
    if default is None or isinstance(default, list) or (isinstance(default, Mapping) and not default):
        return True
    return key in _KUBERNETES_MAPS or key.endswith(("Labels", "Annotations"))


def _merge(parent: Mapping[str, Any], sub: Mapping[str, Any]) -> dict[str, Any]:
    """A subchart's defaults as Helm computes them: the parent's section overrides the subchart's values."""
    merged = dict(sub)
    for key, value in parent.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(value, merged[key])
        else:
            merged[key] = value
    return merged


def unknown_paths(values: Mapping[str, Any], chart: ChartDefaults) -> list[str]:
    """Every dotted key path in ``values`` that ``chart``'s defaults have no place for: an unknown key, or a
    map where the chart has a scalar, or the reverse. ``null`` (Helm's "drop this key") fits anywhere."""
    defaults: dict[str, Any] = dict(chart.values)
    for section, sub in chart.subcharts.items():
        defaults[section] = _merge(defaults.get(section) or {}, sub)
    return [".".join(path) for path in _walk(values, defaults, (), chart.free_form)]


def _walk(
    values: Mapping[str, Any], defaults: Mapping[str, Any], path: tuple[str, ...], free_form: frozenset[tuple[str, ...]]
) -> Iterator[tuple[str, ...]]:
    for key, value in values.items():
        here = (*path, key)
        if key not in defaults:
            yield here
            continue
        default = defaults[key]
        if here in free_form or _free_form(key, default) or value is None:
            continue
        if isinstance(value, Mapping) and isinstance(default, Mapping):
            yield from _walk(value, default, here, free_form)
        elif isinstance(value, Mapping) or isinstance(default, Mapping):
            # A map where the chart reads a scalar (`enabled: {x: 1}`), or a scalar where it reads a map
            # (`image: repo:tag` for `image: {repository, tag}`): the template misreads either.
            yield here


def explain(release: str, chart: ChartDefaults, paths: list[str]) -> str:
    """The failure message: what is wrong, where, and how to fix it."""
    listed = ", ".join(f"`{p}`" for p in paths)
    return (
        f"release {release!r} sets {listed}, which the values.yaml of {chart.label} does not have (or has as another "
        "kind of value, map or scalar): Helm ignores unknown keys, so the chart default stays in force. Fix the key "
        "in the component that builds these "
        "values (compare tests/charts/), or, if the chart moved it, vendor the new values.yaml with the pin bump."
    )


SUBCHART_SWITCHES: Mapping[str, str] = {"node-feature-discovery": "nfd"}
"""The parent's section whose ``enabled`` installs a subchart, where it is not the subchart's own: the GPU and Network
Operators' NFD (``condition: nfd.enabled`` in their ``Chart.yaml`` at the pinned tags)."""


def default_requests(values: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Paths of ``resources`` blocks whose chart default requests something, in sections that are not disabled
    (``enabled: false``; NFD's sections say ``enable: false``)."""
    if values.get("enabled") is False or values.get("enable") is False:
        return
    for key, value in values.items():
        if not isinstance(value, Mapping):
            continue
        if key == "resources" and value.get("requests"):
            yield (*path, key)
        elif key == "resources":
            yield from ((*path, key, k) for k, v in value.items() if isinstance(v, Mapping) and v.get("requests"))
        else:
            yield from default_requests(value, (*path, key))


def unstated_requests(values: Mapping[str, Any], chart: ChartDefaults) -> list[str]:
    """The ``resources`` blocks whose chart default requests something and that ``values`` leaves unsaid, in the chart
    and in each subchart it installs: a node budget that reads the values would miss those pods' requests."""
    paths = [*default_requests(chart.values)]
    for section, sub in chart.subcharts.items():
        switch = SUBCHART_SWITCHES.get(section, section)
        installed = (values.get(switch) or {}).get("enabled", (chart.values.get(switch) or {}).get("enabled"))
        if installed is not False:
            paths += default_requests(sub, (section,))
    unstated = []
    for path in paths:
        node: Any = values
        for key in path:
            node = node.get(key, {}) if isinstance(node, Mapping) else {}
        if not node.get("requests"):
            unstated.append(".".join(path))
    return unstated
