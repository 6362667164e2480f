"""A user's own program: the kit's components composed by hand, as the README says infra teams may."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pytest

from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.onprem.specs import OnpremGpuPoolSpec
from components.serving.inference_server import InferenceServer, InferenceServerArgs
from components.specs import ModelDeploySpec
from inferstack_cli.plan import MockEngine

POOL = OnpremGpuPoolSpec(name="h100", gpu="H100", nodes=2, node_selector={"nvidia.com/gpu.product": "H100"})


def model(name: str) -> ModelDeploySpec:
    return ModelDeploySpec(name=name, model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", pool=POOL.name)


def _server_args(spec: ModelDeploySpec, provider: Any, **overrides: Any) -> InferenceServerArgs:
    """A vLLM model on the user's own namespaces: ``ml`` for serving, ``gw`` for the gateway, ``mon`` for metrics."""
    fields: dict[str, Any] = {
        "spec": spec,
        "pool": POOL,
        "namespace": "ml",
        "provider": provider,
        "model_source": f"s3://models/{spec.model}/hf",
        "engine_store": "s3://models",
        "loader_image": "registry.example/model-loader:1",
        "service_account": "loader",
        "priority_class": "serving",
        "rollout_surge": False,
        "fabric": "none",
        "gateway_namespace": "gw",
        "monitoring_namespace": "mon",
        "prometheus_url": "http://prometheus.mon.svc:9090",
    }
    return InferenceServerArgs(**{**fields, **overrides})


@pytest.fixture
def cluster(engine: MockEngine) -> Iterator[ExistingCluster]:
    """The user's cluster, reached only through its own explicit provider (``dc1``)."""
    yield ExistingCluster("dc1", ExistingClusterArgs(kubeconfig=pulumi.Output.secret("apiVersion: v1")))
    engine.settle()  # a test that stops early leaves registrations pending: finish them before the loop closes


@pytest.fixture
def serve(cluster: ExistingCluster) -> Callable[..., InferenceServer]:
    def make(name: str, opts: pulumi.ResourceOptions | None = None, **overrides: Any) -> InferenceServer:
        spec = overrides.pop("spec", None) or model(name)
        return InferenceServer(name, _server_args(spec, cluster.k8s_provider, **overrides), opts)

    return make


@pytest.fixture
def server_args(cluster: ExistingCluster) -> Callable[..., InferenceServerArgs]:
    """``InferenceServerArgs`` of a vLLM model named ``name`` on the user's cluster, with ``overrides``."""

    def make(name: str, **overrides: Any) -> InferenceServerArgs:
        return _server_args(model(name), cluster.k8s_provider, **overrides)

    return make
