"""ElastiCacheValkey: the cloud tier's cache, ElastiCache for Valkey ≥ 8.2 (vector search).

A replication group with TLS in transit and an auth token (a Pulumi secret), encryption at
rest with KMS, multi-AZ automatic failover, a security group that admits only the cluster,
and LRU eviction. The token reaches the gateway as a Kubernetes Secret.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from components.cache.redis_cache import REDIS_PORT, SECRET_KEY, CacheEndpoint
from components.specs import Args, CacheSpec, StrInput

ENGINE_VERSION = "8.2"
"""Valkey 8.2 is the first ElastiCache version with vector search (FT.* commands)."""
PARAMETER_FAMILY = "valkey8"


class ElastiCacheValkeyArgs(Args):
    spec: CacheSpec
    vpc_id: StrInput
    subnet_ids: list[StrInput]
    """Private subnets in several zones: replicas land in other zones for failover."""
    client_security_group_id: StrInput
    """The EKS cluster security group: the only source admitted on the Redis port."""
    provider: k8s.Provider
    secret_namespaces: tuple[str, ...] = ("inferstack-gateway", "monitoring")
    """Where the password Secret is written: the gateway's and the Redis exporter's namespaces."""
    protect: bool = True
    tags: dict[str, str] = Field(default_factory=dict)


class ElastiCacheValkey(pulumi.ComponentResource):
    endpoint: CacheEndpoint

    def __init__(self, name: str, args: ElastiCacheValkeyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:aws_elasticache:ElastiCacheValkey", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec = args.spec
        key = aws.kms.Key(
            name, description=f"Cache encryption for {name}", enable_key_rotation=True, tags=args.tags, opts=child
        )
        group = aws.ec2.SecurityGroup(
            name,
            vpc_id=args.vpc_id,
            description="Valkey: the EKS cluster only",
            ingress=[
                {
                    "protocol": "tcp",
                    "from_port": REDIS_PORT,
                    "to_port": REDIS_PORT,
                    "security_groups": [args.client_security_group_id],
                }
            ],
            tags={**args.tags, "Name": name},
            opts=child,
        )
        subnets = aws.elasticache.SubnetGroup(name, subnet_ids=args.subnet_ids, tags=args.tags, opts=child)
        parameters = aws.elasticache.ParameterGroup(
            name,
            family=PARAMETER_FAMILY,
            # A cache, not a store: evict the least recently used key when memory is full.
            parameters=[{"name": "maxmemory-policy", "value": "allkeys-lru"}],
            tags=args.tags,
            opts=child,
        )
        # ElastiCache auth tokens: 16-128 printable characters without @, " or /.
        token = random.RandomPassword(name, length=64, special=False, opts=child)
        failover = spec.replicas > 1
        replication = aws.elasticache.ReplicationGroup(
            name,
            description=f"inferstack cache {name}",
            engine="valkey",
            engine_version=ENGINE_VERSION,
            node_type=spec.node_type,
            num_cache_clusters=spec.replicas,
            automatic_failover_enabled=failover,
            multi_az_enabled=failover,
            port=REDIS_PORT,
            transit_encryption_enabled=True,
            transit_encryption_mode="required",
            auth_token=token.result,
            at_rest_encryption_enabled="true",
            kms_key_id=key.arn,
            subnet_group_name=subnets.name,
            security_group_ids=[group.id],
            parameter_group_name=parameters.name,
            snapshot_retention_limit=1,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        secret_name = f"{name}-auth"
        for namespace in args.secret_namespaces:
            k8s.core.v1.Secret(
                f"{name}-auth-{namespace}",
                metadata={"name": secret_name, "namespace": namespace},
                string_data={SECRET_KEY: token.result},
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
        self.endpoint = CacheEndpoint(
            host=replication.primary_endpoint_address, port=REDIS_PORT, tls=True, secret_name=secret_name
        )
        self.register_outputs({"host": self.endpoint.host})
