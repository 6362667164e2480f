"""Observability: Prometheus + Grafana (kube-prometheus-stack), monitors, dashboards, alert rules, tracing.

Everything the dashboards and alerts read is scraped at 15 s or faster: serving pods at 5 s, so a
TTFT burn or a queue build-up shows within one evaluation window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field, model_validator

from components.cache.redis_cache import CacheEndpoint
from components.catalog.charts import CHARTS, PROMETHEUS_POD_LABELS, PROMETHEUS_PORT
from components.kube.budget import Demand, demand
from components.kube.helm import HELM_RELEASE_NAME_MAX, release
from components.kube.labels import SYSTEM_NODES
from components.kube.objects import (
    RESTRICTED_CONTAINER,
    check_name,
    custom_resource,
    namespace_peer,
    per_instance,
    restricted_pod,
)
from components.observability.alerting import ALERT_RECEIVERS_SECRET, AlertDestinations, alertmanager_config
from components.observability.alerts import ModelSlo, prometheus_rule
from components.observability.dashboards import DASHBOARD_METRICS, DASHBOARDS, dashboard_configmap
from components.observability.monitors import (
    REDIS_EXPORTER,
    engine_pod_monitor,
    gateway_service_monitor,
    redis_exporter_service_monitor,
)
from components.specs import Args, ComponentNamespace, ObservabilitySpec, RemoteWriteSpec, StrInput

REDIS_EXPORTER_UID = 59000
"""The user oliver006/redis_exporter's image runs as (its Dockerfile, ``USER 59000:59000``)."""
COLLECTOR_UID = 10001
"""The user the OpenTelemetry collector images run as (opentelemetry-collector-releases, ``USER_UID=10001``)."""


def restricted_chart_pod(uid: int) -> dict[str, Any]:
    """``podSecurityContext`` and ``securityContext`` values for a chart that leaves both empty (the Redis exporter's,
    the collector's): Pod Security "restricted" and a read-only root filesystem, as the kit's own pods. Neither
    process writes outside its volumes, and the monitoring namespace enforces nothing (its node exporter needs the
    host), so only these values hold them to it."""
    return {"podSecurityContext": restricted_pod(uid), "securityContext": dict(RESTRICTED_CONTAINER)}


OTLP_GRPC_PORT = 4317
OTLP_HTTP_PORT = 4318


FORWARDED_METRICS = (*DASHBOARD_METRICS, "ALERTS")
"""What a site forwards with ``remoteWrite.forward: dashboards``: the dashboards' series, and ``ALERTS`` (one series
per pending or firing alert, written by the site's own rule evaluation), so the hub lists what fires at every site."""
REMOTE_WRITE_SECRET = "inferstack-remote-write"
"""The Secret, in Prometheus's namespace, holding the remote-write credential (``remoteWrite.username`` and the
password, or the bearer token)."""
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_ADMIN_USER_KEY = "admin-user"
GRAFANA_ADMIN_PASSWORD_KEY = "admin-password"
PROMETHEUS_RESOURCES: dict[str, Any] = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
"""A cluster's Prometheus: tens of GPU nodes, 15 days."""
SMALL_SITE_PROMETHEUS_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "250m", "memory": "512Mi"},
    "limits": {"memory": "1536Mi"},
}
"""A site's Prometheus: one or two nodes, two days, everything forwarded to the hub."""
CONFIG_RELOADER_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "10m", "memory": "50Mi"},
    "limits": {"cpu": "10m", "memory": "50Mi"},
}
"""The config-reloader sidecar the operator adds to the Prometheus and Alertmanager pods (chart value
``prometheusOperator.prometheusConfigReloader.resources``, passed on as the operator's ``--config-reloader-*`` flags).
These are the operator's own defaults, written out so the render says what those pods request: the node budgets
count them."""
CONFIG_RELOADER_PORT = 8080
"""The config-reloader sidecar's web port on the Prometheus pod (kube-prometheus-stack 88.0.0
``prometheus.service.reloaderWebPort``, the Service's ``reloader-web``): the chart's Prometheus ServiceMonitor
scrapes it, and its ``configReloaders`` default rules alert on what it serves."""
PROMETHEUS_POLICY = "prometheus-ingress"
"""The NetworkPolicy guarding the hub's Prometheus pods (``prometheus_network_policy``)."""


def prometheus_network_policy(
    spec: ObservabilitySpec, namespace: str = "monitoring", readers: Sequence[str] = (CHARTS["keda"].namespace,)
) -> dict[str, Any] | None:
    """The NetworkPolicy in front of a hub's Prometheus pods (``PROMETHEUS_POD_LABELS``), or ``None`` without the
    remote-write receiver (``spec.remote_write_receiver``).

    The receiver takes ``POST /api/v1/write`` on the web port without authentication, and the hub's own alerts and
    KEDA triggers read series without ``inferstack_site``: any pod that reaches the port could write fake queue
    depth (scale-ups) or healthy series (silenced alerts). So the web port admits only the namespace itself
    (Grafana's datasource, Alertmanager, the operator, Prometheus's own self-scrape), ``readers`` (KEDA's operator,
    whose Prometheus scaler queries ``serverAddress``, the Prometheus Service) and ``spec.remote_write_sources``
    (the sites' networks as ``ipBlock``s, the ingress controller's namespace). The config-reloader's port stays
    open to the namespace, where Prometheus scrapes it. Egress is left alone (no ``Egress`` policy type):
    Prometheus scrapes every namespace and writes to Alertmanager."""
    if not spec.remote_write_receiver:
        return None

    def port(number: int) -> dict[str, Any]:
        return {"port": number, "protocol": "TCP"}

    sources = [
        {"ipBlock": {"cidr": s.cidr}} if s.cidr is not None else namespace_peer(str(s.namespace))
        for s in spec.remote_write_sources
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": PROMETHEUS_POLICY, "namespace": namespace},
        "spec": {
            "podSelector": {"matchLabels": dict(PROMETHEUS_POD_LABELS)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [namespace_peer(namespace)], "ports": [port(PROMETHEUS_PORT), port(CONFIG_RELOADER_PORT)]},
                {
                    "from": [*(namespace_peer(r) for r in readers if r != namespace), *sources],
                    "ports": [port(PROMETHEUS_PORT)],
                },
            ],
        },
    }


def prometheus_values(
    spec: ObservabilitySpec,
    node_selector: Mapping[str, str] = SYSTEM_NODES,
    storage_class: str | None = None,
    namespace: str = "monitoring",
    *,
    resources: dict[str, Any] | None = None,
    external_labels: dict[str, str] | None = None,
    control_plane_targets: bool = True,
    alerting: AlertDestinations | None = None,
) -> dict[str, Any]:
    """kube-prometheus-stack values (keys as in the chart's values.yaml at the pinned 88.0.0).

    ``external_labels`` mark every forwarded sample with where it came from (``prometheusSpec.externalLabels``);
    ``control_plane_targets=False`` drops the etcd/scheduler/controller-manager/kube-proxy scrapes, which find no
    pods on k3s (they run inside the k3s server process).
    """
    claim: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": f"{spec.storage_gib}Gi"}},
        **({"storageClassName": storage_class} if storage_class else {}),
    }
    interval = f"{spec.scrape_interval_s}s"
    prometheus: dict[str, Any] = {
        "retention": f"{spec.retention_days}d",
        "scrapeInterval": interval,
        "evaluationInterval": interval,
        "resources": resources or PROMETHEUS_RESOURCES,
        "nodeSelector": node_selector,
        "storageSpec": {"volumeClaimTemplate": {"spec": claim}},
    }
    if spec.retention_size_gib is not None:
        prometheus["retentionSize"] = f"{spec.retention_size_gib}GiB"
    if spec.remote_write is not None:
        prometheus["remoteWrite"] = [remote_write(spec.remote_write)]
    if spec.remote_write_receiver:
        # Prometheus's --web.enable-remote-write-receiver: what the sites' remoteWrite posts to (/api/v1/write).
        prometheus["enableRemoteWriteReceiver"] = True
    if external_labels:
        prometheus["externalLabels"] = dict(external_labels)
    values: dict[str, Any] = {
        "prometheus": {"prometheusSpec": prometheus},
        "grafana": {
            "nodeSelector": node_selector,
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
            # Never the chart's default admin password: a generated one from a Secret the kit writes (grafana
            # chart values admin.existingSecret / userKey / passwordKey).
            "admin": {
                "existingSecret": GRAFANA_ADMIN_SECRET,
                "userKey": GRAFANA_ADMIN_USER_KEY,
                "passwordKey": GRAFANA_ADMIN_PASSWORD_KEY,
            },
            # The kit's dashboards arrive as ConfigMaps labelled grafana_dashboard=1 in this namespace only: with
            # "ALL", anyone who may create a ConfigMap anywhere could inject a dashboard.
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": "grafana_dashboard",
                    "labelValue": "1",
                    "searchNamespace": namespace,
                }
            },
        },
        "alertmanager": {"alertmanagerSpec": {"nodeSelector": node_selector}},  # alerting: below
        "prometheusOperator": {
            "nodeSelector": node_selector,
            "prometheusConfigReloader": {"resources": CONFIG_RELOADER_RESOURCES},
        },
        "kube-state-metrics": {"nodeSelector": node_selector},
    }
    if alerting is not None:
        values["alertmanager"]["alertmanagerSpec"]["secrets"] = [ALERT_RECEIVERS_SECRET]
        values["alertmanager"]["config"] = alertmanager_config(alerting)
    if not control_plane_targets:
        for target in ("kubeEtcd", "kubeScheduler", "kubeControllerManager", "kubeProxy"):
            values[target] = {"enabled": False}
    return values


def collector_values(spec: ObservabilitySpec, node_selector: Mapping[str, str] = SYSTEM_NODES) -> dict[str, Any]:
    """An OTel collector receiving OTLP from vLLM (``--otlp-traces-endpoint``) and the gateway.

    Spans become RED metrics through the spanmetrics connector, exported to Prometheus; with
    ``tracesEndpoint`` set they are also forwarded to a tracing backend over OTLP.
    """
    exporters: dict[str, Any] = {"prometheus": {"endpoint": "0.0.0.0:8889"}}
    trace_exporters = ["spanmetrics"]
    if spec.traces_endpoint:
        exporters["otlp"] = {"endpoint": spec.traces_endpoint}
        trace_exporters.append("otlp")
    return {
        "mode": "deployment",
        "image": {"repository": "otel/opentelemetry-collector-contrib"},
        **restricted_chart_pod(COLLECTOR_UID),
        "nodeSelector": node_selector,
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        "ports": {"metrics": {"enabled": True, "containerPort": 8889, "servicePort": 8889, "protocol": "TCP"}},
        "serviceMonitor": {"enabled": True, "extraLabels": {"release": "kube-prometheus-stack"}},
        "config": {
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"0.0.0.0:{OTLP_GRPC_PORT}"},
                        "http": {"endpoint": f"0.0.0.0:{OTLP_HTTP_PORT}"},
                    }
                }
            },
            "connectors": {"spanmetrics": {}},
            "processors": {"batch": {}, "memory_limiter": {"check_interval": "1s", "limit_percentage": 80}},
            "exporters": exporters,
            "service": {
                "pipelines": {
                    "traces": {
                        "receivers": ["otlp"],
                        "processors": ["memory_limiter", "batch"],
                        "exporters": trace_exporters,
                    },
                    "metrics": {"receivers": ["spanmetrics"], "processors": ["batch"], "exporters": ["prometheus"]},
                }
            },
        },
    }


def observability_demand(spec: ObservabilitySpec, prometheus_resources: dict[str, Any] | None = None) -> list[Demand]:
    """The pods of ``Observability`` that request anything, read from the values it installs.

    The operator adds a config-reloader sidecar to the Prometheus and Alertmanager pods, with the resources the
    values pass it. The operator, kube-state-metrics, node exporter and the Redis exporter are left without requests
    by their values and charts (``tests/charts/``), and the scheduler counts them as nothing too."""
    values = prometheus_values(spec, resources=prometheus_resources)
    reloader = values["prometheusOperator"]["prometheusConfigReloader"]["resources"]
    prometheus = demand("prometheus", values["prometheus"]["prometheusSpec"]["resources"])
    return [
        Demand(prometheus.name, prometheus.per_pod + demand("config-reloader", reloader).per_pod, 1),
        demand("alertmanager", reloader),
        demand("grafana", values["grafana"]["resources"]),
        demand("opentelemetry-collector", collector_values(spec)["resources"]),
    ]


def otlp_endpoint() -> str:
    pin = CHARTS["opentelemetry-collector"]
    return f"http://{pin.name}.{pin.namespace}.svc:{OTLP_GRPC_PORT}"


def remote_write(spec: RemoteWriteSpec) -> dict[str, Any]:
    """One ``prometheusSpec.remoteWrite`` entry (prometheus-operator ``RemoteWriteSpec``): the receiver, its private CA
    (``tlsConfig.ca.configMap``) and its credential, read from the ``REMOTE_WRITE_SECRET`` the component writes
    (``basicAuth``, whose username and password are both Secret references, or ``authorization`` for a bearer
    token)."""
    target: dict[str, Any] = {"url": spec.url}
    if spec.username is not None:
        target["basicAuth"] = {
            "username": {"name": REMOTE_WRITE_SECRET, "key": "username"},
            "password": {"name": REMOTE_WRITE_SECRET, "key": "password"},
        }
    elif spec.bearer_token_secret is not None:
        target["authorization"] = {"type": "Bearer", "credentials": {"name": REMOTE_WRITE_SECRET, "key": "token"}}
    if spec.ca_config_map is not None:
        target["tlsConfig"] = {"ca": {"configMap": {"name": spec.ca_config_map, "key": spec.ca_key}}}
    if spec.forward == "dashboards":
        # Relabelling runs on each sample as it leaves (Prometheus remote_write write_relabel_configs); the regex
        # must match the whole name (Prometheus anchors it), so the alternatives are names and the user's patterns.
        forwarded = [*FORWARDED_METRICS, *spec.extra_metrics]
        target["writeRelabelConfigs"] = [{"sourceLabels": ["__name__"], "regex": "|".join(forwarded), "action": "keep"}]
    return target


class ObservabilityArgs(Args):
    spec: ObservabilitySpec = ObservabilitySpec()
    provider: k8s.Provider
    """Required: the cluster's explicit Kubernetes provider; nothing uses an ambient kubeconfig."""
    models: list[ModelSlo] = Field(default_factory=list)
    """The served models' SLOs (``model_slos``): their alerts, and where their engines and gateways are scraped."""
    serving_namespace: ComponentNamespace
    """Where the models' pods run. Every ``models[].namespace`` is scraped too: one Observability per cluster watches
    models in several namespaces."""
    gateway_namespace: ComponentNamespace
    """Where the gateway runs: its metrics are scraped and its alerts read there. Every ``models[].gateway_namespace``
    is scraped too (a second gateway in its own namespace)."""
    gateway_name: str = "gateway"
    """The ``Gateway`` component's name, which is its Deployment's: the gateway alerts watch that Deployment."""
    extra_gateways: list[tuple[str, str]] = Field(default_factory=list)
    """(namespace, name) of each further ``Gateway`` the cluster runs (one per namespace, e.g. one per team): each is
    scraped and has its own gateway alerts, as the first. A gateway not listed here nor as ``gateway_namespace`` has
    no alert that fires when it is down."""
    gateway_tls: bool = False
    """The gateway serves HTTPS only (``gateway.tlsSecret``): its metrics are scraped over TLS."""
    cache_url: StrInput | None = None
    """``redis://`` or ``rediss://`` address the Redis exporter scrapes."""
    cache_secret: tuple[str, str] | None = None
    """(Secret name, key) with the cache password; the cache writes that Secret into the monitoring namespace."""
    system_node_selector: dict[str, str] = Field(default_factory=lambda: dict(SYSTEM_NODES))
    """Where Prometheus, Grafana, the operator and the collector run (the cloud's system pool by default)."""
    storage_class: str | None = None
    """Prometheus's claim; ``None``: the cluster's default StorageClass."""
    cache_user: str | None = None
    """The exporter's own cache user (ElastiCache RBAC); ``None``: the default user."""
    extra_caches: dict[str, CacheEndpoint] = Field(default_factory=dict)
    """Name → endpoint (``RedisCache(...).endpoint``) of each further cache (one per team): each gets its own Redis
    exporter (release ``prometheus-redis-exporter-<name>``, reading the password from the cache's Secret in the
    monitoring namespace) and its own cache alerts, labelled ``cache: <name>``."""
    prometheus_resources: dict[str, Any] | None = None
    """``None``: ``PROMETHEUS_RESOURCES`` (a cluster); a small site passes ``SMALL_SITE_PROMETHEUS_RESOURCES``."""
    external_labels: dict[str, str] = Field(default_factory=dict)
    control_plane_targets: bool = True
    """``False`` on k3s, whose control plane runs inside one process (nothing to scrape as pods)."""
    alerting: AlertDestinations | None = None
    """Where Alertmanager sends alerts; ``None``: the chart's ``null`` receiver (they notify no one)."""
    remote_write_credential: StrInput | None = None
    """The password or bearer token ``spec.remoteWrite`` names (``passwordSecret``, ``bearerTokenSecret``)."""

    @model_validator(mode="after")
    def _cache_names(self) -> ObservabilityArgs:
        room = HELM_RELEASE_NAME_MAX - len(REDIS_EXPORTER) - 1
        for name in self.extra_caches:
            check_name(f"extra_caches[{name!r}]", name)
            if len(name) > room:
                raise ValueError(
                    f"extra_caches[{name!r}]: at most {room} characters (its exporter's Helm release, "
                    f"{REDIS_EXPORTER}-<name>, may have {HELM_RELEASE_NAME_MAX})"
                )
        if self.extra_caches and self.cache_url is None:
            raise ValueError("extra_caches: set cache_url (the stack's own cache) first, or name that cache here too")
        return self

    @model_validator(mode="after")
    def _one_gateway_per_namespace(self) -> ObservabilityArgs:
        seen = {self.gateway_namespace: f"gateway_namespace ({self.gateway_name})"}
        for i, (namespace, name) in enumerate(self.extra_gateways):
            check_name(f"extra_gateways[{i}] namespace", namespace)
            check_name(f"extra_gateways[{i}] name", name)
            if namespace in seen:
                raise ValueError(
                    f"extra_gateways[{i}]: {namespace!r} already has a gateway ({seen[namespace]}); one Gateway per "
                    "namespace (two there select each other's pods)"
                )
            seen[namespace] = f"extra_gateways[{i}] ({name})"
        return self

    @model_validator(mode="after")
    def _credential_as_named(self) -> ObservabilityArgs:
        target = self.spec.remote_write
        wanted = target is not None and target.credential_secret() is not None
        if wanted != (self.remote_write_credential is not None):
            raise ValueError(
                "remote_write_credential: pass the password or token exactly when spec.remote_write names one "
                "(password_secret or bearer_token_secret)"
            )
        return self


class Observability(pulumi.ComponentResource):
    prometheus_url: str
    otlp_endpoint: str
    stack_release: k8s.helm.v3.Release
    grafana_admin_password: pulumi.Output[str]
    """Grafana's generated admin password, as a Pulumi secret."""

    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("inferstack:observability:Observability", name, None, opts)
        self._instance = name
        provider = args.provider
        namespace = CHARTS["kube-prometheus-stack"].namespace
        password = random.RandomPassword(
            f"{name}-grafana-admin", length=32, special=False, opts=pulumi.ResourceOptions(parent=self)
        )
        admin = k8s.core.v1.Secret(
            f"{name}-grafana-admin",
            metadata={"name": GRAFANA_ADMIN_SECRET, "namespace": namespace},
            string_data={GRAFANA_ADMIN_USER_KEY: "admin", GRAFANA_ADMIN_PASSWORD_KEY: password.result},
            opts=pulumi.ResourceOptions(parent=self, provider=provider),
        )
        self.grafana_admin_password = pulumi.Output.secret(password.result)
        before_release: list[pulumi.Resource] = [admin]

        def secret(suffix: str, secret_name: str, data: dict[str, Any]) -> None:
            """A Secret the chart's values reference, in its namespace, written before the chart."""
            before_release.append(
                k8s.core.v1.Secret(
                    f"{name}-{suffix}",
                    metadata={"name": secret_name, "namespace": namespace},
                    string_data=data,
                    opts=pulumi.ResourceOptions(parent=self, provider=provider),
                )
            )

        target = args.spec.remote_write
        if target is not None and args.remote_write_credential is not None:
            credential = pulumi.Output.secret(args.remote_write_credential)
            data = {"username": target.username, "password": credential} if target.username else {"token": credential}
            secret("remote-write", REMOTE_WRITE_SECRET, data)
        if args.alerting is not None:
            receivers = {k: pulumi.Output.secret(v) for k, v in args.alerting.secrets().items()}
            secret("alert-receivers", ALERT_RECEIVERS_SECRET, receivers)
        guard = prometheus_network_policy(args.spec, namespace)
        if guard is not None:
            # Before the chart: the receiver never runs open, not even for the first rollout.
            before_release.append(
                k8s.networking.v1.NetworkPolicy(
                    f"{name}-prometheus",
                    metadata=guard["metadata"],
                    spec=guard["spec"],
                    opts=pulumi.ResourceOptions(parent=self, provider=provider),
                )
            )
        self.stack_release = release(
            "kube-prometheus-stack",
            prometheus_values(
                args.spec,
                args.system_node_selector,
                args.storage_class,
                namespace,
                resources=args.prometheus_resources,
                external_labels=args.external_labels,
                control_plane_targets=args.control_plane_targets,
                alerting=args.alerting,
            ),
            parent=self,
            component=name,
            provider=provider,
            depends_on=before_release,
        )
        after = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[self.stack_release])
        release(
            "opentelemetry-collector",
            collector_values(args.spec, args.system_node_selector),
            parent=self,
            component=name,
            provider=provider,
        )

        # One exporter per cache: (alert name, exporter release, address, password Secret, user).
        caches: list[tuple[str | None, str, StrInput, tuple[str, str] | None, str | None]] = []
        if args.cache_url is not None:
            caches.append((None, REDIS_EXPORTER, args.cache_url, args.cache_secret, args.cache_user))
        for extra_name, cache in sorted(args.extra_caches.items()):
            exporter_release = f"{REDIS_EXPORTER}-{extra_name}"
            caches.append((extra_name, exporter_release, cache.url(), cache.exporter_secret(), cache.exporter_username))
        for cache_name, exporter_release, url, cache_secret, cache_user in caches:
            exporter: dict[str, Any] = {
                "redisAddress": url,
                "nodeSelector": args.system_node_selector,
                "serviceMonitor": {"enabled": False},
                **restricted_chart_pod(REDIS_EXPORTER_UID),
            }
            if cache_secret:
                exporter["auth"] = {
                    "enabled": True,
                    "secret": {"name": cache_secret[0], "key": cache_secret[1]},
                    **({"redisUser": cache_user} if cache_user else {}),
                }
            release(
                REDIS_EXPORTER, exporter, parent=self, component=name, provider=provider, release_name=exporter_release
            )
            monitor = "inferstack-cache" if cache_name is None else f"inferstack-cache-{cache_name}"
            self._custom(redis_exporter_service_monitor(namespace, release=exporter_release, name=monitor), after)

        # vLLM and Triton always (their monitors predate the llama.cpp engine); llama.cpp where a model runs on it.
        engines = ["vllm", "triton", *(["llamacpp"] if any(m.engine == "llamacpp" for m in args.models) else [])]
        # A monitor selects pods in its own namespace only: one per namespace a model or a gateway runs in, or the
        # models elsewhere had alert rules over series nobody scraped, which never fire.
        for serving in sorted({args.serving_namespace, *(m.namespace for m in args.models)}):
            for engine in engines:
                self._custom(engine_pod_monitor(engine, serving), after)  # type: ignore[arg-type]
        named = [(args.gateway_namespace, args.gateway_name), *args.extra_gateways]
        gateways = {ns for ns, _ in named} | {ns for m in args.models for ns in m.gateway_namespaces}
        for gateway in sorted(gateways):
            # The gateway serves /metrics on its API port.
            self._custom(gateway_service_monitor(gateway, port="http", tls=args.gateway_tls), after)
        self._custom(
            prometheus_rule(
                args.models,
                namespace=namespace,
                gateways=named,
                caches=[(cache_name, exporter_release) for cache_name, exporter_release, *_ in caches],
                receives_sites=args.spec.remote_write_receiver,
            ),
            after,
        )
        for build in DASHBOARDS:
            manifest = dashboard_configmap(build(), namespace)
            dashboard, dashboard_opts = per_instance(name, manifest["metadata"]["name"], after)
            k8s.core.v1.ConfigMap(dashboard, metadata=manifest["metadata"], data=manifest["data"], opts=dashboard_opts)
        self.prometheus_url = (
            f"http://{CHARTS['kube-prometheus-stack'].name}-prometheus.{namespace}.svc:{PROMETHEUS_PORT}"
        )
        self.otlp_endpoint = otlp_endpoint()
        self.register_outputs(
            {
                "prometheus_url": self.prometheus_url,
                "otlp_endpoint": self.otlp_endpoint,
                "grafana_admin_password": self.grafana_admin_password,
            }
        )

    def _custom(self, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> k8s.apiextensions.CustomResource:
        meta = manifest["metadata"]
        name, opts = per_instance(
            self._instance, f"{manifest['kind'].lower()}-{meta['namespace']}-{meta['name']}", opts
        )
        return custom_resource(name, manifest, opts)
