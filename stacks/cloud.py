"""The cloud tier (AWS EKS): compose the components; no provisioning logic of its own."""

from __future__ import annotations

from typing import Any

import pulumi

from components.addons.cluster_addons import ClusterAddons, ClusterAddonsArgs
from components.aws.eks_cluster import EksCluster, EksClusterArgs
from components.aws.elasticache import ElastiCacheValkey, ElastiCacheValkeyArgs
from components.aws.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.aws.iam import NodeRole, NodeRoleArgs, PodIdentityRole, PodIdentityRoleArgs
from components.aws.karpenter import Karpenter, KarpenterArgs
from components.aws.load_balancer_controller import LoadBalancerController, LoadBalancerControllerArgs
from components.aws.model_store import ModelStore, ModelStoreArgs, engine_build_policy, read_policy
from components.aws.network import Network, NetworkArgs
from components.aws.system_node_group import SystemNodeGroup, SystemNodeGroupArgs
from components.catalog import images as _images
from components.serving.serving_base import (
    ENGINE_BUILDER_SERVICE_ACCOUNT,
    MODEL_LOADER_SERVICE_ACCOUNT,
    SERVING_NAMESPACE,
    ServingBase,
    ServingBaseArgs,
)
from stacks import shared
from stacks.cloud_checks import rollout_surges
from stacks.environment import CloudEnvironment


def compose(env: CloudEnvironment, stack: str) -> dict[str, Any]:
    """Build the cloud tier for ``env``; return the stack outputs."""
    cluster_name = f"inferstack-{stack}"
    tags = {"inferstack:stack": stack, "managed-by": "pulumi", **env.tags}

    network = Network("network", NetworkArgs(spec=env.network, region=env.region, cluster_name=cluster_name, tags=tags))
    zones = list(env.network.availability_zones)
    cluster = EksCluster(
        cluster_name,
        EksClusterArgs(
            spec=env.cluster,
            region=env.region,
            subnet_ids=[network.private_subnet_ids[z] for z in zones],
            tags=tags,
        ),
    )
    node_role = NodeRole("nodes", NodeRoleArgs(tags=tags))
    system = SystemNodeGroup(
        "system",
        SystemNodeGroupArgs(
            spec=env.system_pool,
            cluster_name=cluster.cluster_name,
            node_role_arn=node_role.role_arn,
            subnet_ids=[network.private_subnet_ids[z] for z in zones],
            kubernetes_version=env.cluster.kubernetes_version,
            ami_release_version=env.cluster.ami_release_version,
            tags=tags,
        ),
    )
    cluster.add_node_addons([system.node_group])

    pools: dict[str, pulumi.Resource] = {}
    for pool in (p for p in env.gpu_pools if p.provisioner == "managed"):
        zone = pool.zone or zones[0]
        pools[pool.name] = GpuNodeGroup(
            f"gpu-{pool.name}",
            GpuNodeGroupArgs(
                pool=pool,
                cluster_name=cluster.cluster_name,
                kubernetes_version=env.cluster.kubernetes_version,
                cluster_security_group_id=cluster.cluster_security_group_id,
                vpc_id=network.vpc_id,
                subnet_id=network.private_subnet_ids[zone],
                node_role_arn=node_role.role_arn,
                ami_release_version=env.cluster.ami_release_version,
                tags=tags,
            ),
        )

    store = ModelStore("models", ModelStoreArgs(spec=env.model_store, repository_prefix=cluster_name, tags=tags))
    loader = PodIdentityRole(
        "model-loader",
        PodIdentityRoleArgs(
            cluster_name=cluster.cluster_name,
            namespace=SERVING_NAMESPACE,
            service_account=MODEL_LOADER_SERVICE_ACCOUNT,
            policy_json=read_policy(store.bucket_arn, store.key_arn),
            tags=tags,
        ),
    )
    # The engine build writes engines to the store: its own service account and role, so the serving pods'
    # loader stays read-only (issue 12, point 1).
    builder = PodIdentityRole(
        "engine-builder",
        PodIdentityRoleArgs(
            cluster_name=cluster.cluster_name,
            namespace=SERVING_NAMESPACE,
            service_account=ENGINE_BUILDER_SERVICE_ACCOUNT,
            policy_json=engine_build_policy(store.bucket_arn, store.key_arn),
            tags=tags,
        ),
    )

    provider = cluster.k8s_provider
    # Kubernetes objects wait for the system nodes: controllers and webhooks need somewhere to run.
    after_nodes = pulumi.ResourceOptions(depends_on=[system.node_group])
    base = ServingBase("serving", ServingBaseArgs(provider=provider, tier="cloud"), opts=after_nodes)
    karpenter_pools = [p for p in env.gpu_pools if p.provisioner == "karpenter"]
    if karpenter_pools:
        karpenter = Karpenter(
            "karpenter",
            KarpenterArgs(
                cluster_name=cluster.cluster_name,
                cluster_endpoint=cluster.cluster_endpoint,
                cluster_security_group_id=cluster.cluster_security_group_id,
                vpc_id=network.vpc_id,
                region=env.region,
                provider=provider,
                pools=karpenter_pools,
                default_zone=zones[0],
                ami_alias=f"al2023@v{env.cluster.ami_release_date}",
                tags=tags,
            ),
            opts=after_nodes,
        )
        pools.update({p.name: karpenter for p in karpenter_pools})
    if env.cache.kind == "elasticache":
        cache = ElastiCacheValkey(
            "cache",
            ElastiCacheValkeyArgs(
                spec=env.cache,
                vpc_id=network.vpc_id,
                subnet_ids=[network.private_subnet_ids[z] for z in zones],
                client_security_group_id=cluster.cluster_security_group_id,
                provider=provider,
                user_id_prefix=cluster_name,
                protect=env.cache.protect,
                tags=tags,
            ),
            opts=pulumi.ResourceOptions(depends_on=[base]),
        ).endpoint
    else:
        cache = shared.in_cluster_cache(env, base, provider)

    observability = shared.observability(env, base, provider, cache, stack=stack)
    addons = ClusterAddons(
        "addons",
        ClusterAddonsArgs(provider=provider, gpu_stack="device-plugin", efa=any(p.efa_enabled for p in env.gpu_pools)),
        # dcgm-exporter ships a ServiceMonitor: the Prometheus Operator's CRDs must exist first.
        opts=pulumi.ResourceOptions(depends_on=[observability.stack_release]),
    )

    loader_image = pulumi.Output.concat(store.repository_urls["model-loader"], ":", _images.KIT_IMAGE_TAG)
    models = {}
    surges = rollout_surges(env)
    for model in env.models:
        models[model.name] = shared.inference_server(
            env, model, base, provider,
            # The loader's and the build Job's Pod Identity associations first: the EKS Pod Identity webhook gives a
            # pod its credentials when it admits it (aws/amazon-eks-pod-identity-webhook, handler.go addEnvToContainer),
            # so a pod created before its association never gets them and its S3 download fails on every restart.
            after=[base, pools[model.pool], addons, loader, builder],
            model_source=model.source or pulumi.Output.concat("s3://", store.bucket_name, "/", model.model, "/hf"),
            engine_store=pulumi.Output.concat("s3://", store.bucket_name),
            loader_image=loader_image,
            rollout_surge=surges[model.name],
            fabric="efa",
            prometheus_url=observability.prometheus_url,
            # No --otlp-traces-endpoint: the pinned vLLM image lacks the OpenTelemetry packages and exits at
            # start with it (components/catalog/engine_support.py); the gateway's spans cover the request path.
        )  # fmt: skip

    gateway = None
    gateway_after: list[pulumi.Resource] = [base, addons]
    if env.gateway.enabled and env.models and env.gateway.load_balancer != "none":
        # The gateway's Service annotations are read by this controller and no other (issue 12, point 3).
        gateway_after.append(
            LoadBalancerController(
                "aws-load-balancer-controller",
                LoadBalancerControllerArgs(
                    cluster_name=cluster.cluster_name,
                    region=env.region,
                    vpc_id=network.vpc_id,
                    provider=provider,
                    tags=tags,
                ),
                opts=after_nodes,
            )
        )
    if env.gateway.enabled and env.models:
        gateway = shared.gateway(
            env, base, provider,
            upstream_endpoints={name: server.endpoint for name, server in models.items()},
            cache=cache,
            watched_by=observability,
            image=pulumi.Output.concat(store.repository_urls["gateway"], ":", _images.KIT_IMAGE_TAG),
            after=gateway_after,
            issue_burst_key=True,
        )  # fmt: skip

    return {
        "tier": "cloud",
        "region": env.region,
        "vpc_id": network.vpc_id,
        "cluster_name": cluster.cluster_name,
        "cluster_endpoint": cluster.cluster_endpoint,
        "kubeconfig": cluster.kubeconfig,
        "gpu_node_groups": {name: g.node_group_name for name, g in pools.items() if isinstance(g, GpuNodeGroup)},
        "karpenter_node_pools": [p.name for p in karpenter_pools],
        "model_bucket": store.bucket_name,
        "image_repositories": store.repository_urls,
        "model_loader_role_arn": loader.role_arn,
        "engine_builder_role_arn": builder.role_arn,
        "cache_url": cache.url(),
        "model_endpoints": {name: server.endpoint for name, server in models.items()},
        "gateway_url": gateway.burst_url if gateway else None,
        "burst_api_key": gateway.burst_api_key if gateway else None,
        "grafana_admin_password": observability.grafana_admin_password,
    }
