"""ElastiCacheValkey: the cloud tier's cache, ElastiCache for Valkey ≥ 8.2 (vector search).

A replication group with TLS in transit and role-based access control (one ElastiCache user per
client, each with its own generated password, a Pulumi secret), encryption at rest with KMS, multi-AZ
automatic failover, a security group that admits only the cluster, and LRU eviction. The gateway's and
the Redis exporter's passwords reach them as separate Kubernetes Secrets: a leaked exporter credential
reads metrics, never writes the cache.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from components.cache.redis_cache import REDIS_PORT, SECRET_KEY, CacheEndpoint
from components.specs import Args, CacheSpec, ComponentNamespace, StrInput

ENGINE_VERSION = "8.2"
"""Valkey 8.2 is the first ElastiCache version with vector search (FT.* commands)."""
PARAMETER_FAMILY = "valkey8"
GATEWAY_ACCESS = "on ~* &* +@all -@admin"
"""The gateway reads and writes cache keys and vector indexes (FT.*), never administers the server."""
EXPORTER_ACCESS = "on ~* -@all +@read +@connection +info +slowlog"
"""The Redis exporter reads INFO, key statistics and the slow log; it cannot write (Valkey ACL categories)."""


class ElastiCacheValkeyArgs(Args):
    spec: CacheSpec
    """Required: the stack's ``cache`` section (node type, replicas), which the gateway's cache semantics share."""
    vpc_id: StrInput
    """Required: the cache's security group lives in the cluster's VPC."""
    subnet_ids: list[StrInput]
    """Private subnets in several zones: replicas land in other zones for failover."""
    client_security_group_id: StrInput
    """The EKS cluster security group: the only source admitted on the Redis port."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider, for the password Secrets the gateway and exporter read."""
    gateway_namespace: ComponentNamespace = "inferstack-gateway"
    """Where the gateway's password Secret is written."""
    exporter_namespace: ComponentNamespace = "monitoring"
    """Where the Redis exporter's password Secret is written."""
    user_id_prefix: str
    """Required: ElastiCache user and user-group ids are unique per account and region (e.g. ``inferstack-prod``)."""
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
        # RBAC (ElastiCache user guide, "Role-Based Access Control"; Valkey 7.2+): a user group of engine valkey
        # may hold only users that authenticate, so the default user gets a password too and is switched off.
        # Passwords: 16-128 printable characters without @, " or / (CreateUser).
        users = []
        credentials: dict[str, random.RandomPassword] = {}
        for role, user_name, access in (
            ("default", "default", "off ~* -@all"),
            ("gateway", "gateway", GATEWAY_ACCESS),
            ("exporter", "exporter", EXPORTER_ACCESS),
        ):
            # The gateway keeps the password the former shared auth token had: a rename, aliased, not a new secret.
            aliases = [pulumi.Alias(name=name)] if role == "gateway" else []
            password = random.RandomPassword(
                f"{name}-{role}",
                length=64,
                special=False,
                opts=pulumi.ResourceOptions(parent=self, aliases=aliases),
            )
            credentials[role] = password
            users.append(
                aws.elasticache.User(
                    f"{name}-{role}",
                    user_id=f"{args.user_id_prefix}-{role}",
                    user_name=user_name,
                    engine="valkey",
                    access_string=access,
                    authentication_mode={"type": "password", "passwords": [password.result]},
                    tags=args.tags,
                    opts=child,
                )
            )
        user_group = aws.elasticache.UserGroup(
            name,
            user_group_id=f"{args.user_id_prefix}-cache",
            engine="valkey",
            user_ids=[u.user_id for u in users],
            tags=args.tags,
            opts=child,
        )
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
            user_group_ids=[user_group.user_group_id],
            at_rest_encryption_enabled=True,
            kms_key_id=key.arn,
            subnet_group_name=subnets.name,
            security_group_ids=[group.id],
            parameter_group_name=parameters.name,
            snapshot_retention_limit=1,
            tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        secret_name = f"{name}-auth"
        exporter_secret = f"{name}-exporter-auth"
        for role, namespace, secret in (
            ("gateway", args.gateway_namespace, secret_name),
            ("exporter", args.exporter_namespace, exporter_secret),
        ):
            k8s.core.v1.Secret(
                f"{name}-auth-{namespace}",
                metadata={"name": secret, "namespace": namespace},
                string_data={SECRET_KEY: credentials[role].result},
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
        self.endpoint = CacheEndpoint(
            host=replication.primary_endpoint_address,
            port=REDIS_PORT,
            tls=True,
            secret_name=secret_name,
            username="gateway",
            exporter_secret_name=exporter_secret,
            exporter_username="exporter",
            client_namespaces=(args.gateway_namespace,),
        )
        self.register_outputs({"host": self.endpoint.host, "port": REDIS_PORT, "secret_name": secret_name})
