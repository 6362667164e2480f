"""Remote write to a hub or a hosted receiver: its private CA and its credential, never in the chart's values."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest
from pydantic import ValidationError

from components.observability.dashboards import DASHBOARD_METRICS
from components.observability.observability import ObservabilityArgs, prometheus_values, remote_write
from components.specs import ObservabilitySpec, RemoteWriteSpec
from crdcheck import validate
from helpers import config_errors, helm_release, only, plan_with
from inferstack_cli.plan import Plan

URL = "https://prometheus.dc1.example.com/api/v1/write"
SECRET = {"name": "inferstack-remote-write"}


@pytest.mark.parametrize(
    ("spec", "rendered"),
    [
        ({"url": URL, "forward": "all"}, {"url": URL}),
        (
            {"url": URL, "username": "site-7", "passwordSecret": "remoteWritePassword", "forward": "all"},
            {
                "url": URL,
                "basicAuth": {"username": {**SECRET, "key": "username"}, "password": {**SECRET, "key": "password"}},
            },
        ),
        (
            {"url": URL, "bearerTokenSecret": "remoteWriteToken", "caConfigMap": "hub-ca", "forward": "all"},
            {
                "url": URL,
                "authorization": {"type": "Bearer", "credentials": {**SECRET, "key": "token"}},
                "tlsConfig": {"ca": {"configMap": {"name": "hub-ca", "key": "ca.crt"}}},
            },
        ),
    ],
    ids=["plain", "basic-auth", "bearer-and-private-ca"],
)
def test_the_credential_and_ca_are_references(spec: dict[str, Any], rendered: dict[str, Any]) -> None:
    # GIVEN a remoteWrite section
    # WHEN it is rendered as a prometheus-operator RemoteWriteSpec (basicAuth's username and password are both
    # SecretKeySelectors; authorization.credentials one too; tlsConfig.ca a Secret or ConfigMap reference)
    # THEN the credential is read from the kit's Secret and the CA from the user's ConfigMap
    assert remote_write(RemoteWriteSpec.model_validate(spec)) == rendered


@pytest.mark.parametrize(
    ("remote", "fragment"),
    [
        ({"url": "http://p/api/v1/write", "bearerTokenSecret": "t"}, "over plain HTTP"),
        ({"url": "http://p/api/v1/write", "caConfigMap": "hub-ca"}, "over plain HTTP"),
        ({"url": URL, "username": "u"}, "both username and passwordSecret"),
        ({"url": URL, "forward": "all", "extraMetrics": ["node_load1"]}, "extraMetrics with forward: all"),
        ({"url": URL, "extraMetrics": ["node_(load1"]}, "is not a metric name or an RE2 regular expression"),
        # Python's re accepts a lookahead; Go's RE2, which Prometheus compiles the regex with, does not
        ({"url": URL, "extraMetrics": ["node_(?!cpu).*"]}, "invalid perl operator"),
        ({"url": URL, "forward": "some"}, "forward"),
        ({"url": URL, "passwordSecret": "p"}, "both username and passwordSecret"),
        (
            {"url": URL, "username": "u", "passwordSecret": "p", "bearerTokenSecret": "t"},
            "both basic auth and a bearer",
        ),
    ],
)
def test_a_credential_that_would_leak_or_not_authenticate_is_one_line(remote: dict[str, Any], fragment: str) -> None:
    # GIVEN the edge stack with a remoteWrite that sends a credential in clear, or half of one, or two, or says what
    # to forward in a way that cannot be
    def edit(env: dict[str, Any]) -> None:
        env["observability"]["remoteWrite"] = remote

    # WHEN / THEN it is refused in one line naming the section
    (line,) = config_errors(edit, stack="edge")
    assert "observability.remoteWrite" in line and fragment in line


def test_a_site_authenticates_to_its_receiver_with_a_secret(tmp_path: Path) -> None:
    # GIVEN the edge site forwarding to a receiver that wants basic auth, behind a private CA
    def edit(env: dict[str, Any]) -> None:
        env["observability"]["remoteWrite"] = {
            "url": URL,
            "username": "site-7",
            "passwordSecret": "remoteWritePassword",
            "caConfigMap": "hub-ca",
        }

    # WHEN it is planned (offline, the password is a marked stand-in)
    plan = plan_with(tmp_path, "edge", edit)
    # THEN the credential lands, secret, in Prometheus's namespace, and the chart's values only reference it
    secret = only(plan.resources, "kubernetes:core/v1:Secret", "observability-remote-write")
    assert secret.inputs["metadata"] == {"name": "inferstack-remote-write", "namespace": "monitoring"}
    assert secret.inputs["stringData"] == "[secret]"
    release = helm_release(plan.resources, "kube-prometheus-stack")
    (target,) = release.inputs["values"]["prometheus"]["prometheusSpec"]["remoteWrite"]
    assert target["basicAuth"]["password"] == {**SECRET, "key": "password"}
    assert target["tlsConfig"]["ca"]["configMap"]["name"] == "hub-ca"
    assert "[secret]" not in json.dumps(release.inputs["values"])


def test_the_component_wants_the_credential_its_spec_names() -> None:
    # GIVEN a spec naming a bearer token
    spec = ObservabilitySpec(remote_write=RemoteWriteSpec(url=URL, bearer_token_secret="t"))
    # (a provider instance without a Pulumi engine: the check is on the arguments, before any resource exists)
    provider = k8s.Provider.__new__(k8s.Provider)
    args: dict[str, Any] = {"spec": spec, "provider": provider, "serving_namespace": "s", "gateway_namespace": "g"}
    # WHEN the component is given none, or one for a spec that names none
    # THEN it is refused by name, rather than a Prometheus that never authenticates
    with pytest.raises(ValidationError, match="remote_write_credential"):
        ObservabilityArgs(**args)
    with pytest.raises(ValidationError, match="remote_write_credential"):
        ObservabilityArgs(**{**args, "spec": ObservabilitySpec()}, remote_write_credential="t")
    assert prometheus_values(spec)["prometheus"]["prometheusSpec"]["remoteWrite"][0]["authorization"]["type"] == (
        "Bearer"
    )


def _forwarded(target: dict[str, Any], name: str) -> bool:
    """Whether a sample named ``name`` leaves through ``target``, as Prometheus applies its write relabelling: each
    ``keep`` regex anchored at both ends, against the metric name."""
    return all(
        re.fullmatch(f"(?:{step['regex']})", name) is not None
        for step in target.get("writeRelabelConfigs", [])
        if step["action"] == "keep" and step["sourceLabels"] == ["__name__"]
    )


def test_a_site_forwards_what_the_hubs_dashboards_draw_and_its_alerts_by_default() -> None:
    # GIVEN a remoteWrite that says nothing of what to forward
    target = remote_write(RemoteWriteSpec(url=URL))
    # WHEN / THEN every series a dashboard reads leaves, and the site's alerts, and so do the user's extra names
    assert target["writeRelabelConfigs"][0]["action"] == "keep"
    assert [m for m in (*DASHBOARD_METRICS, "ALERTS") if not _forwarded(target, m)] == []
    # but not the node, kubelet and cAdvisor series no dashboard draws (most of a site's samples)
    for name in ("node_cpu_seconds_total", "container_memory_working_set_bytes", "kubelet_running_pods", "up"):
        assert not _forwarded(target, name), name
    # a pattern matches whole names only (Prometheus anchors relabel regexes), and names a user adds leave too
    assert not _forwarded(target, "redis_up_total")
    extra = remote_write(RemoteWriteSpec(url=URL, extra_metrics=["node_load1", "node_network_.*"]))
    assert all(_forwarded(extra, n) for n in ("node_load1", "node_network_receive_bytes_total", "redis_up"))
    assert not _forwarded(extra, "node_load15")
    # and forward: all sends everything
    assert _forwarded(remote_write(RemoteWriteSpec(url=URL, forward="all")), "node_cpu_seconds_total")


def test_the_bundled_edge_site_forwards_only_what_the_hub_draws(tmp_path: Path) -> None:
    # GIVEN the bundled edge stack, which forwards to the on-prem hub
    release = helm_release(plan_with(tmp_path, "edge", lambda env: None).resources, "kube-prometheus-stack")
    # WHEN its Prometheus's remote write is read
    (target,) = release.inputs["values"]["prometheus"]["prometheusSpec"]["remoteWrite"]
    # THEN it keeps the dashboards' series and the alerts, nothing more
    assert target["writeRelabelConfigs"] == remote_write(RemoteWriteSpec(url=URL))["writeRelabelConfigs"]


@pytest.mark.parametrize("stack", ["dev", "prod", "onprem", "edge"])
def test_each_bundled_prometheus_spec_is_one_the_operator_accepts(
    stack: str, plan_of: Callable[[str], Plan], tmp_path: Path
) -> None:
    # GIVEN a bundled stack's kube-prometheus-stack values (the edge site's with a credential and a private CA, so
    # that every remoteWrite field the kit writes is there)
    def authenticated(env: dict[str, Any]) -> None:
        env["observability"]["remoteWrite"].update(
            username="site-7", passwordSecret="remoteWritePassword", caConfigMap="hub-ca", extraMetrics=["node_load1"]
        )

    plan = plan_with(tmp_path, stack, authenticated) if stack == "edge" else plan_of(stack)
    release = helm_release(plan.resources, "kube-prometheus-stack")
    # WHEN its prometheusSpec becomes the Prometheus resource the chart renders (templates/prometheus/prometheus.yaml
    # passes each key through by name, except storageSpec, which it writes as the resource's storage)
    spec = dict(release.inputs["values"]["prometheus"]["prometheusSpec"])
    spec["storage"] = spec.pop("storageSpec")
    prometheus = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "kube-prometheus-stack-prometheus", "namespace": "monitoring"},
        "spec": spec,
    }
    # THEN the upstream CRD (prometheus-operator v0.93.0) accepts it, strictly: a misspelled field would be pruned
    assert validate(prometheus) == []
