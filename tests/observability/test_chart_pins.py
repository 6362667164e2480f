"""The chart table: one pin per chart, installable references, CRDs vendored from the pinned release."""

from __future__ import annotations

import re

import pytest

from components.catalog.charts import CHARTS, chart, prometheus_selector_labels, prometheus_url
from crdcheck import CRD_DIR

REQUIRED = (
    "karpenter",
    "keda",
    "kube-prometheus-stack",
    "dcgm-exporter",
    "prometheus-redis-exporter",
    "aws-efa-k8s-device-plugin",
    "nvidia-device-plugin",
    "gpu-operator",
    "lws",
    "metrics-server",
    "opentelemetry-collector",
    # On-prem and edge tiers (issue 10/11), and the cloud tier's load balancers.
    "network-operator",
    "local-static-provisioner",
    "metallb",
    "aws-load-balancer-controller",
)
_VERSION = re.compile(r"^v?\d+\.\d+\.\d+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_every_chart_the_kit_installs_is_pinned() -> None:
    # GIVEN the charts issue 4 installs
    # WHEN / THEN each has a pin (and nothing else hides in the table)
    assert set(CHARTS) == set(REQUIRED)


@pytest.mark.parametrize("name", REQUIRED)
def test_pin_is_an_exact_version_in_a_valid_namespace(name: str) -> None:
    # GIVEN a pin
    pin = chart(name)
    # WHEN / THEN the version is exact (no ranges: the plan must show what installs) and the namespace valid
    assert _VERSION.match(pin.version), pin.version
    assert _DNS_LABEL.match(pin.namespace), pin.namespace


def test_oci_charts_are_referenced_in_full() -> None:
    # GIVEN the OCI-hosted Karpenter chart
    # WHEN its Helm reference is read
    # THEN it is the full oci:// reference Helm pulls, with no separate repository
    assert chart("karpenter").chart_ref == "oci://public.ecr.aws/karpenter/karpenter"
    assert chart("karpenter").is_oci


def test_classic_charts_are_referenced_by_name() -> None:
    # GIVEN a chart from a classic Helm repository
    # WHEN / THEN it is referenced by name, the repository travelling separately
    assert (chart("keda").chart_ref, chart("keda").is_oci) == ("keda", False)


def test_unknown_chart_names_the_known_ones() -> None:
    # GIVEN a chart that is not pinned
    # WHEN / THEN the error lists the pinned ones
    with pytest.raises(KeyError, match="pinned charts: karpenter"):
        chart("cert-manager")


@pytest.mark.parametrize(("name", "crd_row"), [("karpenter", "karpenter.sh_nodepools.yaml"), ("keda", "keda.sh_")])
def test_vendored_crds_come_from_the_pinned_release(name: str, crd_row: str) -> None:
    # GIVEN a chart whose version is its controller's release, and the vendored CRDs' NOTICE
    notice = (CRD_DIR / "NOTICE.md").read_text()
    row = next(line for line in notice.splitlines() if line.startswith(f"| `{crd_row}"))
    # WHEN the CRD's release tag is read
    tag = re.search(r"\| v(\d+\.\d+\.\d+) \(", row)
    # THEN it is the pinned version: bumping the chart without re-vendoring its CRDs fails here
    assert tag is not None
    assert tag.group(1) == chart(name).version


def test_prometheus_url_follows_the_release() -> None:
    # GIVEN kube-prometheus-stack's release name and namespace
    # WHEN / THEN KEDA's server address is the chart's Prometheus service
    assert prometheus_url() == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert prometheus_selector_labels() == {"release": "kube-prometheus-stack"}
