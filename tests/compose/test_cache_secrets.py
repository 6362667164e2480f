"""The cache's password reaches the namespaces a user's own gateway and exporter run in."""

from __future__ import annotations

from components.cache.redis_cache import RedisCache, RedisCacheArgs
from components.kube.existing_cluster import ExistingCluster
from inferstack_cli.plan import MockEngine


def secret_namespaces(engine: MockEngine, name: str) -> set[str]:
    return {
        r.inputs["metadata"]["namespace"]
        for r in engine.settle()
        if r.type == "kubernetes:core/v1:Secret" and r.inputs["metadata"]["name"] == name
    }


def test_the_password_secret_goes_where_the_users_gateway_and_exporter_run(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    # GIVEN a cache in the user's own namespaces: clients in `gw`, the Redis exporter in `mon`
    cache = RedisCache(
        "redis",
        RedisCacheArgs(
            namespace="cache", provider=cluster.k8s_provider, client_namespace="gw", monitoring_namespace="mon"
        ),
    )
    # THEN the Secret the gateway's pod reads (CacheEndpoint.secret_name) exists in `gw` and the exporter's in `mon`,
    # and none is written into the bundled stacks' namespaces, which this cluster may not have
    assert secret_namespaces(engine, cache.endpoint.secret_name) == {"cache", "gw", "mon"}


def test_secret_namespaces_named_by_the_user_replace_the_derived_ones(
    engine: MockEngine, cluster: ExistingCluster
) -> None:
    cache = RedisCache(
        "redis",
        RedisCacheArgs(namespace="cache", provider=cluster.k8s_provider, client_namespace="gw", secret_namespaces=()),
    )
    assert secret_namespaces(engine, cache.endpoint.secret_name) == {"cache"}
