"""One way to install a pinned chart: ``helm.v3.Release``, whose chart, version and values the plan shows."""

from __future__ import annotations

from typing import Any, Final

import pulumi
import pulumi_kubernetes as k8s

from components.catalog.charts import CHARTS
from components.kube.objects import per_instance

HELM_RELEASE_NAME_MAX: Final = 53
"""Helm refuses a longer release name (its names become parts of object names and labels)."""


def release(
    name: str,
    values: dict[str, Any],
    *,
    parent: pulumi.Resource,
    component: str,
    provider: k8s.Provider,
    depends_on: list[pulumi.Resource] | None = None,
    release_name: str | None = None,
) -> k8s.helm.v3.Release:
    """Install the chart pinned as ``name`` in ``components.catalog.charts.CHARTS`` (version, repo, namespace), as the
    release ``release_name`` (default: the pin's); a second release of one chart takes a name of its own. The Pulumi
    resource is ``<component>-<release name>`` (``component``: the name of the ``parent`` instance), so that the same
    component on two clusters in one program makes two URNs; it aliases its former name, the release name alone."""
    pin = CHARTS[name]
    resource_name, opts = per_instance(
        component,
        release_name or name,
        pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=depends_on or []),
    )
    return k8s.helm.v3.Release(
        resource_name,
        name=release_name or pin.name,
        chart=pin.chart_ref,
        version=pin.version,
        repository_opts=None if pin.is_oci else {"repo": pin.repo},
        namespace=pin.namespace,
        create_namespace=True,
        # Wait for the release's workloads: CRDs and webhooks must serve before objects that use them.
        atomic=True,
        timeout=900,
        values=values,
        opts=opts,
    )
