"""Every Helm chart the kit installs, pinned in one table.

Components install these through ``kubernetes.helm.v3.Release`` (so chart, version and values stay
visible in the plan) and read name, repository, chart, version and namespace from here; ``inferstack
plan`` prints the table. Nothing else in the kit names a chart version.

Where a chart ships a CRD that the kit renders objects for, the pin matches the CRD schemas vendored in
``tests/crds/`` (see ``tests/crds/NOTICE.md``): Karpenter v1.14.1, KEDA v2.20.2, prometheus-operator
v0.93.0, LeaderWorkerSet v0.10.0, GPU Operator v26.7.0, Network Operator v26.4.1. Bumping one of those
charts means re-vendoring its CRDs in the same change, so the custom resources are checked against the
schema that will serve them.

Every chart's default ``values.yaml`` at its pinned version is vendored in ``tests/charts/`` (see
``tests/charts/NOTICE.md``), and ``tests/unit/test_helm_values.py`` checks every Helm value the kit sets
against it: Helm ignores unknown keys, so a misspelled one would leave the chart's default in force.
Bump a chart and its values file together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final


@dataclass(frozen=True)
class ChartPin:
    """One pinned Helm chart."""

    name: str
    """Release name, also the key in ``CHARTS``."""
    repo: str
    """Classic Helm repository URL, or an ``oci://`` registry prefix."""
    chart: str
    version: str
    """Chart version exactly as the repository publishes it (some carry a leading ``v``)."""
    namespace: str

    @property
    def is_oci(self) -> bool:
        return self.repo.startswith("oci://")

    @property
    def chart_ref(self) -> str:
        """What ``helm.v3.Release(chart=...)`` takes.

        OCI charts are addressed by their full reference and take no repository option; classic charts
        are addressed by name, with ``repo`` passed as ``repository_opts.repo``.
        """
        return f"{self.repo}/{self.chart}" if self.is_oci else self.chart


def _pin(name: str, repo: str, chart: str, version: str, namespace: str) -> tuple[str, ChartPin]:
    return name, ChartPin(name, repo, chart, version, namespace)


CHARTS: Mapping[str, ChartPin] = MappingProxyType(
    dict(
        (
            # Node autoscaling (cloud tier). Chart version == controller version; v1.14.1 is the newest
            # release (github.com/aws/karpenter-provider-aws/releases/tag/v1.14.1) and the tag the vendored
            # NodePool/EC2NodeClass CRDs come from. Namespace per the Karpenter getting-started guide
            # (karpenter.sh/docs/getting-started/getting-started-with-karpenter: KARPENTER_NAMESPACE=kube-system).
            _pin("karpenter", "oci://public.ecr.aws/karpenter", "karpenter", "1.14.1", "kube-system"),
            # Pod autoscaling on queue depth. "Chart: v2.20.2 | App: v2.20.2"
            # (github.com/kedacore/charts/releases/tag/v2.20.2); CRDs vendored from kedacore/keda v2.20.2.
            _pin("keda", "https://kedacore.github.io/charts", "keda", "2.20.2", "keda"),
            # Prometheus, Alertmanager, Grafana, kube-state-metrics. 88.0.0 is the release that bumped
            # prometheus-operator to v0.93.0 (github.com/prometheus-community/helm-charts/releases/tag/
            # kube-prometheus-stack-88.0.0), the version of the vendored ServiceMonitor/PodMonitor/
            # PrometheusRule CRDs; 91.0.0 moved on to v0.94.0.
            _pin(
                "kube-prometheus-stack",
                "https://prometheus-community.github.io/helm-charts",
                "kube-prometheus-stack",
                "88.0.0",
                "monitoring",
            ),
            # GPU metrics (DCGM_FI_DEV_*). Pinned to 4.8.4 on purpose: 4.9.0 renames the default DCGM
            # fields and changes units (utilization to a 0-1 ratio, framebuffer to bytes), which would break
            # the dashboards and alerts that read DCGM_FI_DEV_GPU_UTIL / DCGM_FI_DEV_FB_USED
            # (github.com/NVIDIA/dcgm-exporter/releases/tag/4.9.0, "read the upgrade checklist ... before
            # upgrading from 4.8.4"). The chart version tracks the exporter version.
            _pin(
                "dcgm-exporter",
                "https://nvidia.github.io/dcgm-exporter/helm-charts",
                "dcgm-exporter",
                "4.8.4",
                "monitoring",
            ),
            # redis_up & co. for the cache (exporter oliver006/redis_exporter v1.91.1):
            # github.com/prometheus-community/helm-charts/releases/tag/prometheus-redis-exporter-6.31.1.
            _pin(
                "prometheus-redis-exporter",
                "https://prometheus-community.github.io/helm-charts",
                "prometheus-redis-exporter",
                "6.31.1",
                "monitoring",
            ),
            # NLBs for the gateway's LoadBalancer Service. Chart 1.14.1 / controller v2.14.1: the release the EKS
            # user guide installs ("Install AWS Load Balancer Controller with Helm"); Chart.yaml at tag v2.14.1 of
            # kubernetes-sigs/aws-load-balancer-controller. Namespace as in that guide (kube-system).
            _pin(
                "aws-load-balancer-controller",
                "https://aws.github.io/eks-charts",
                "aws-load-balancer-controller",
                "1.14.1",
                "kube-system",
            ),
            # Advertises vpc.amazonaws.com/efa; schedule on EFA nodes only. The chart version carries a
            # leading "v" and runs ahead of the image: Chart.yaml version v0.5.29 / appVersion v0.5.20
            # (aws/eks-charts PR #1338, stable/aws-efa-k8s-device-plugin/Chart.yaml).
            _pin(
                "aws-efa-k8s-device-plugin",
                "https://aws.github.io/eks-charts",
                "aws-efa-k8s-device-plugin",
                "v0.5.29",
                "kube-system",
            ),
            # nvidia.com/gpu on EKS, where the AL2023 NVIDIA AMI already ships driver and toolkit.
            # nvidia-device-plugin-0.19.2.tgz is attached to github.com/NVIDIA/k8s-device-plugin release
            # v0.19.2; namespace as in the project README's helm install example.
            _pin(
                "nvidia-device-plugin",
                "https://nvidia.github.io/k8s-device-plugin",
                "nvidia-device-plugin",
                "0.19.2",
                "nvidia-device-plugin",
            ),
            # Bare metal (on-prem) installs driver + toolkit + device plugin through the operator. NVIDIA's
            # chart versions carry a leading "v"; 26.7.x is the supported line
            # (docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/platform-support.html) and v26.7.0
            # is the tag the vendored ClusterPolicy CRD comes from. Repository per the install guide
            # (helm repo add nvidia https://helm.ngc.nvidia.com/nvidia).
            _pin("gpu-operator", "https://helm.ngc.nvidia.com/nvidia", "gpu-operator", "v26.7.0", "gpu-operator"),
            # RDMA/InfiniBand for multi-node on-prem groups: OFED driver, RDMA device plugins, secondary
            # networks. v26.4.1 is the newest stable tag (v26.7.0 is at rc.2) of github.com/Mellanox/
            # network-operator; its deployment/network-operator/Chart.yaml at that tag publishes the chart
            # as "26.4.1", without the "v" (NVIDIA's guides write --version v26.4.1, which Helm resolves to
            # the same chart). Since v24.10 the chart no longer creates the NicClusterPolicy: the kit
            # creates it as a custom resource. Namespace per NVIDIA's quick start (docs.nvidia.com/
            # networking/display/kubernetes2570/quick-start/quick-start-k8s.html: -n nvidia-network-operator).
            _pin(
                "network-operator",
                "https://helm.ngc.nvidia.com/nvidia",
                "network-operator",
                "26.4.1",
                "nvidia-network-operator",
            ),
            # Local NVMe as PersistentVolumes on bare metal (one PV per mount under hostDir) with a
            # WaitForFirstConsumer StorageClass. Chart local-static-provisioner 2.9.0, the newest tag
            # (local-static-provisioner-2.9.0) of github.com/kubernetes-sigs/sig-storage-local-static-
            # provisioner, helm/provisioner/Chart.yaml; repository per helm/README.md ("helm repo add").
            _pin(
                "local-static-provisioner",
                "https://kubernetes-sigs.github.io/sig-storage-local-static-provisioner",
                "local-static-provisioner",
                "2.9.0",
                "local-static-provisioner",
            ),
            # LoadBalancer Services on bare metal and k3s (in place of klipper-lb). Chart version ==
            # release without "v": charts/metallb/Chart.yaml at tag v0.16.1, the newest release of
            # github.com/metallb/metallb; repository per website/content/installation/_index.md. The
            # IPAddressPool/L2Advertisement objects live in the namespace the speaker watches, the
            # release's namespace: metallb-system, as in config/manifests/metallb-native.yaml at that tag.
            _pin("metallb", "https://metallb.github.io/metallb", "metallb", "0.16.1", "metallb-system"),
            # Multi-node model groups. Published as an OCI chart whose version is the release without "v"
            # (lws.sigs.k8s.io/docs/installation: helm install lws oci://registry.k8s.io/lws/charts/lws
            # --version=...); 0.10.0 matches the vendored LeaderWorkerSet CRD (kubernetes-sigs/lws v0.10.0).
            _pin("lws", "oci://registry.k8s.io/lws/charts", "lws", "0.10.0", "lws-system"),
            # Resource metrics for the gateway's CPU-based HPA. metrics-server-helm-chart-3.13.0
            # (github.com/kubernetes-sigs/metrics-server/releases), app v0.8.0.
            _pin(
                "metrics-server",
                "https://kubernetes-sigs.github.io/metrics-server/",
                "metrics-server",
                "3.13.0",
                "kube-system",
            ),
            # OTLP receiver for vLLM (--otlp-traces-endpoint) and the gateway. Chart 0.177.0 / collector
            # 0.163.2 (github.com/open-telemetry/opentelemetry-helm-charts/releases/tag/
            # opentelemetry-collector-0.177.0).
            _pin(
                "opentelemetry-collector",
                "https://open-telemetry.github.io/opentelemetry-helm-charts",
                "opentelemetry-collector",
                "0.177.0",
                "monitoring",
            ),
        )
    )
)


def chart(name: str) -> ChartPin:
    """The pin for ``name``; ``KeyError`` names the known charts."""
    try:
        return CHARTS[name]
    except KeyError:
        raise KeyError(f"unknown chart {name!r}; pinned charts: {', '.join(CHARTS)}") from None


PROMETHEUS_PORT = 9090
"""Port of the Prometheus service that kube-prometheus-stack creates."""


def prometheus_url() -> str:
    """In-cluster URL of the Prometheus that kube-prometheus-stack installs (KEDA's ``serverAddress``).

    The chart names the service ``<fullname>-prometheus``; with the release named after the chart, the
    fullname is the release name (charts/kube-prometheus-stack/templates/_helpers.tpl, "fullname").
    """
    pin = CHARTS["kube-prometheus-stack"]
    return f"http://{pin.name}-prometheus.{pin.namespace}.svc:{PROMETHEUS_PORT}"


def prometheus_selector_labels() -> dict[str, str]:
    """Labels a ServiceMonitor/PodMonitor/PrometheusRule needs for kube-prometheus-stack to load it.

    By default the chart's Prometheus selects only monitors and rules labelled ``release: <release
    name>`` (values ``prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues: true`` and the
    matching ``podMonitor``/``rule`` keys).
    """
    return {"release": CHARTS["kube-prometheus-stack"].name}


PROMETHEUS_POD_LABELS: Final = {"app.kubernetes.io/name": "prometheus"}
"""On every Prometheus server pod the operator of kube-prometheus-stack runs: one of its StatefulSet's pod selector
labels, which the operator never changes (prometheus-operator ``pkg/prometheus/server/statefulset.go``,
``podSelectorLabels``). A NetworkPolicy peer with it admits Prometheus and not the rest of ``monitoring`` (Grafana,
Alertmanager, the collector, the exporters)."""
REDIS_EXPORTER_POD_LABELS: Final = {"app.kubernetes.io/name": "prometheus-redis-exporter"}
"""On the prometheus-redis-exporter chart's pods, whatever the release (``<chart>.selectorLabels`` in its
templates/_helpers.tpl at 6.29.0; ``app.kubernetes.io/instance`` is the release): every cache's exporter."""
