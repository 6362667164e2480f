"""Remote write to a hub or a hosted receiver: its private CA and its credential, never in the chart's values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s
import pytest
from pydantic import ValidationError

from components.observability.observability import ObservabilityArgs, prometheus_values, remote_write
from components.specs import ObservabilitySpec, RemoteWriteSpec
from helpers import config_errors, only, plan_with

URL = "https://prometheus.dc1.example.com/api/v1/write"
SECRET = {"name": "inferstack-remote-write"}


@pytest.mark.parametrize(
    ("spec", "rendered"),
    [
        ({"url": URL}, {"url": URL}),
        (
            {"url": URL, "username": "site-7", "passwordSecret": "remoteWritePassword"},
            {
                "url": URL,
                "basicAuth": {"username": {**SECRET, "key": "username"}, "password": {**SECRET, "key": "password"}},
            },
        ),
        (
            {"url": URL, "bearerTokenSecret": "remoteWriteToken", "caConfigMap": "hub-ca"},
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
        ({"url": URL, "passwordSecret": "p"}, "both username and passwordSecret"),
        (
            {"url": URL, "username": "u", "passwordSecret": "p", "bearerTokenSecret": "t"},
            "both basic auth and a bearer",
        ),
    ],
)
def test_a_credential_that_would_leak_or_not_authenticate_is_one_line(remote: dict[str, Any], fragment: str) -> None:
    # GIVEN the edge stack with a remoteWrite that sends a credential in clear, or half of one, or two
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
    release = only(plan.resources, "kubernetes:helm.sh/v3:Release", "kube-prometheus-stack")
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
