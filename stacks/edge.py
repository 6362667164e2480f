"""The edge tier: one k3s site. Composition only: no provisioning logic here.

The same serving, cache, gateway and observability components as the other tiers, sized for a site: k3s's
built-ins are used, not duplicated (local-path storage, servicelb, metrics-server); GPUs run under k3s's
``nvidia`` RuntimeClass; complex prompts and fallbacks go to the hub.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.addons.cluster_addons import ClusterAddons, ClusterAddonsArgs
from components.catalog import images as _images
from components.catalog.models import MODELS
from components.edge.budget import MODEL_CACHE_GIB, cpu_decoders, placed
from components.edge.specs import GPU_NODE_LABEL, K3S_NVIDIA_RUNTIME_CLASS, K3S_STORAGE_CLASS
from components.gateway.gateway import HubUpstream, embedder_for
from components.kube.existing_cluster import ExistingCluster, ExistingClusterArgs
from components.observability.dashboards import SITE_LABEL
from components.observability.observability import SMALL_SITE_PROMETHEUS_RESOURCES
from components.serving.inference_server import InferenceServer, ModelCacheVolume
from components.serving.serving_base import ServingBase, ServingBaseArgs
from components.store.s3_compatible_store import S3CompatibleStore, S3CompatibleStoreArgs
from stacks import shared
from stacks.environment import MODEL_STORE_KEY_ID, MODEL_STORE_SECRET_KEY, EdgeEnvironment
from stacks.hub import hub_upstream as shared_hub_upstream
from stacks.program import require_secret
from stacks.tiers import EDGE

QUICK_START = "edge quick start"


def hub_upstream(env: EdgeEnvironment) -> HubUpstream | None:
    return shared_hub_upstream(env.hub, QUICK_START)


def compose(env: EdgeEnvironment, stack: str) -> dict[str, Any]:
    """Build the edge tier for ``env``; return the stack outputs."""
    kubeconfig = require_secret(
        env.cluster.kubeconfig_secret, "the k3s cluster's kubeconfig (its contents)", QUICK_START
    )
    cluster = ExistingCluster("cluster", ExistingClusterArgs(kubeconfig=kubeconfig, context=env.cluster.context))
    provider = cluster.k8s_provider
    anywhere: dict[str, str] = {}  # a site's pods share its nodes: no system pool
    gpus = any(n.gpu for n in env.nodes)

    base = ServingBase("serving", ServingBaseArgs(provider=provider, tier="edge"))
    cache = shared.in_cluster_cache(env, base, provider, system_node_selector=anywhere, storage_class=K3S_STORAGE_CLASS)
    observability = shared.observability(
        env, base, provider, cache,
        stack=stack,
        system_node_selector=anywhere,
        storage_class=K3S_STORAGE_CLASS,
        prometheus_resources=SMALL_SITE_PROMETHEUS_RESOURCES,
        external_labels={SITE_LABEL: stack},
        control_plane_targets=False,
    )  # fmt: skip
    addons = ClusterAddons(
        "addons",
        ClusterAddonsArgs(
            provider=provider,
            gpu_stack="device-plugin" if gpus else "none",
            gpu_runtime_class=K3S_NVIDIA_RUNTIME_CLASS,
            gpu_node_label=GPU_NODE_LABEL,
            system_node_selector=anywhere,
            # k3s ships metrics-server; replicas are fixed (no KEDA); no model spans nodes (no LWS).
            metrics_server=False,
            keda=False,
            lws=False,
        ),
        opts=pulumi.ResourceOptions(depends_on=[observability.stack_release]),
    )

    store = env.model_store
    credentials = S3CompatibleStore(
        "model-store",
        S3CompatibleStoreArgs(
            spec=store,
            access_key_id=require_secret(MODEL_STORE_KEY_ID, "the model store's access key id", QUICK_START),
            secret_access_key=require_secret(MODEL_STORE_SECRET_KEY, "the model store's secret key", QUICK_START),
            namespace=base.serving_namespace,
            provider=provider,
        ),
        opts=pulumi.ResourceOptions(depends_on=[base]),
    )
    registry = env.image_registry.rstrip("/")
    models: dict[str, InferenceServer] = {}
    decoders = cpu_decoders(env.nodes, placed(env.nodes, env.models))  # as the node budget counted them (edge_checks)
    for model in env.models:
        layout = "gguf" if model.engine == "llamacpp" else "hf"
        models[model.name] = shared.inference_server(
            env, model, base, provider,
            after=[base, addons, credentials],
            model_source=model.source or f"s3://{store.bucket}/{model.model}/{layout}",
            engine_store=f"s3://{store.bucket}",
            loader_image=f"{registry}/model-loader:{_images.KIT_IMAGE_TAG}",
            rollout_surge=EDGE.grows_nodes,
            fabric="none",
            model_cache=ModelCacheVolume(host_path=None, storage_class=K3S_STORAGE_CLASS, size_gib=MODEL_CACHE_GIB),
            loader_env=credentials.loader_env,
            gpu_runtime_class=K3S_NVIDIA_RUNTIME_CLASS,
            cpu_decoders=max(1, decoders[model.pool]),
            # Fixed replicas at a site: no ScaledObject.
            prometheus_url=None,
        )  # fmt: skip

    # The site's one embedding model (edge_checks refuses a second), as gateway_checks validated it.
    embedder = next(
        (e for m in env.models if (e := embedder_for(m.model, pulumi.Output.concat(models[m.name].endpoint, "/v1")))),
        None,
    )
    hub = hub_upstream(env)
    spec_of = {m.name: m.model for m in env.models}
    chat = {name: server for name, server in models.items() if not MODELS[spec_of[name]].is_embedding}
    gateway = None
    if env.gateway.enabled and chat:
        gateway = shared.gateway(
            env, base, provider,
            upstream_endpoints={name: server.endpoint for name, server in chat.items()},
            cache=cache,
            watched_by=observability,
            image=f"{registry}/gateway:{_images.KIT_IMAGE_TAG}",
            after=[base, addons],
            system_node_selector=anywhere,
            # k3s's servicelb (klipper-lb) serves any LoadBalancer Service: no annotations, no class.
            service_annotations={},
            load_balancer_class=None,
            embedder=embedder,
            hub=hub,
        )  # fmt: skip

    return {
        "tier": "edge",
        "nodes": {n.name: n.instance_type for n in env.nodes},
        "model_bucket": store.bucket,
        "cache_url": cache.url(),
        "model_endpoints": {name: server.endpoint for name, server in models.items()},
        "embeddings_url": embedder.url if embedder else None,
        "gateway_url": gateway.url if gateway else None,
        "hub_url": hub.url if hub else None,
        "grafana_admin_password": observability.grafana_admin_password,
    }
