"""Namespaces a user names: given as names the components can use when the program runs."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest
from pydantic import ValidationError

from components.cache.redis_cache import RedisCacheArgs
from components.kube.existing_cluster import ExistingCluster
from components.observability.alerts import ModelSlo
from components.serving.inference_server import InferenceServer, InferenceServerArgs
from components.specs import AutoscalingSpec, ModelDeploySpec
from inferstack_cli.plan import MockEngine


def test_an_output_namespace_is_refused_by_name_not_deep_inside_the_server(
    server_args: Callable[..., InferenceServerArgs],
) -> None:
    # GIVEN a namespace as a user's program often has it: the Output of a Namespace resource's name
    namespace = pulumi.Output.from_input("ml")
    # WHEN it is given to an autoscaled model THEN the error names the field (it was a ValueError from the KEDA
    # builder about "Calling __str__ on an Output[T]")
    with pytest.raises(ValidationError) as caught:
        server_args("llama-8b", namespace=namespace)
    assert [e["loc"] for e in caught.value.errors()] == [("namespace",)]


def test_an_output_namespace_is_refused_by_name_not_deep_inside_the_cache(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    # (it was a TypeError from sorting the Secret namespaces: '<' not supported between 'Output' and 'str')
    with pytest.raises(ValidationError) as caught:
        RedisCacheArgs(namespace=pulumi.Output.from_input("cache"), provider=cluster.k8s_provider)
    assert [e["loc"] for e in caught.value.errors()] == [("namespace",)]


def test_a_model_behind_two_gateways_admits_both_gateways_pods(
    engine: MockEngine, serve: Callable[..., InferenceServer]
) -> None:
    # GIVEN one model that team-a's and team-b's gateways (each in its own namespace) both send requests to
    serve("llama-8b", gateway_namespace=("team-a", "team-b"))
    (policy,) = [r.inputs["spec"] for r in engine.settle() if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy"]
    # THEN its NetworkPolicy admits the gateway pods of both namespaces to the serving port (it took one namespace:
    # the other gateway's requests were dropped)
    serving = policy["ingress"][0]
    assert [peer["namespaceSelector"]["matchLabels"] for peer in serving["from"]] == [
        {"kubernetes.io/metadata.name": "team-a"},
        {"kubernetes.io/metadata.name": "team-b"},
    ]
    assert {peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for peer in serving["from"]} == {
        "inferstack-gateway"
    }


def test_a_scaled_to_zero_model_wakes_on_its_own_gateways_requests_only(
    engine: MockEngine, serve: Callable[..., InferenceServer]
) -> None:
    # GIVEN team-a's llama-8b, scaled to zero behind team-a's gateway, and team-b's same-named model behind its own
    for team in ("team-a", "team-b"):
        spec = ModelDeploySpec(
            name="llama-8b",
            model="meta-llama/Llama-3.1-8B-Instruct",
            engine="vllm",
            pool="h100",
            replicas=0,
            autoscaling=AutoscalingSpec(scale_to_zero=True),
        )
        serve(f"{team}-llama", spec=spec, namespace=f"{team}-ml", gateway_namespace=team)
    wake = {
        r.inputs["metadata"]["namespace"]: next(
            t["metadata"]["query"] for t in r.inputs["spec"]["triggers"] if t["name"] == "gateway-requests"
        )
        for r in engine.settle()
        if r.type == "kubernetes:keda.sh/v1alpha1:ScaledObject"
    }
    # THEN each wakes on requests its own team's gateway counted (it read every gateway's: a request to team-b's
    # llama-8b woke team-a's too, a GPU cold start for nothing)
    assert 'namespace="team-a"' in wake["team-a-ml"] and "team-b" not in wake["team-a-ml"]
    assert 'namespace="team-b"' in wake["team-b-ml"] and "team-a" not in wake["team-b-ml"]


def test_an_output_namespace_is_refused_by_name_not_deep_inside_the_alert_rules(engine: MockEngine) -> None:
    # GIVEN the SLOs of a user's models, their namespace the Output of a Namespace resource's name
    # WHEN they are built THEN the field and the fix are named (it was a TypeError from the name check's regex)
    with pytest.raises(ValueError, match=r"ModelSlo\.namespace: expected a name \(str\), got Output"):
        ModelSlo(
            name="llama-8b", engine="vllm", ttft_p99_ms=100, itl_p99_ms=20, namespace=pulumi.Output.from_input("ml")
        )
