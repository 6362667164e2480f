"""The on-prem tier: an existing bare-metal cluster on InfiniBand. Composition only: no provisioning logic here.

The same serving, cache, gateway, autoscaling and observability components as the cloud tier; this tier adds
what is its own: the explicit provider from a secret kubeconfig, the GPU and Network Operators, local NVMe,
MetalLB and an S3-compatible model store.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.addons.cluster_addons import ClusterAddons, ClusterAddonsArgs
from components.catalog import images as _images
from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.kube.labels import GPU_PRESENT_LABEL
from components.onprem.gpu_operator import RUNTIME_CLASS as GPU_OPERATOR_RUNTIME_CLASS
from components.onprem.gpu_operator import gpu_operator_values
from components.onprem.local_storage import LocalStorage, LocalStorageArgs
from components.onprem.metallb import MetalLb, MetalLbArgs
from components.onprem.model_store import S3CompatibleStore, S3CompatibleStoreArgs
from components.onprem.network_operator import NetworkOperator, NetworkOperatorArgs
from components.serving.inference_server import (
    ModelCacheVolume,
    RdmaFabric,
)
from components.serving.serving_base import ServingBase, ServingBaseArgs
from stacks import shared
from stacks.environment import (
    MODEL_STORE_KEY_ID,
    MODEL_STORE_SECRET_KEY,
    OnpremEnvironment,
)
from stacks.hub import hub_upstream
from stacks.program import require_secret
from stacks.tiers import ONPREM


def _secret(name: str, what: str) -> pulumi.Output[str]:
    return require_secret(name, what, "on-prem quick start")


def nccl_env(env: OnpremEnvironment) -> dict[str, str]:
    """NCCL on the fabric (NCCL "Environment Variables"; vLLM docs/serving/parallelism_scaling.md)."""
    fabric = env.fabric
    out: dict[str, str] = {}
    if fabric.hcas:
        # "=" makes the names exact: a prefix match would also take mlx5_1x (an Ethernet port, say).
        out["NCCL_IB_HCA"] = "=" + ",".join(fabric.hcas)
    if fabric.socket_interface:
        out["NCCL_SOCKET_IFNAME"] = "=" + fabric.socket_interface
    # GPUDirect RDMA up to a NIC across the PCIe host bridge (PHB), as HGX boards pair each GPU with a NIC.
    out["NCCL_NET_GDR_LEVEL"] = "PHB"
    return out


def compose(env: OnpremEnvironment, stack: str) -> dict[str, Any]:
    """Build the on-prem tier for ``env``; return the stack outputs."""
    kubeconfig = _secret(env.cluster.kubeconfig_secret, "the cluster's kubeconfig (its contents)")
    cluster = ExistingCluster("cluster", ExistingClusterArgs(kubeconfig=kubeconfig, context=env.cluster.context))
    provider = cluster.k8s_provider
    system = dict(env.cluster.system_node_selector)

    base = ServingBase(
        "serving",
        ServingBaseArgs(
            provider=provider,
            tier="onprem",
            cluster_storage_classes=(env.persistent_storage_class,) if env.persistent_storage_class else (),
            cluster_load_balancer=(env.load_balancer.load_balancer_class or "")
            if env.load_balancer.kind == "existing"
            else None,
        ),
    )
    storage = LocalStorage("local-nvme", LocalStorageArgs(spec=env.local_storage, provider=provider))
    fabric = None
    if env.fabric.rdma and env.network_operator.install:
        fabric = NetworkOperator(
            "fabric",
            NetworkOperatorArgs(
                spec=env.network_operator,
                fabric=env.fabric,
                provider=provider,
                serving_namespace=base.serving_namespace,
                system_node_selector=system,
                gpu_node_selectors=[pool.node_labels for pool in env.gpu_pools],
            ),
        )
    cache = shared.in_cluster_cache(
        env, base, provider, system_node_selector=system, storage_class=env.persistent_storage_class
    )
    observability = shared.observability(
        env, base, provider, cache,
        stack=stack,
        system_node_selector=system,
        storage_class=env.persistent_storage_class,
    )  # fmt: skip
    addons = ClusterAddons(
        "addons",
        ClusterAddonsArgs(
            provider=provider,
            gpu_stack="gpu-operator",
            gpu_operator_values=gpu_operator_values(env.gpu_operator, env.fabric, system),
            gpu_node_label=GPU_PRESENT_LABEL,
            # The DCGM exporter asks for no GPU, so only the nvidia runtime gives it NVML: with CDI on (the operator's
            # default since v25.10) the toolkit no longer makes nvidia containerd's default runtime; GPU pods get
            # their devices through CDI. The operator creates the RuntimeClass (values operator.runtimeClass).
            gpu_runtime_class=GPU_OPERATOR_RUNTIME_CLASS if env.gpu_operator.toolkit == "operator" else None,
            system_node_selector=system,
        ),
        opts=pulumi.ResourceOptions(depends_on=[observability.stack_release]),
    )

    store = env.model_store
    credentials = None
    if store.kind == "s3":
        credentials = S3CompatibleStore(
            "model-store",
            S3CompatibleStoreArgs(
                spec=store.s3(),
                access_key_id=_secret(MODEL_STORE_KEY_ID, "the model store's access key id"),
                secret_access_key=_secret(MODEL_STORE_SECRET_KEY, "the model store's secret key"),
                namespace=base.serving_namespace,
                provider=provider,
            ),
            opts=pulumi.ResourceOptions(depends_on=[base]),
        )
    rdma = None
    if env.fabric.rdma:
        rdma = RdmaFabric(
            resource=f"rdma/{env.fabric.rdma_resource_name}",
            nccl_env=nccl_env(env),
            topology_label=env.fabric.topology_label,
            network=fabric.network if fabric else None,
        )
    registry = env.image_registry.rstrip("/")
    serving_deps: list[pulumi.Resource] = [base, addons, storage, *([credentials] if credentials else [])]
    serving_deps += [fabric] if fabric else []
    models = {}
    for model in env.models:
        models[model.name] = shared.inference_server(
            env, model, base, provider,
            after=serving_deps,
            # On a volume store the source is the checkpoint's folder inside the volume.
            model_source=model.source
            or (f"s3://{store.bucket}/{model.model}/hf" if store.kind == "s3" else f"{model.model}/hf"),
            engine_store=f"s3://{store.bucket}",
            store_claim=store.claim_name if store.kind == "volume" else None,
            loader_image=f"{registry}/model-loader:{_images.KIT_IMAGE_TAG}",
            rollout_surge=ONPREM.grows_nodes,
            fabric="rdma" if rdma else "none",
            rdma=rdma,
            model_cache=ModelCacheVolume(
                host_path=None,
                storage_class=storage.storage_class,
                size_gib=env.local_storage.model_cache_gib,
            ),
            loader_env=credentials.loader_env if credentials else [],
            prometheus_url=observability.prometheus_url,
        )  # fmt: skip

    lb_annotations: dict[str, str] = {}
    if env.load_balancer.kind == "metallb" and env.load_balancer.metallb is not None:
        lb_annotations = MetalLb(
            "metallb", MetalLbArgs(spec=env.load_balancer.metallb, provider=provider, system_node_selector=system)
        ).service_annotations
    gateway = None
    hub = hub_upstream(env.hub, "on-prem quick start") if env.gateway.enabled and env.models else None
    if env.gateway.enabled and env.models:
        gateway = shared.gateway(
            env, base, provider,
            upstream_endpoints={name: server.endpoint for name, server in models.items()},
            cache=cache,
            watched_by=observability,
            image=f"{registry}/gateway:{_images.KIT_IMAGE_TAG}",
            after=[base, addons],
            system_node_selector=system,
            service_annotations=lb_annotations,
            load_balancer_class=env.load_balancer.load_balancer_class,
            load_balancer_source_ranges=tuple(str(n) for n in env.load_balancer.source_ranges),
            hub=hub,
            # An edge site's hub is the on-prem stack: it issues the key the sites burst with.
            issue_burst_key=True,
        )  # fmt: skip

    return {
        "tier": "onprem",
        "gpu_pools": {p.name: f"{p.nodes}x {p.gpus_per_node} {p.gpu}" for p in env.gpu_pools},
        "model_bucket": store.bucket,
        "cache_url": cache.url(),
        "model_endpoints": {name: server.endpoint for name, server in models.items()},
        "gateway_url": gateway.burst_url if gateway else None,
        "burst_api_key": gateway.burst_api_key if gateway else None,
        "hub_url": hub.url if hub else None,
        "grafana_admin_password": observability.grafana_admin_password,
    }
