"""One program, two clusters: the components that are one per cluster (ServingBase, ClusterAddons, Observability and
the on-prem tier's own) made once for each, through each cluster's provider.

A child's URN holds its parent's type, not its parent's name (Pulumi docs, "Resource names", URNs), so a child that
every instance names alike (a Namespace named ``inferstack-serving``, a Helm release named ``keda``) is one URN in two
instances, and the engine stops the update with "Duplicate resource URN". Those children are ``<component>-<name>``
now, and keep their former name as an alias so that an existing stack's ``pulumi up`` renames them in place."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pulumi
import pytest

from components.addons.cluster_addons import ClusterAddons, ClusterAddonsArgs
from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.observability.observability import Observability, ObservabilityArgs
from components.onprem.local_storage import LocalStorage, LocalStorageArgs
from components.onprem.metallb import MetalLb, MetalLbArgs
from components.onprem.network_operator import NetworkOperator, NetworkOperatorArgs
from components.onprem.specs import FabricSpec, LocalStorageSpec, MetalLbSpec, NetworkOperatorSpec
from components.serving.serving_base import ServingBase, ServingBaseArgs
from inferstack_cli.plan import MockEngine


@pytest.fixture
def aliases(engine: MockEngine) -> dict[str, list[str]]:
    """URN → the former URNs its registration names as aliases (alias specs: a name, relative to the resource)."""
    seen: dict[str, list[str]] = {}
    register = engine.monitor.RegisterResource

    def record(request: Any) -> Any:
        response = register(request)
        stem = response.urn.rsplit("::", 1)[0]
        seen[response.urn] = [f"{stem}::{a.spec.name}" for a in request.aliases if a.spec.name]
        return response

    engine.monitor.RegisterResource = record  # type: ignore[method-assign]
    return seen


def per_cluster(name: str, provider: Any) -> None:
    """What a user's program makes once per cluster, each under a name of its own (``name``: the cluster's)."""
    ServingBase(f"{name}-serving", ServingBaseArgs(provider=provider, tier="onprem"))
    ClusterAddons(f"{name}-addons", ClusterAddonsArgs(provider=provider, gpu_stack="gpu-operator", efa=True))
    Observability(
        f"{name}-observability",
        ObservabilityArgs(
            provider=provider,
            serving_namespace="inferstack-serving",
            gateway_namespace="inferstack-gateway",
            cache_url="redis://cache.inferstack-cache.svc:6379",
        ),
    )
    LocalStorage(f"{name}-local", LocalStorageArgs(spec=LocalStorageSpec(), provider=provider))
    MetalLb(f"{name}-metallb", MetalLbArgs(spec=MetalLbSpec(addresses=("10.0.0.0/28",)), provider=provider))
    NetworkOperator(
        f"{name}-network",
        NetworkOperatorArgs(
            spec=NetworkOperatorSpec(), fabric=FabricSpec(), provider=provider, serving_namespace="inferstack-serving"
        ),
    )


def test_the_per_cluster_components_on_two_clusters_in_one_program_are_distinct_urns(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    # GIVEN the user's two clusters, each reached through its own provider, and the per-cluster components on each
    dc2 = ExistingCluster("dc2", ExistingClusterArgs(kubeconfig=pulumi.Output.secret("apiVersion: v1")))
    per_cluster("dc1", cluster.k8s_provider)
    per_cluster("dc2", dc2.k8s_provider)
    resources = engine.settle()
    # WHEN the program is planned THEN no URN is registered twice (it was: the second cluster's Namespaces,
    # PriorityClasses, ServiceAccounts, Helm releases, monitors and dashboards, "Duplicate resource URN" at `pulumi up`)
    assert [urn for urn, n in Counter(r.urn for r in resources).items() if n > 1] == []
    # AND each cluster's objects go through its own provider: the same objects, once in each cluster
    providers = {r.name: r.urn for r in resources if r.type == "pulumi:providers:kubernetes"}
    objects = [r for r in resources if r.custom and r.type.startswith("kubernetes:")]
    by_cluster = {
        dc: Counter(
            (r.type, r.inputs.get("name") or r.inputs["metadata"]["name"]) for r in objects if r.provider == urn
        )
        for dc, urn in providers.items()
    }
    assert len(objects) > 60
    assert sum(by_cluster.values(), Counter()) == Counter(
        (r.type, r.inputs.get("name") or r.inputs["metadata"]["name"]) for r in objects
    )
    assert by_cluster["dc1"] == by_cluster["dc2"]


def test_an_existing_stack_keeps_its_objects_the_renamed_children_alias_their_former_urns(
    engine: MockEngine, cluster: ExistingCluster, aliases: dict[str, list[str]]
) -> None:
    # GIVEN the per-cluster components of a stack deployed before their children took the component's name
    per_cluster("site", cluster.k8s_provider)
    resources = engine.settle()
    components = {r.urn: r.name for r in resources if not r.custom and r.name.startswith("site-")}
    children = [r for r in resources if r.custom and r.parent in components]
    # WHEN each child is registered THEN its name starts with its component's (Pulumi's advice for children)
    assert [r.urn for r in children if not r.name.startswith(components[r.parent] + "-")] == []
    # AND one that had a name of its own names the URN it had, so `pulumi up` renames it in place, where it would
    # delete the Namespace (and all in it), the PriorityClass, the Helm release, and create them again
    renamed = {r.urn: r for r in children if aliases[r.urn]}
    assert {urn: aliases[urn] for urn in renamed} == {
        urn: [urn.replace(f"::{components[r.parent]}-", "::")] for urn, r in renamed.items()
    }
    assert {r.type.rsplit(":", 1)[-1] for r in renamed.values()} == {
        "Namespace", "PriorityClass", "ServiceAccount", "Release", "ConfigMap", "PodMonitor", "ServiceMonitor",
        "PrometheusRule",
    }  # fmt: skip
    # e.g. the serving Namespace and the KEDA release, as the bundled stacks' state holds them
    stack = "urn:pulumi:test::inferstack::"
    namespace = (
        f"{stack}inferstack:serving_base:ServingBase$kubernetes:core/v1:Namespace::site-serving-inferstack-serving"
    )
    keda = f"{stack}inferstack:cluster_addons:ClusterAddons$kubernetes:helm.sh/v3:Release::site-addons-keda"
    assert aliases[namespace] == [
        f"{stack}inferstack:serving_base:ServingBase$kubernetes:core/v1:Namespace::inferstack-serving"
    ]
    assert aliases[keda] == [f"{stack}inferstack:cluster_addons:ClusterAddons$kubernetes:helm.sh/v3:Release::keda"]
