"""Components composed by hand: one object made twice is found at plan time (the policy pack's
stack-kube-objects-unique rule), not halfway through `pulumi up`. (A component refuses a bad name or namespace in its
arguments itself: components/kube/objects.py's check_name.)"""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest

from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.kube.objects import check_name
from components.serving.inference_server import InferenceServer, InferenceServerArgs
from inferstack_cli.plan import MockEngine
from policies.rules import check_plan

from .conftest import model

RULES = ("k8s-names-valid", "stack-kube-objects-unique")


def findings(engine: MockEngine) -> list[str]:
    return [f"{v['policy']}: {v['message']}" for v in check_plan(engine.settle()) if v["policy"] in RULES]


def test_two_servers_of_one_model_in_one_namespace_are_one_object_made_twice(
    engine: MockEngine, serve: Callable[..., InferenceServer]
) -> None:
    # Two Pulumi names (so no URN clash for the engine to catch), one ModelDeploySpec name, one namespace.
    serve("llama-blue", spec=model("llama-8b"))
    serve("llama-green", spec=model("llama-8b"))
    found = findings(engine)
    assert any(
        f.startswith("stack-kube-objects-unique: Deployment ml/llama-8b is created by 2 resources") for f in found
    ), found
    assert any(f.startswith("stack-kube-objects-unique: Service ml/llama-8b") for f in found), found


def test_the_same_model_in_two_namespaces_is_two_objects(
    engine: MockEngine, serve: Callable[..., InferenceServer]
) -> None:
    serve("llama-blue", spec=model("llama-8b"))
    serve("llama-green", spec=model("llama-8b"), namespace="ml-canary")
    assert findings(engine) == []


def test_the_same_object_in_two_clusters_is_two_objects(
    engine: MockEngine, cluster: ExistingCluster, server_args: Callable[..., InferenceServerArgs]
) -> None:
    # One program, two clusters (each component takes its cluster's provider): the same namespace and model in each
    # are two objects, and two gateways' worth of pods in two clusters never meet.
    dc2 = ExistingCluster("dc2", ExistingClusterArgs(kubeconfig=pulumi.Output.secret("apiVersion: v1")))
    InferenceServer("llama-dc1", server_args("llama-8b"))
    InferenceServer("llama-dc2", server_args("llama-8b").model_copy(update={"provider": dc2.k8s_provider}))
    found = [
        f"{v['policy']}: {v['message']}"
        for v in check_plan(engine.settle())
        if v["policy"] in (*RULES, "stack-workload-selectors-disjoint")
    ]
    assert found == []
    # ... while in one cluster they are one object made twice
    InferenceServer("llama-dc1-again", server_args("llama-8b"))
    assert any(f.startswith("stack-kube-objects-unique: Deployment ml/llama-8b") for f in findings(engine))


@pytest.mark.parametrize("name", ["ml\n", "ml.prod", "Team-A", "-ml", "m" * 64, ""])
def test_a_name_kubernetes_refuses_is_refused_by_check_name(name: str) -> None:
    # A trailing newline too: a `$`-anchored match took it, and Kubernetes refused the object at `pulumi up`
    with pytest.raises(ValueError, match=r"extra_caches\['x'\]: .* is not a DNS-1123 label"):
        check_name("extra_caches['x']", name)


@pytest.mark.parametrize("name", ["ml", "a", "team-a-1", "m" * 63])
def test_a_dns_label_passes_check_name(name: str) -> None:
    check_name("namespace", name)  # raises nothing
