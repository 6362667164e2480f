"""Gateway: the kit's OpenAI-compatible gateway (``images/gateway``) in the cluster.

Its config is rendered from the stack's models and cache and validated by the gateway's own
schema (``inferstack_gateway.config``) before anything is applied, so a config the gateway
would refuse at start fails the plan instead. Secrets never enter the ConfigMap: the Redis
password and the hashed API keys come from Kubernetes Secrets.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
import yaml
from pydantic import Field, model_validator

from components.cache.redis_cache import CacheEndpoint
from components.kube.budget import Demand, demand, surge_pods
from components.kube.labels import GATEWAY_POD_LABELS, SYSTEM_NODES
from components.kube.objects import RESTRICTED_CONTAINER, restricted_pod
from components.specs import Args, ComponentNamespace, GatewaySpec, ModelDeploySpec, StrInput

APP = dict(GATEWAY_POD_LABELS)
LB_PORT_NAME = "load-balancer"
"""The off-AWS load balancer Service's port (the in-cluster Service's is ``http``, the scraped one)."""
PORT = 8080
CONFIG_PATH = "/etc/inferstack/gateway.yaml"
KEYS_PATH = "/etc/inferstack/keys/keys.yaml"
TRITON_ENTRY_MODEL = "ensemble"
"""The Triton entry model: components/serving/_triton.py renders ensemble → pre → tensorrt_llm → post."""
GATEWAY_RESOURCES: dict[str, Any] = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
"""One gateway replica (the node budgets count the same numbers: ``gateway_demand``)."""
TLS_DIR = "/etc/inferstack/tls"
"""Where the ``gateway.tlsSecret`` Secret is mounted (its ``tls.crt`` and ``tls.key``)."""
HUB_CA_FILE = "/etc/inferstack/hub-ca/ca.crt"
"""Where the hub's private CA (``hub.caConfigMap``) is mounted: the hub upstream's ``ca_file``."""
GATEWAY_ROLLOUT: dict[str, Any] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
"""The gateway never drops below its serving count in a rollout: a CPU pod comes up first (the node budgets hold room
for it)."""
GATEWAY_UID = 10001
"""The gateway image's user (images/gateway/Dockerfile)."""


HUB = "hub"
"""The upstream and tier name of the stack's hub (a route's ``large: hub``)."""
HUB_KEY_ENV = "HUB_API_KEY"
BURST_KEY_NAME = "burst"
"""The burst key's name in the keys file: the gateway counts a key's rate limits under its name (``key_id``)."""


class Embedder(Args):
    """An embedding server on the cluster that the semantic cache uses (an edge site's llama.cpp embedder)."""

    url: StrInput
    """OpenAI base URL including ``/v1``."""
    model: str
    """The name it serves the model under."""
    dimensions: int
    max_input_tokens: int | None = None
    """The longest prompt it embeds (the catalog's ``embedding_max_input_tokens``); longer ones skip the semantic
    cache rather than reach a server that refuses them."""


def hpa_max_replicas(spec: GatewaySpec) -> int:
    """The HorizontalPodAutoscaler's ceiling: ``maxReplicas``, never below ``replicas``."""
    return max(spec.max_replicas, spec.replicas)


def disruption_budget(spec: GatewaySpec) -> dict[str, int]:
    """Keep one gateway pod serving through voluntary evictions (node drains, upgrades, consolidation).

    Not with one replica: an eviction is allowed only if ``minAvailable`` pods are still available after it
    (policy/v1 ``PodDisruptionBudgetSpec.minAvailable``), so 1 of 1 allows none and ``kubectl drain`` (a node upgrade,
    Karpenter's consolidation) waits for ever (https://kubernetes.io/docs/tasks/run-application/configure-pdb/). A
    single replica cannot serve through a drain anyway, so it may be evicted, as a one-replica model may
    (``components.serving.inference_server.disruption_budget``)."""
    if spec.replicas <= 1:
        return {"maxUnavailable": 1}
    return {"minAvailable": 1}


def gateway_demand(spec: GatewaySpec) -> Demand:
    """The gateway's pods at their peak: the HPA grows it to its ceiling, and a rollout then adds its surge pod."""
    return demand("gateway", GATEWAY_RESOURCES, hpa_max_replicas(spec) + surge_pods(GATEWAY_ROLLOUT))


def longest_answer_ms(models: list[ModelDeploySpec]) -> float:
    """The longest a chat model's answer may stream within its SLO: its served context (``max_model_len``, which bounds
    prompt and answer together), every token at ``slo.itlP99Ms``; 0 without a chat model."""
    from components.catalog.models import MODELS
    from components.catalog.profiles import PROFILES
    from components.catalog.sizing import serving_context_tokens

    return max(
        (
            serving_context_tokens(MODELS[m.model], PROFILES[m.profile]) * m.slo.itl_p99_ms
            for m in models
            if not MODELS[m.model].is_embedding
        ),
        default=0.0,
    )


def embedder_for(model_id: str, url: StrInput) -> Embedder | None:
    """The semantic cache's embedder for a catalog model served at ``url`` (``/v1``); ``None`` for a chat model."""
    from components.catalog.models import MODELS
    from components.specs import did_you_mean

    if model_id not in MODELS:
        raise ValueError(
            f"model_id: {model_id!r} is not in the model catalog{did_you_mean(model_id, list(MODELS))}; use a catalog "
            "model id (components/catalog/models.py), as ModelDeploySpec.model is"
        )
    spec = MODELS[model_id]
    if spec.embedding_dimensions is None:
        return None
    return Embedder(
        url=url,
        model=model_id,
        dimensions=spec.embedding_dimensions,
        max_input_tokens=spec.embedding_max_input_tokens,
    )


class HubUpstream(Args):
    """The hub gateway as a remote upstream: complex prompts go there, and local models fall back to it."""

    url: StrInput
    """The hub gateway's OpenAI base URL including ``/v1``."""
    api_key: StrInput
    """A Pulumi secret: the key the hub issued for this stack (sent as the upstream's bearer token)."""
    model: str | None = None
    """The alias requested at the hub; ``None``: the alias the client asked for."""
    fallback: bool = True
    """Each local model's tier fails over to the hub (connect errors, 5xx, timeouts before the first byte)."""
    ca_config_map: str | None = None
    """A ConfigMap holding the private CA the hub's certificate chains to (mounted; the gateway's ``ca_file``)."""
    ca_key: str = "ca.crt"
    """The ConfigMap's key holding the PEM bundle."""


def gateway_config(
    spec: GatewaySpec,
    models: list[ModelDeploySpec],
    upstream_urls: dict[str, str],
    *,
    otlp_endpoint: str | None,
    embedder: Embedder | None = None,
    hub: HubUpstream | None = None,
) -> dict[str, Any]:
    """The gateway's config document. Secrets appear only as ``${VAR}`` references.

    ``upstream_urls`` maps each chat model (and ``hub`` with a hub) to its base URL; embedding models are not
    upstreams: the first one becomes ``embeddings`` unless ``gateway.embeddingsUrl`` names another.
    """
    from components.catalog.models import MODELS

    models = [m for m in models if not MODELS[m.model].is_embedding]
    embeddings: dict[str, Any] | None = None
    if spec.embeddings_url is not None:
        embeddings = {"url": _literal(spec.embeddings_url)}
    elif embedder is not None:
        embeddings = {"url": upstream_urls["$embeddings"], "model": embedder.model, "dimensions": embedder.dimensions}
        if embedder.max_input_tokens is not None:
            embeddings["max_input_tokens"] = embedder.max_input_tokens
    semantic = embeddings is not None
    fallback = [HUB] if hub is not None and hub.fallback else []
    server: dict[str, Any] = {"port": PORT}
    if spec.tls_secret is not None:
        server.update(tls_cert_file=f"{TLS_DIR}/tls.crt", tls_key_file=f"{TLS_DIR}/tls.key")
    config: dict[str, Any] = {
        "server": server,
        "redis": {"url": "${GATEWAY_REDIS_URL}"},
        # vLLM and llama.cpp serve the model under its catalog id; Triton's OpenAI frontend under the entry model.
        "upstreams": {
            m.name: {"url": upstream_urls[m.name], "model": TRITON_ENTRY_MODEL if m.engine == "triton" else m.model}
            for m in models
        },
        # A tier is an ordered failover list: with a hub, each local model falls back to it.
        "tiers": {m.name: {"upstreams": [m.name, *fallback]} for m in models},
        "models": {},
        "auth": {"keys_file": KEYS_PATH},
        "limits": {"requests_per_minute": spec.requests_per_minute, "tokens_per_minute": spec.tokens_per_minute},
    }
    cache: dict[str, Any] = {
        "policy": spec.cache.policy,
        "exact": True,
        "semantic": {"enabled": semantic, "max_distance": spec.semantic_max_distance},
    }
    # Only what differs from the gateway's own defaults (the keys' defaults are the same): a stack that sets none of
    # these keys renders the config it rendered before they existed, and its gateway pods are not rolled, but for a
    # request budget derived from a model whose longest answer passes the default (below).
    if spec.cache.ttl_seconds != type(spec.cache).model_fields["ttl_seconds"].default:
        cache["ttl_s"] = spec.cache.ttl_seconds
        cache["semantic"]["ttl_s"] = spec.cache.ttl_seconds
    budgets = spec.budgets.model_dump(exclude_defaults=True)  # snake_case: the gateway's own names
    if "request_ms" not in spec.budgets.model_fields_set:
        # Unset, the request's budget is at least what a model's longest answer may take within its SLO: a budget
        # shorter than that cuts a stream the model is still serving on target (the 405B of the bundled on-prem stack:
        # 8,192 tokens at 60 ms is over 8 minutes, where the gateway's default is 5).
        needed = math.ceil(longest_answer_ms(models) + spec.budgets.upstream_ttft_ms)
        if needed > spec.budgets.request_ms:
            budgets["request_ms"] = needed
    if budgets:
        config["budgets"] = budgets
    if hub is not None:
        # kind: remote: residency-local traffic never goes there, and spillover overflows to it.
        upstream: dict[str, Any] = {
            "url": _literal(upstream_urls[HUB]),
            "kind": "remote",
            "api_key": "${" + HUB_KEY_ENV + "}",
        }
        if hub.model:
            upstream["model"] = _literal(hub.model)
        if hub.ca_config_map is not None:
            upstream["ca_file"] = HUB_CA_FILE
        config["upstreams"][HUB] = upstream
        config["tiers"][HUB] = {"upstreams": [HUB]}
        if spec.burst is not None and hub.fallback:
            spillover = spec.burst.model_dump(exclude_none=True)
            for m in models:
                config["tiers"][m.name]["spillover"] = dict(spillover)
    for m in models:
        config["models"][m.name] = {"tier": m.name, "cache": copy.deepcopy(cache)}
    for route in spec.routes:
        rule: dict[str, Any] = {"tier": route.large}
        if route.large_if_prompt_tokens:
            rule["min_prompt_tokens"] = route.large_if_prompt_tokens
        if route.large_if_turns:
            rule["min_turns"] = route.large_if_turns
        if route.large_if_keywords:
            rule["keywords"] = [_literal(keyword) for keyword in route.large_if_keywords]
        config["models"][route.alias] = {"tier": route.small, "complexity": [rule], "cache": copy.deepcopy(cache)}
        if route.residency == "local":
            config["models"][route.alias]["residency"] = "local"
    if embeddings is not None:
        config["embeddings"] = embeddings
    if otlp_endpoint:
        config["tracing"] = {"otlp_endpoint": otlp_endpoint}
    return config


def _literal(text: str) -> str:
    """The user's text as the gateway reads it back: it expands ``${VAR}`` in every string of its config and reads
    ``$$`` as ``$`` (``inferstack_gateway.config.interpolate_env``), so each ``$`` is written ``$$``."""
    return text.replace("$", "$$")


def validate_config(config: dict[str, Any]) -> str:
    """Validate with the gateway's own schema (with stand-in values for the ``${VAR}`` secrets) and render."""
    from inferstack_gateway.config import parse_config

    parse_config(
        config,
        env={"GATEWAY_REDIS_URL": "redis://validation:6379", HUB_KEY_ENV: "validation"},
        source="gateway config (rendered)",
    )
    # Keys sorted: the order of the stack file's models (or pools) means nothing to the gateway, and a reordered
    # config would change the config digest on the pod template and roll every gateway pod for no change.
    return yaml.safe_dump(config, sort_keys=True)


def keys_file(spec: GatewaySpec, burst_key: str | None = None) -> str:
    """The gateway's keys file (``auth.keys_file``); with ``burst_key``, its SHA-256 as the burst tenant's key."""
    keys = [k.model_dump(mode="json", exclude_none=True, exclude_defaults=True) for k in spec.api_keys]
    for key, spec_key in zip(keys, spec.api_keys, strict=True):
        key["tenant"], key["key_sha256"] = spec_key.tenant, spec_key.key_sha256
    if burst_key is not None:
        tenant = spec.burst_tenant
        entry: dict[str, Any] = {"tenant": tenant.tenant, "name": BURST_KEY_NAME, "key_sha256": _sha256(burst_key)}
        if tenant.requests_per_minute:
            entry["requests_per_minute"] = tenant.requests_per_minute
        if tenant.tokens_per_minute:
            entry["tokens_per_minute"] = tenant.tokens_per_minute
        if tenant.models:
            entry["models"] = list(tenant.models)
        keys.append(entry)
    return yaml.safe_dump(keys, sort_keys=False)


PRIVATE_NETWORKS: tuple[str, ...] = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
"""RFC 1918 private networks."""


class GatewayArgs(Args):
    spec: GatewaySpec
    """Required: the stack's ``gateway`` section (routes, limits, caching); it renders the gateway's config."""
    models: list[ModelDeploySpec]
    """Required: the models the gateway routes to; each chat model needs an ``upstream_urls`` entry."""
    upstream_urls: dict[str, StrInput]
    """Model name → OpenAI base URL (``…/v1``) of its InferenceServer."""
    cache: CacheEndpoint
    """Required: the cache's address and password Secret (``RedisCache.endpoint`` / ``ElastiCacheValkey.endpoint``)."""
    namespace: ComponentNamespace
    """The gateway's own namespace: one gateway per namespace (its pods' labels are the same in every gateway, so two
    in one namespace select each other's pods; the policy pack's stack-workload-selectors-disjoint refuses that)."""
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    image: StrInput
    """Required: the gateway image the stack built and pushed (``images/gateway``); the kit publishes none."""
    otlp_endpoint: str | None = None
    system_node_selector: dict[str, str] = Field(default_factory=lambda: dict(SYSTEM_NODES))
    """Where the gateway runs: the cloud's system pool by default."""
    service_annotations: dict[str, str] | None = None
    """With ``loadBalancer: internal``: what the tier's load balancer reads (MetalLB's pool, ...). ``None``: the
    AWS Load Balancer Controller's internal NLB annotations (cloud)."""
    load_balancer_source_ranges: tuple[str, ...] = PRIVATE_NETWORKS
    """Off AWS: the only networks the load balancer admits (``loadBalancerSourceRanges``, which kube-proxy
    enforces for every load balancer implementation). Private ranges by default: nothing public."""
    load_balancer_class: str | None = None
    """``spec.loadBalancerClass`` for a cluster's own load balancer implementation; ``None``: the default."""
    embedder: Embedder | None = None
    """An in-cluster embedding server for the semantic cache; ``spec.embeddings_url`` wins when both are set."""
    hub: HubUpstream | None = None
    """The stack's hub (edge and on-prem tiers); its key goes to a Secret, never to the ConfigMap."""
    issue_burst_key: bool = False
    """Hub side: generate the key other stacks burst with (``spec.burst_tenant``); its SHA-256 joins the keys file
    and the plaintext is only ``burst_api_key`` (a secret)."""

    @model_validator(mode="after")
    def _where_the_cache_admits_it(self) -> GatewayArgs:
        admitted = self.cache.client_namespaces
        if admitted is not None and self.namespace not in admitted:
            raise ValueError(
                f"namespace: {self.namespace!r} is not where the cache admits its gateway and writes its password "
                f"Secret ({', '.join(repr(n) for n in admitted) or 'nowhere'}); give the cache this namespace "
                "(RedisCacheArgs.client_namespace, ElastiCacheValkeyArgs.gateway_namespace), or run the Gateway there"
            )
        return self

    @model_validator(mode="after")
    def _an_upstream_per_model(self) -> GatewayArgs:
        from components.catalog.models import MODELS

        missing = [m.name for m in self.models if not MODELS[m.model].is_embedding and m.name not in self.upstream_urls]
        if missing:
            raise ValueError(
                f"upstream_urls: no URL for {', '.join(repr(n) for n in missing)} (models[].name); got "
                f"{', '.join(repr(k) for k in self.upstream_urls) or 'none'}. Map each chat model's name to its "
                "server's OpenAI base URL, e.g. pulumi.Output.concat(server.endpoint, '/v1')"
            )
        return self


class Gateway(pulumi.ComponentResource):
    service_name: str
    url: pulumi.Output[str]
    burst_url: pulumi.Output[str]
    """The URL other stacks reach this gateway at: the internal load balancer's, else the in-cluster one."""
    burst_api_key: pulumi.Output[str] | None
    """Secret: the key issued to the stacks that burst here (``None`` without ``issue_burst_key``)."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:gateway:Gateway", name, None, opts)
        spec = args.spec
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        meta = {"name": name, "namespace": args.namespace, "labels": APP}

        def render(urls: dict[str, str]) -> str:
            return validate_config(
                gateway_config(
                    spec, args.models, urls, otlp_endpoint=args.otlp_endpoint, embedder=args.embedder, hub=args.hub
                )
            )

        urls = dict(args.upstream_urls)
        if args.embedder is not None:
            urls["$embeddings"] = args.embedder.url
        if args.hub is not None:
            urls[HUB] = args.hub.url
        # Refuse a config the gateway would refuse (a route to a model it does not serve, ...) now: an error inside the
        # apply below would surface only at `pulumi up`. A URL that is an Output is not known yet: a stand-in takes its
        # place (https for the hub, whose private CA only an https:// upstream may name).
        render({key: url if isinstance(url, str) else _validation_url(key) for key, url in urls.items()})
        config_text = pulumi.Output.all(**urls).apply(render)
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata={**meta, "name": f"{name}-config"},
            data={"gateway.yaml": config_text},
            opts=k8s_opts,
        )
        self.burst_api_key = None
        keys_text: pulumi.Input[str] = pulumi.Output.secret(keys_file(spec))
        if args.issue_burst_key and spec.burst_tenant.enabled:
            burst_key = random.RandomPassword(
                f"{name}-burst-key", length=48, special=False, opts=pulumi.ResourceOptions(parent=self)
            )
            self.burst_api_key = pulumi.Output.secret(burst_key.result)
            keys_text = pulumi.Output.secret(burst_key.result.apply(lambda key: keys_file(spec, key)))
        keys = k8s.core.v1.Secret(
            f"{name}-keys",
            metadata={**meta, "name": f"{name}-keys"},
            string_data={"keys.yaml": keys_text},
            opts=k8s_opts,
        )
        hub_env: list[dict[str, Any]] = []
        if args.hub is not None:
            hub_secret = k8s.core.v1.Secret(
                f"{name}-hub",
                metadata={**meta, "name": f"{name}-hub"},
                string_data={"api-key": pulumi.Output.secret(args.hub.api_key)},
                opts=k8s_opts,
            )
            hub_env = [{"name": HUB_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": f"{name}-hub", "key": "api-key"}}}]
        keys_digest = credentials_sha256(keys_text, args.hub.api_key if args.hub is not None else None)
        scheme = "rediss" if args.cache.tls else "redis"
        env = [
            {
                "name": "REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": args.cache.secret_name, "key": args.cache.secret_key}},
            },
            {
                "name": "GATEWAY_REDIS_URL",
                # Kubernetes expands $(REDIS_PASSWORD) from the variable above: the password never sits in a ConfigMap.
                "value": pulumi.Output.concat(
                    scheme,
                    "://",
                    args.cache.username or "",
                    ":$(REDIS_PASSWORD)@",
                    args.cache.host,
                    ":",
                    str(args.cache.port),
                ),
            },
            *hub_env,
        ]
        tls = spec.tls_secret is not None
        # With gateway.tlsSecret the gateway serves HTTPS only: the kubelet probes it over TLS (unverified, as kubelet
        # HTTPS probes are).
        http_get = {"port": "http", **({"scheme": "HTTPS"} if tls else {})}
        probe = {"httpGet": {**http_get, "path": "/readyz"}, "periodSeconds": 5}
        tls_mounts = [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}] if tls else []
        tls_volumes = [{"name": "tls", "secret": {"secretName": spec.tls_secret}}] if tls else []
        if args.hub is not None and args.hub.ca_config_map is not None:
            hub_ca_dir, hub_ca_name = HUB_CA_FILE.rsplit("/", 1)
            tls_mounts.append({"name": "hub-ca", "mountPath": hub_ca_dir, "readOnly": True})
            tls_volumes.append(
                {
                    "name": "hub-ca",
                    "configMap": {
                        "name": args.hub.ca_config_map,
                        "items": [{"key": args.hub.ca_key, "path": hub_ca_name}],
                    },
                }
            )
        k8s.apps.v1.Deployment(
            name,
            metadata=meta,
            spec={
                "replicas": spec.replicas,
                "selector": {"matchLabels": APP},
                "strategy": GATEWAY_ROLLOUT,
                "template": {
                    "metadata": {
                        "labels": APP,
                        # Roll the pods when the rendered config changes, or the keys they read at start.
                        "annotations": {
                            "inferstack.io/config-sha256": config_text.apply(_sha256),
                            KEYS_ANNOTATION: keys_digest,
                        },
                    },
                    "spec": {
                        "nodeSelector": args.system_node_selector,
                        "securityContext": restricted_pod(GATEWAY_UID),
                        # Nothing in this pod talks to the Kubernetes API: no token mounted.
                        "automountServiceAccountToken": False,
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": APP},
                            }
                        ],
                        "containers": [
                            {
                                "name": "gateway",
                                "image": args.image,
                                "args": ["--config", CONFIG_PATH],
                                "env": env,
                                "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
                                "resources": GATEWAY_RESOURCES,
                                "readinessProbe": probe,
                                "livenessProbe": {**probe, "httpGet": {**http_get, "path": "/healthz"}},
                                "volumeMounts": [
                                    {
                                        "name": "config",
                                        "mountPath": "/etc/inferstack/gateway.yaml",
                                        "subPath": "gateway.yaml",
                                    },
                                    {"name": "keys", "mountPath": "/etc/inferstack/keys", "readOnly": True},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    *tls_mounts,
                                ],
                                "securityContext": RESTRICTED_CONTAINER,
                            }
                        ],
                        "volumes": [
                            {"name": "config", "configMap": {"name": f"{name}-config"}},
                            {"name": "keys", "secret": {"secretName": f"{name}-keys"}},
                            {"name": "tmp", "emptyDir": {}},
                            *tls_volumes,
                        ],
                    },
                },
            },
            # The HPA owns the replica count after creation.
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[config_map, keys, *([hub_secret] if args.hub is not None else [])],
                ignore_changes=["spec.replicas"],
            ),
        )
        k8s.core.v1.Service(
            name,
            metadata={**meta, "annotations": {}},
            spec={
                # In-cluster clients (and the kit's own URL output) use the ClusterIP on port 80, or 443 with TLS.
                "type": "ClusterIP",
                "selector": APP,
                "ports": [{"name": "http", "port": TLS_PORT if tls else 80, "targetPort": "http"}],
            },
            opts=k8s_opts,
        )
        lb: k8s.core.v1.Service | None = None
        if spec.load_balancer == "internal" and args.service_annotations is None:
            lb = k8s.core.v1.Service(
                f"{name}-lb",
                metadata={**meta, "name": f"{name}-lb", "annotations": load_balancer_annotations(spec)},
                spec={
                    "type": "LoadBalancer",
                    "selector": APP,
                    # TLS only: API keys never cross the network in clear text. The NLB terminates TLS on 443.
                    "ports": [{"name": "https", "port": TLS_PORT, "targetPort": "http", "protocol": "TCP"}],
                },
                opts=k8s_opts,
            )
        elif spec.load_balancer == "internal":
            # Off AWS: the tier's load balancer (MetalLB, the cluster's own, k3s servicelb) gives an address on
            # the private network; it forwards TCP and terminates no TLS (README: on-prem quick start). Its port is
            # the tier's: 80 on-prem, 8080 at the edge, where k3s's Traefik holds 80 (components/edge/specs.py).
            lb = k8s.core.v1.Service(
                f"{name}-lb",
                metadata={**meta, "name": f"{name}-lb", "annotations": dict(args.service_annotations or {})},
                spec={
                    "type": "LoadBalancer",
                    "selector": APP,
                    **({"loadBalancerClass": args.load_balancer_class} if args.load_balancer_class else {}),
                    **(
                        {"loadBalancerSourceRanges": list(args.load_balancer_source_ranges)}
                        if args.load_balancer_source_ranges
                        else {}
                    ),
                    # Not "http": the gateway's ServiceMonitor scrapes the Services of these labels on their "http"
                    # port, and a second one there scraped every pod twice (each series doubled under another
                    # `service` label, request rates summed twice).
                    "ports": [
                        {"name": LB_PORT_NAME, "port": spec.listen_port, "targetPort": "http", "protocol": "TCP"}
                    ],
                },
                opts=k8s_opts,
            )
        k8s.policy.v1.PodDisruptionBudget(
            name, metadata=meta, spec={**disruption_budget(spec), "selector": {"matchLabels": APP}}, opts=k8s_opts
        )
        k8s.autoscaling.v2.HorizontalPodAutoscaler(
            name,
            metadata=meta,
            spec={
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": spec.replicas,
                "maxReplicas": hpa_max_replicas(spec),
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": spec.target_cpu_percent},
                        },
                    }
                ],
                # Up fast (a burst), down slowly (no flapping): separate from the GPU tier's KEDA policy.
                "behavior": {
                    "scaleUp": {
                        "stabilizationWindowSeconds": 0,
                        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
                    },
                    "scaleDown": {
                        "stabilizationWindowSeconds": 300,
                        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                    },
                },
            },
            opts=k8s_opts,
        )
        k8s.networking.v1.NetworkPolicy(
            name,
            metadata=meta,
            spec={
                "podSelector": {"matchLabels": APP},
                "policyTypes": ["Ingress"],
                # Clients reach the API port from anywhere the Service exposes it; nothing else is open.
                "ingress": [{"ports": [{"port": "http", "protocol": "TCP"}]}],
            },
            opts=k8s_opts,
        )
        self.service_name = name
        in_cluster = f"{'https' if tls else 'http'}://{name}.{args.namespace}.svc/v1"
        self.url = pulumi.Output.from_input(in_cluster)
        self.burst_url = self.url
        if spec.hub_url is not None:
            self.burst_url = pulumi.Output.from_input(spec.hub_url)
        elif lb is not None:
            # AWS: the internal NLB terminates TLS on 443; off AWS the private load balancer forwards its port.
            aws = args.service_annotations is None
            scheme, port = ("https", TLS_PORT) if aws else ("https" if tls else "http", spec.listen_port)
            # Straight from lb.status: Output.all would unwrap the typed ServiceStatus into plain dicts (its from_input
            # recurses into dicts), where _lb_url finds no load_balancer and every hub exported the in-cluster URL.
            self.burst_url = lb.status.apply(lambda status: _lb_url(status, in_cluster, scheme, port))
        self.register_outputs(
            {
                "service_name": self.service_name,
                "url": self.url,
                "burst_url": self.burst_url,
                **({"burst_api_key": self.burst_api_key} if self.burst_api_key is not None else {}),
            }
        )


def _validation_url(upstream: str) -> str:
    """What stands in for an upstream's URL that is not known yet when the config is validated."""
    return f"{'https' if upstream == HUB else 'http'}://validation.invalid/v1"


def _lb_url(status: Any, fallback: str, scheme: str, port: int) -> str:
    """The load balancer's ``/v1`` URL from the Service's status (Pulumi waits for it); ``fallback`` until known.
    The port is left out where it is the scheme's own."""
    ingress = (getattr(getattr(status, "load_balancer", None), "ingress", None) or []) if status else []
    for entry in ingress:
        host = getattr(entry, "hostname", None) or getattr(entry, "ip", None)
        if host:
            at = host if (scheme, port) in (("http", 80), ("https", 443)) else f"{host}:{port}"
            return f"{scheme}://{at}/v1"
    return fallback


TLS_PORT = 443
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
"""TLS 1.3 and 1.2 only (ELB's recommended policy for NLB TLS listeners)."""


def load_balancer_annotations(spec: GatewaySpec) -> dict[str, str]:
    """What the AWS Load Balancer Controller reads: an internal NLB to the pod IPs, TLS on 443 with the
    configured ACM certificate (LBC docs, "Service annotations": ssl-cert, ssl-ports, ssl-negotiation-policy)."""
    if spec.tls_certificate_arn is None:
        raise ValueError("gateway.tlsCertificateArn: required with loadBalancer (TLS on 443)")
    prefix = "service.beta.kubernetes.io/aws-load-balancer"
    return {
        f"{prefix}-type": "external",
        f"{prefix}-scheme": "internal",
        f"{prefix}-nlb-target-type": "ip",
        f"{prefix}-ssl-cert": spec.tls_certificate_arn,
        f"{prefix}-ssl-ports": "https",
        f"{prefix}-ssl-negotiation-policy": TLS_POLICY,
    }


KEYS_ANNOTATION = "inferstack.io/keys-sha256"
"""On the gateway's pod template: the digest of the keys file and the hub's key (``credentials_sha256``)."""


def credentials_sha256(keys_text: pulumi.Input[str], hub_key: StrInput | None) -> pulumi.Output[str]:
    """A digest of what the gateway reads once, at start, from Secrets: the keys file and the hub's key.

    The gateway builds its key table when it starts (``inferstack_gateway.auth.KeyTable``) and takes the hub's key from
    its environment. Kubernetes refreshes a mounted Secret's files in a running pod, never a variable set from a Secret
    (https://kubernetes.io/docs/concepts/configuration/secret/, "Mounted Secrets are updated automatically", "Using
    Secrets as environment variables"), and a new Secret alone leaves the Deployment's pod template as it was: a revoked
    API key kept working, and a rotated hub key left the gateway sending the old one. Its digest on the pod template
    rolls the pods instead. Not a secret: a SHA-256 over SHA-256 digests and a 48-character random key, from which
    neither is recovered."""
    parts = pulumi.Output.all(keys_text, hub_key if hub_key is not None else "")
    return pulumi.Output.unsecret(parts.apply(lambda texts: _sha256("\n".join(texts))))


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
