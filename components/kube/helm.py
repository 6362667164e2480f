"""One way to install a pinned chart: ``helm.v3.Release``, whose chart, version and values the plan shows."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.catalog.charts import CHARTS


def release(
    name: str,
    values: dict[str, Any],
    *,
    parent: pulumi.Resource,
    provider: k8s.Provider,
    depends_on: list[pulumi.Resource] | None = None,
) -> k8s.helm.v3.Release:
    """Install the chart pinned as ``name`` in ``components.catalog.charts.CHARTS`` (version, repo, namespace)."""
    pin = CHARTS[name]
    return k8s.helm.v3.Release(
        name,
        name=pin.name,
        chart=pin.chart_ref,
        version=pin.version,
        repository_opts=None if pin.is_oci else {"repo": pin.repo},
        namespace=pin.namespace,
        create_namespace=True,
        # Wait for the release's workloads: CRDs and webhooks must serve before objects that use them.
        atomic=True,
        timeout=900,
        values=values,
        opts=pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=depends_on or []),
    )
