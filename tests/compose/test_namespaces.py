"""Namespaces a user names: given as names the components can use when the program runs."""

from __future__ import annotations

from collections.abc import Callable

import pulumi
import pytest
from pydantic import ValidationError

from components.cache.redis_cache import RedisCacheArgs
from components.kube.existing_cluster import ExistingCluster
from components.serving.inference_server import InferenceServerArgs
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
