"""The third-party charts whose own values leave their pods without a security context get one from the kit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from components.catalog.charts import CHARTS
from helm_values import load_defaults
from helpers import bundled_stacks
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]
RELEASE = "kubernetes:helm.sh/v3:Release"
UNRESTRICTED_BY_DEFAULT = ("prometheus-redis-exporter", "opentelemetry-collector")
"""Charts whose pinned values.yaml sets ``podSecurityContext: {}`` and ``securityContext: {}``."""


def _restricted(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """What keeps the pair short of Pod Security "restricted" plus a read-only root filesystem."""
    gaps = []
    if pod.get("runAsNonRoot") is not True or not pod.get("runAsUser"):
        gaps.append("pod runAsNonRoot/runAsUser")
    if (pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        gaps.append("pod seccompProfile")
    if container.get("allowPrivilegeEscalation") is not False:
        gaps.append("container allowPrivilegeEscalation")
    if container.get("readOnlyRootFilesystem") is not True:
        gaps.append("container readOnlyRootFilesystem")
    if "ALL" not in ((container.get("capabilities") or {}).get("drop") or []):
        gaps.append("container capabilities.drop ALL")
    return gaps


@pytest.mark.parametrize("name", UNRESTRICTED_BY_DEFAULT)
def test_the_charts_own_defaults_leave_the_pod_unrestricted(name: str) -> None:
    # GIVEN the pinned chart's default values WHEN its security contexts are read THEN they are empty: without the
    # kit's values its pod would run as whatever user the image names, with every default capability
    defaults = load_defaults(CHARTS[name]).values
    assert _restricted(defaults["podSecurityContext"] or {}, defaults["securityContext"] or {})


@pytest.mark.parametrize("stack", bundled_stacks())
def test_the_kit_restricts_the_charts_that_do_not(plan_of: PlanOf, stack: str) -> None:
    # GIVEN every release of those charts a bundled stack installs
    releases = [r for r in plan_of(stack).of_type(RELEASE) if r.inputs["chart"] in UNRESTRICTED_BY_DEFAULT]
    assert {r.inputs["chart"] for r in releases} == set(UNRESTRICTED_BY_DEFAULT)
    # WHEN each one's values are read
    gaps = {
        r.name: _restricted(
            r.inputs["values"].get("podSecurityContext") or {}, r.inputs["values"].get("securityContext") or {}
        )
        for r in releases
    }
    # THEN each runs non-root, read-only, without privilege escalation or capabilities, under RuntimeDefault seccomp
    assert gaps == {r.name: [] for r in releases}
