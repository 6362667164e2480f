"""Config sections of the edge tier: one k3s site, its node(s), its hub.

Pure pydantic models (no Pulumi, no AWS): ``stacks.environment`` validates a stack file into them and the edge
components read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator

from components.catalog.instances import EDGE_GPUS, GPUS, GpuSpec
from components.specs import (
    DnsLabel,
    GatewaySpec,
    LabelKey,
    LabelValue,
    ObservabilitySpec,
    SecretConfigName,
    Spec,
    config_error,
    did_you_mean,
)

K3S_STORAGE_CLASS = "local-path"
"""k3s's packaged local-path provisioner (``rancher.io/local-path``, WaitForFirstConsumer, the default class;
k3s ``manifests/local-storage.yaml``)."""
K3S_NVIDIA_RUNTIME_CLASS = "nvidia"
"""The RuntimeClass k3s ships for the NVIDIA container runtime it finds on a node (k3s ``manifests/runtimes.yaml``;
``pkg/agent/containerd/nvidia.go``)."""
K3S_TRAEFIK_PORTS = (80, 443)
"""Host ports a default k3s install gives its packaged Traefik: "The Traefik ingress controller deploys a
LoadBalancer Service that uses ports 80 and 443" and ServiceLB exposes them on every node, "meaning ports 80 and 443
will not be usable for other HostPort or NodePort pods" (https://docs.k3s.io/networking/networking-services, the
current k3s docs, which are not versioned)."""
K3S_NODE_PORTS = {6443: "the k3s API server", 10250: "the kubelet"}
"""Host ports every k3s server node holds whatever its flags ("Inbound Rules for K3s Nodes",
https://docs.k3s.io/installation/requirements#networking): unlike Traefik's, no install option frees them, so a
LoadBalancer port there stays pending for good."""
SITE_HOST_PORTS = {9100: "the node exporter the kit's kube-prometheus-stack runs on every node"}
"""Host ports the kit's own releases hold on every site node: kube-prometheus-stack's node exporter runs with
``hostNetwork: true`` on ``service.port`` 9100 (prometheus-node-exporter chart values.yaml; ``nodeExporter.enabled``
is on in kube-prometheus-stack 88.0.0 and the kit leaves it on), and a host-network pod's container port is a host
port, so ServiceLB's pod for a LoadBalancer port there is never scheduled."""
_HELD_PORTS = {
    **{port: f"a port k3s itself holds ({who})" for port, who in K3S_NODE_PORTS.items()},
    **{port: f"a port the kit holds on every node ({who})" for port, who in SITE_HOST_PORTS.items()},
}
"""Every host port a site's LoadBalancer can never take, and why."""
EDGE_GATEWAY_PORT = 8080
"""The gateway's site port: one Traefik does not hold (the gateway's own container port as well)."""
GPU_NODE_LABEL = "nvidia.com/gpu.present"
"""The label the NVIDIA device plugin chart's default affinity accepts to "force" a GPU node (values.yaml of
k8s-device-plugin v0.19.2); k3s runs no Node Feature Discovery, so the kit asks for it on GPU nodes."""


@dataclass(frozen=True)
class EdgeNodeShape:
    """An edge node as the serving layer reads a pool's ``spec`` (the fields InstanceSpec also has)."""

    instance_type: str
    gpu: GpuSpec | None
    gpu_count: int
    host_memory_gib: int
    cpu_cores: int
    memory_bandwidth_gb_s: float
    efa_interfaces: int = 0


class EdgeClusterSpec(Spec):
    """How the kit reaches the site's k3s. The kubeconfig is a Pulumi secret, never a file path."""

    kubeconfig_secret: SecretConfigName = "kubeconfig"
    """Name of the secret config value holding the kubeconfig (``pulumi config set --secret inferstack:<name>``)."""
    context: str | None = None
    """Context inside that kubeconfig; defaults to its ``current-context``."""


class EdgeNodeSpec(Spec):
    """One node of the site: what it has, so the plan can refuse a stack that does not fit it."""

    name: DnsLabel
    """Required: the models' ``pool`` reference."""
    cpu: int = Field(ge=2)
    """Required: CPU cores (``kubectl get node -o jsonpath='{.status.capacity.cpu}'``)."""
    memory_gib: int = Field(ge=4)
    """Required: RAM in GiB."""
    gpu: str | None = None
    """One of the edge GPUs (``L4``, ``RTX4000Ada``, ``RTX6000Ada``); empty: a CPU-only node."""
    gpu_count: int = Field(default=1, ge=1, le=4)
    """GPUs of ``gpu``'s kind in the node; only with ``gpu`` (a CPU node has none to count)."""
    memory_bandwidth_gb_s: float = Field(default=50, gt=0, le=2000)
    """CPU memory bandwidth, the decode floor of a CPU-served model. 50 GB/s is a dual-channel DDR5 box under load;
    measure yours (e.g. ``mbw``) and set it. At most 2,000 GB/s (a two-socket, 24-channel DDR5 server peaks near
    1,200): a larger number is MB/s, and would pass every CPU model's ITL target."""
    reserved_cpu: float = Field(default=1.0, ge=0)
    """Cores k3s itself takes (server, kubelet, containerd, CoreDNS, metrics-server, local-path, servicelb)."""
    reserved_memory_gib: float = Field(default=2.0, ge=0)
    """Memory k3s and the OS take."""
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """Labels that pick this node when the site has several, e.g. ``kubernetes.io/hostname: edge-1``."""

    @field_validator("gpu")
    @classmethod
    def _edge_gpu(cls, value: str | None) -> str | None:
        if value is None or value in EDGE_GPUS:
            return value
        known = value in GPUS
        raise config_error(
            "a data-centre GPU, not an edge one" if known else "not in the GPU catalog",
            allowed=", ".join(EDGE_GPUS),
            fix=(
                "a site with H100-class servers is an on-prem stack (tier: onprem)"
                if known
                else "use an edge GPU" + did_you_mean(value, list(EDGE_GPUS))
            ),
        )

    @property
    def instance_type(self) -> str:
        """What messages call the node."""
        gpus = f", {self.gpu_count}x {self.gpu}" if self.gpu else ", no GPU"
        return f"edge node {self.name!r} ({self.cpu} CPU, {self.memory_gib} GiB{gpus})"

    @property
    def spec(self) -> EdgeNodeShape:
        return EdgeNodeShape(
            self.instance_type,
            GPUS[self.gpu] if self.gpu else None,
            self.gpu_count if self.gpu else 0,
            self.memory_gib,
            self.cpu,
            self.memory_bandwidth_gb_s,
        )

    @property
    def node_labels(self) -> dict[str, str]:
        return dict(self.node_selector)

    @property
    def efa_enabled(self) -> bool:
        return False

    @property
    def min_size(self) -> int:
        return 1

    @property
    def max_size(self) -> int:
        return 1


class EdgeObservabilitySpec(ObservabilitySpec):
    """What a small site keeps: two days locally, the rest forwarded to the hub's Prometheus (``remoteWrite``)."""

    retention_days: int = Field(default=2, ge=1)
    retention_size_gib: int | None = Field(default=4, ge=1)
    storage_gib: int = Field(default=8, ge=2)


class EdgeGatewaySpec(GatewaySpec):
    """The gateway at a site: the same keys, with the load balancer's port off Traefik's."""

    load_balancer_port: int = Field(default=EDGE_GATEWAY_PORT, ge=1, le=65535)
    """With ``loadBalancer: internal``: the port clients reach the gateway on at the node's address. k3s's ServiceLB
    (klipper-lb) serves a LoadBalancer port by binding it as a host port on the nodes, and "If there are no free
    host ports, the service load balancer will stay in pending" (github.com/k3s-io/klipper-lb README, 1b4b8a2): with
    Traefik on (k3s's default, ``K3S_TRAEFIK_PORTS``) a Service on 80 never gets an address and ``pulumi up``
    waits for it. 80 works on a k3s started with ``--disable=traefik``; ``K3S_NODE_PORTS`` and ``SITE_HOST_PORTS``
    never do."""

    @field_validator("load_balancer_port")
    @classmethod
    def _not_k3s_own(cls, port: int) -> int:
        if port in _HELD_PORTS:
            raise config_error(
                _HELD_PORTS[port],
                allowed=f"a free host port: not {', '.join(map(str, sorted(_HELD_PORTS)))}, and not 80 or 443 while "
                "Traefik runs",
                fix=f"use {EDGE_GATEWAY_PORT} (the default)",
            )
        return port
