"""Component arguments as a user's own program passes them: a mistake is a validation error that names the field."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest
from pydantic import ValidationError

from components.cache.redis_cache import RedisCache, RedisCacheArgs
from components.gateway.gateway import GatewayArgs
from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.observability.alerts import ModelSlo
from components.observability.observability import ObservabilityArgs
from components.serving.inference_server import InferenceServerArgs
from components.specs import GatewaySpec, ModelDeploySpec, S3CompatibleStoreSpec
from components.store.s3_compatible_store import S3CompatibleStoreArgs
from inferstack_cli.plan import MockEngine


def test_an_unset_kubeconfig_is_refused_not_replaced_by_the_ambient_one() -> None:
    # GIVEN a user's program that reads an unset secret: Config.get_secret returns None
    # WHEN it builds the cluster's arguments
    # THEN the field is named, before a provider could fall back to ~/.kube/config
    with pytest.raises(ValidationError) as caught:
        ExistingClusterArgs(kubeconfig=None)
    (error,) = caught.value.errors()
    assert error["loc"] == ("kubeconfig",)
    assert error["msg"] == "expected a string or a pulumi.Output[str], got None"


def test_a_string_input_of_another_type_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as caught:
        ExistingClusterArgs(kubeconfig={"clusters": []})
    assert caught.value.errors()[0]["loc"] == ("kubeconfig",)
    assert "got dict" in caught.value.errors()[0]["msg"]


def test_outputs_and_strings_are_accepted_where_a_string_input_is(engine: object) -> None:
    kubeconfig = pulumi.Output.secret("apiVersion: v1")
    assert ExistingClusterArgs(kubeconfig=kubeconfig).kubeconfig is kubeconfig
    assert ExistingClusterArgs(kubeconfig="apiVersion: v1").kubeconfig == "apiVersion: v1"


def test_misspelled_argument_is_refused_by_name() -> None:
    with pytest.raises(ValidationError) as caught:
        ExistingClusterArgs(kubeconfig="apiVersion: v1", contxt="dc1")
    assert caught.value.errors()[0]["loc"] == ("contxt",)
    assert caught.value.errors()[0]["type"] == "extra_forbidden"


def test_a_pool_other_than_the_one_the_model_names_is_refused(server_args: Callable[..., InferenceServerArgs]) -> None:
    # GIVEN a model whose spec names pool h200, given the h100 pool's spec
    # WHEN the server's arguments are built THEN both names and the fix are given (the pods were placed on h100 and
    # labelled h200)
    spec = ModelDeploySpec(name="llama-8b", model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", pool="h200")
    with pytest.raises(ValidationError) as caught:
        InferenceServerArgs(**{**dict(server_args("llama-8b")), "spec": spec})
    (error,) = caught.value.errors()
    assert "pool: 'h100' is not the pool spec.pool names ('h200')" in error["msg"]


def test_an_slo_target_that_is_not_a_number_is_refused_by_name() -> None:
    # (a target read from config as a string was a TypeError: '>' not supported between 'str' and 'int')
    with pytest.raises(ValueError, match=r"ModelSlo\.ttft_p99_ms: expected a number, got str '100'"):
        ModelSlo(name="llama-8b", engine="vllm", ttft_p99_ms="100", itl_p99_ms=20, namespace="ml")  # type: ignore[arg-type]


@pytest.mark.parametrize("blank", ["", "  \n"])
def test_an_empty_kubeconfig_is_refused_not_replaced_by_the_ambient_one(blank: str) -> None:
    # GIVEN a user's program that reads a kubeconfig set to nothing (a file that was empty, a variable unset in CI)
    # WHEN it builds the cluster's arguments
    # THEN the field is named: pulumi-kubernetes reads an empty kubeconfig as none and uses ~/.kube/config
    with pytest.raises(ValidationError) as caught:
        ExistingClusterArgs(kubeconfig=blank)
    (error,) = caught.value.errors()
    assert error["loc"] == ("kubeconfig",)
    assert error["msg"].startswith("an empty kubeconfig: a Kubernetes provider given one uses the ambient")


def test_an_empty_kubeconfig_output_stops_the_program_before_the_provider_exists(engine: MockEngine) -> None:
    # GIVEN a kubeconfig that only resolves to nothing when the program runs (an empty secret, a stack reference)
    ExistingCluster("dc1", ExistingClusterArgs(kubeconfig=pulumi.Output.secret("")))
    # WHEN the program runs THEN it stops, naming the field, and no provider is registered to fall back on the
    # ambient kubeconfig
    with pytest.raises(Exception, match=r"ExistingClusterArgs\.kubeconfig: an empty kubeconfig"):
        engine.settle()
    assert [r.urn for r in engine.monitor.registrations if r.type == "pulumi:providers:kubernetes"] == []


def test_a_namespace_kubernetes_would_refuse_is_refused_by_name_with_the_fix(
    engine: MockEngine, cluster: ExistingCluster, server_args: Callable[..., InferenceServerArgs]
) -> None:
    # GIVEN namespaces as a user's program might write them: upper case, an underscore, a dot
    provider = cluster.k8s_provider
    cache = RedisCache("cache", RedisCacheArgs(namespace="cache", provider=provider, client_namespace="gw")).endpoint
    builds: dict[str, Callable[[str], object]] = {
        "RedisCacheArgs.namespace": lambda ns: RedisCacheArgs(namespace=ns, provider=provider),
        "RedisCacheArgs.client_namespace": lambda ns: RedisCacheArgs(
            namespace="cache", provider=provider, client_namespace=ns
        ),
        "GatewayArgs.namespace": lambda ns: GatewayArgs(
            spec=GatewaySpec(), models=[], upstream_urls={}, cache=cache, namespace=ns, provider=provider, image="g:1"
        ),
        "InferenceServerArgs.namespace": lambda ns: server_args("llama-8b", namespace=ns),
        "InferenceServerArgs.gateway_namespace": lambda ns: server_args("llama-8b", gateway_namespace=("gw", ns)),
        "S3CompatibleStoreArgs.namespace": lambda ns: S3CompatibleStoreArgs(
            spec=S3CompatibleStoreSpec(endpoint="https://minio.example:9000", bucket="models"),
            access_key_id="a",
            secret_access_key="b",
            namespace=ns,
            provider=provider,
        ),
        "ObservabilityArgs.serving_namespace": lambda ns: ObservabilityArgs(
            provider=provider, serving_namespace=ns, gateway_namespace="gw"
        ),
    }
    for field, build in builds.items():
        for bad in ("Team_A", "ml.prod", "-ml", "ml\n"):  # a trailing newline passed a `$`-anchored match
            # WHEN the component's arguments are built THEN the field, what is allowed and a fix are named (each was
            # taken, and Kubernetes refused the object at `pulumi up`, or the KEDA builder raised deep in the server)
            with pytest.raises(ValidationError) as caught:
                build(bad)
            # (a field that takes one namespace or a tuple reports the tuple's entry alone as that error)
            (error,) = [e for e in caught.value.errors() if e["type"] == "value_error"]
            assert error["loc"][0] == field.split(".")[1], (field, bad)
            assert f"{bad!r} is not a namespace name; allowed: a DNS label" in error["msg"], (field, bad)
            assert "; fix: e.g. '" in error["msg"]
    with pytest.raises(ValidationError, match=r"fix: e\.g\. 'team-a'"):
        builds["GatewayArgs.namespace"]("Team_A")
