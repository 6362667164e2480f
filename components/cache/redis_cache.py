"""RedisCache: the gateway's cache, in the cluster. Redis 8 with the Query Engine (vector search).

For on-prem, edge and dev. The cloud tier's ElastiCache form (``aws_elasticache.py``) exposes the
same ``CacheEndpoint`` so the gateway does not care which one it got.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from components.catalog import images as _images
from components.catalog.charts import REDIS_EXPORTER_POD_LABELS
from components.kube.budget import Demand, demand
from components.kube.labels import GATEWAY_POD_LABELS, SYSTEM_NODES
from components.kube.objects import RESTRICTED_CONTAINER, namespace_peer, restricted_pod
from components.specs import Args, CacheSpec, ComponentNamespace

REDIS_PORT = 6379
REDIS_UID = 999
"""The ``redis`` user of the official image."""
SECRET_KEY = "password"


@dataclass(frozen=True)
class CacheEndpoint:
    """What the gateway needs to reach a cache, whichever form it is."""

    host: pulumi.Output[str]
    port: int
    tls: bool
    secret_name: str
    """A Kubernetes Secret, in the gateway's namespace, holding the password under ``secret_key``."""
    secret_key: str = SECRET_KEY
    username: str | None = None
    """The cache user the gateway authenticates as (ElastiCache RBAC); ``None``: the default user."""
    exporter_secret_name: str | None = None
    """The Redis exporter's own Secret (in the monitoring namespace); ``None``: it shares ``secret_name``."""
    exporter_username: str | None = None
    client_namespaces: tuple[str, ...] | None = None
    """The namespaces a gateway can use the cache from: its password Secret is there and the cache admits their
    clients. ``None``: not known (an endpoint built by hand for a cache the kit does not own)."""

    def url(self) -> pulumi.Output[str]:
        scheme = "rediss" if self.tls else "redis"
        return pulumi.Output.concat(scheme, "://", self.host, ":", str(self.port))

    def exporter_secret(self) -> tuple[str, str]:
        """(Secret name, key) of the password the Redis exporter reads in the monitoring namespace."""
        return self.exporter_secret_name or self.secret_name, self.secret_key


class RedisCacheArgs(Args):
    spec: CacheSpec = CacheSpec()
    namespace: ComponentNamespace
    """Required: the namespace's name, known when the program runs: it names the password Secrets (a ``pulumi.Output``
    is refused here; order the Namespace first with ``depends_on``)."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    client_namespace: ComponentNamespace = "inferstack-gateway"
    """Where the gateway runs: the only namespace whose pods may connect, and where its Secret goes."""
    secret_namespaces: tuple[ComponentNamespace, ...] | None = None
    """Where the password Secret is written besides ``namespace``; ``None``: ``client_namespace`` (the gateway reads
    it) and ``monitoring_namespace`` (the Redis exporter reads it)."""
    client_labels: dict[str, str] = Field(default_factory=lambda: dict(GATEWAY_POD_LABELS))
    monitoring_namespace: ComponentNamespace = "monitoring"
    protect: bool = True
    """Keep the data volume's StatefulSet from being deleted by ``pulumi destroy``."""
    system_node_selector: dict[str, str] = Field(default_factory=lambda: dict(SYSTEM_NODES))
    """Where Redis runs: the cloud's system pool by default."""
    storage_class: str | None = None
    """The data claim's StorageClass; ``None``: the cluster's default."""


def redis_resources(memory_gib: int) -> dict[str, Any]:
    """The Redis container's requests and limits (what the node budgets count, too: ``redis_demand``)."""
    memory = f"{memory_gib}Gi"
    return {"requests": {"cpu": "1", "memory": memory}, "limits": {"memory": memory}}


def redis_demand(spec: CacheSpec) -> Demand:
    """The in-cluster Redis: one pod (its exporter is a chart that requests nothing)."""
    return demand("redis", redis_resources(spec.memory_gib))


def redis_args(memory_gib: int) -> list[str]:
    """Server flags: a memory ceiling below the container limit, LRU eviction, AOF persistence."""
    maxmemory_mb = int(memory_gib * 1024 * 0.8)  # headroom for fork-on-rewrite and buffers
    return [
        "--requirepass", "$(REDIS_PASSWORD)",
        "--maxmemory", f"{maxmemory_mb}mb",
        "--maxmemory-policy", "allkeys-lru",
        "--appendonly", "yes",
        "--dir", "/data",
        "--protected-mode", "yes",
    ]  # fmt: skip


class RedisCache(pulumi.ComponentResource):
    endpoint: CacheEndpoint

    def __init__(self, name: str, args: RedisCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:redis_cache:RedisCache", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        labels = {"app.kubernetes.io/name": "inferstack-redis", "app.kubernetes.io/instance": name}
        meta = {"name": name, "namespace": args.namespace, "labels": labels}
        password = random.RandomPassword(name, length=48, special=False, opts=pulumi.ResourceOptions(parent=self))
        secret_name = f"{name}-auth"
        readers = args.secret_namespaces
        if readers is None:
            readers = (args.client_namespace, args.monitoring_namespace)
        for namespace in sorted({args.namespace, *readers}):
            k8s.core.v1.Secret(
                f"{name}-auth-{namespace}",
                metadata={"name": secret_name, "namespace": namespace, "labels": labels},
                string_data={SECRET_KEY: password.result},
                opts=k8s_opts,
            )
        probe = {
            "exec": {"command": ["sh", "-c", 'redis-cli -a "$REDIS_PASSWORD" --no-auth-warning ping | grep -q PONG']}
        }
        k8s.apps.v1.StatefulSet(
            name,
            metadata=meta,
            spec={
                "serviceName": f"{name}-headless",
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": args.system_node_selector,
                        "securityContext": restricted_pod(REDIS_UID),
                        # Nothing in this pod talks to the Kubernetes API: no token mounted.
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "redis",
                                "image": _images.REDIS,
                                "args": redis_args(args.spec.memory_gib),
                                "env": [
                                    {
                                        "name": "REDIS_PASSWORD",
                                        "valueFrom": {"secretKeyRef": {"name": secret_name, "key": SECRET_KEY}},
                                    }
                                ],
                                "ports": [{"name": "redis", "containerPort": REDIS_PORT}],
                                "resources": redis_resources(args.spec.memory_gib),
                                "readinessProbe": {**probe, "periodSeconds": 5},
                                "livenessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 6},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                "securityContext": RESTRICTED_CONTAINER,
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": f"{args.spec.storage_gib}Gi"}},
                            **({"storageClassName": args.storage_class} if args.storage_class else {}),
                        },
                    }
                ],
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, protect=args.protect),
        )
        service_port = [{"name": "redis", "port": REDIS_PORT, "targetPort": "redis"}]
        k8s.core.v1.Service(
            f"{name}-headless",
            metadata={**meta, "name": f"{name}-headless"},
            spec={"clusterIP": "None", "selector": labels, "ports": service_port},
            opts=k8s_opts,
        )
        service = k8s.core.v1.Service(
            name, metadata=meta, spec={"selector": labels, "ports": service_port}, opts=k8s_opts
        )
        k8s.policy.v1.PodDisruptionBudget(
            name, metadata=meta, spec={"maxUnavailable": 1, "selector": {"matchLabels": labels}}, opts=k8s_opts
        )

        k8s.networking.v1.NetworkPolicy(
            name,
            metadata=meta,
            spec={
                "podSelector": {"matchLabels": labels},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [
                            {
                                **namespace_peer(args.client_namespace),
                                "podSelector": {"matchLabels": args.client_labels},
                            },
                            # The Redis exporter, from the monitoring namespace: its pods only, not all of
                            # monitoring (Grafana, Alertmanager, the collector have no business with the cache).
                            {
                                **namespace_peer(args.monitoring_namespace),
                                "podSelector": {"matchLabels": dict(REDIS_EXPORTER_POD_LABELS)},
                            },
                        ],
                        "ports": [{"port": "redis", "protocol": "TCP"}],
                    }
                ],
            },
            opts=k8s_opts,
        )
        host = pulumi.Output.concat(service.id.apply(lambda _: name), ".", args.namespace, ".svc.cluster.local")
        self.endpoint = CacheEndpoint(
            host=host,
            port=REDIS_PORT,
            tls=False,
            secret_name=secret_name,
            # The NetworkPolicy admits client_namespace only, and only where the Secret is written can a pod read it.
            client_namespaces=(args.client_namespace,) if args.client_namespace in {args.namespace, *readers} else (),
        )
        self.register_outputs({"host": host, "port": REDIS_PORT, "secret_name": secret_name})
