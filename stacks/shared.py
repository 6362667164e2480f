"""What every tier composes the same way: the in-cluster cache, observability, the model servers and the gateway.

Each tier's ``compose`` calls these with only what is its own (where system pods run, the storage class, the load
balancer's annotations, a hub), so that a change to how the shared components are wired is made once for all three.
The keyword arguments named ``tier`` are the tier's own fields of the component's ``Args``; an unknown one is refused
by the ``Args`` model (``extra="forbid"``), as a misspelt field would be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cache.redis_cache import CacheEndpoint, RedisCache, RedisCacheArgs
from components.gateway.gateway import Gateway, GatewayArgs
from components.observability.alerts import model_slos
from components.observability.dashboards import SITE_LABEL
from components.observability.observability import Observability, ObservabilityArgs
from components.serving.inference_server import InferenceServer, InferenceServerArgs
from components.serving.serving_base import ServingBase
from components.specs import ModelDeploySpec
from stacks.environment import BaseEnvironment
from stacks.program import observability_secrets


def in_cluster_cache(env: BaseEnvironment, base: ServingBase, provider: k8s.Provider, **tier: Any) -> CacheEndpoint:
    """The stack's Redis in its own namespace, reachable from the gateway's; its endpoint."""
    return RedisCache(
        "cache",
        RedisCacheArgs(
            spec=env.cache,
            namespace=base.cache_namespace,
            provider=provider,
            client_namespace=base.gateway_namespace,
            protect=env.cache.protect,
            **tier,
        ),
        opts=pulumi.ResourceOptions(depends_on=[base]),
    ).endpoint


def observability(
    env: BaseEnvironment,
    base: ServingBase,
    provider: k8s.Provider,
    cache: CacheEndpoint,
    *,
    stack: str,
    **tier: Any,
) -> Observability:
    """Prometheus, Grafana, the exporters and the alerts, watching the stack's models, gateway and cache.

    A stack that forwards its samples (``observability.remoteWrite``) labels them ``inferstack_site: <stack>``, as an
    edge site does (it passes its ``external_labels`` itself): the receiving hub's rules and KEDA triggers read only
    series without that label (``OWN_SERIES``), so an unlabelled forward would pass for the hub's own there."""
    if env.observability.remote_write is not None:
        tier.setdefault("external_labels", {SITE_LABEL: stack})
    return Observability(
        "observability",
        ObservabilityArgs(
            spec=env.observability,
            provider=provider,
            **observability_secrets(env.observability),
            models=model_slos(
                env.models,
                base.serving_namespace,
                env.pool,
                base.gateway_namespace if env.gateway.enabled else None,
            ),
            serving_namespace=base.serving_namespace,
            gateway_namespace=base.gateway_namespace,
            gateway_tls=env.gateway.tls_secret is not None,
            cache_url=cache.url(),
            cache_secret=cache.exporter_secret(),
            cache_user=cache.exporter_username,
            **tier,
        ),
        opts=pulumi.ResourceOptions(depends_on=[base]),
    )


def inference_server(
    env: BaseEnvironment,
    model: ModelDeploySpec,
    base: ServingBase,
    provider: k8s.Provider,
    *,
    after: Sequence[pulumi.Resource],
    **tier: Any,
) -> InferenceServer:
    """``model``'s server on its pool, in the serving namespace, admitting the gateway's pods; woken from zero by
    requests to the gateway's aliases of it where it scales."""
    return InferenceServer(
        model.name,
        InferenceServerArgs(
            spec=model,
            pool=env.pool(model.pool),
            namespace=base.serving_namespace,
            provider=provider,
            service_account=base.service_account,
            priority_class=base.priority_class,
            group_priority_class=base.group_priority_class,
            gateway_namespace=base.gateway_namespace,
            gateway_aliases=env.gateway.aliases_of(model.name),
            **tier,
        ),
        opts=pulumi.ResourceOptions(depends_on=list(after)),
    )


def gateway(
    env: BaseEnvironment,
    base: ServingBase,
    provider: k8s.Provider,
    *,
    upstream_endpoints: Mapping[str, pulumi.Output[str]],
    cache: CacheEndpoint,
    watched_by: Observability,
    image: pulumi.Input[str],
    after: Sequence[pulumi.Resource],
    **tier: Any,
) -> Gateway:
    """The gateway in front of ``upstream_endpoints`` (a model's name: its server's base URL), on the stack's cache,
    its traces to ``watched_by``'s collector."""
    return Gateway(
        "gateway",
        GatewayArgs(
            spec=env.gateway,
            models=list(env.models),
            upstream_urls={name: pulumi.Output.concat(url, "/v1") for name, url in upstream_endpoints.items()},
            cache=cache,
            namespace=base.gateway_namespace,
            provider=provider,
            image=image,
            otlp_endpoint=watched_by.otlp_endpoint,
            **tier,
        ),
        opts=pulumi.ResourceOptions(depends_on=list(after)),
    )
