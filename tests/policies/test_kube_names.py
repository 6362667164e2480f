"""Kubernetes names the API server would refuse, and objects two resources would both create, found at plan time."""

from __future__ import annotations

from typing import Any

import pytest

from policy_builders import deployment, k8s, release, res, service, violations

NAMES = "k8s-names-valid"
UNIQUE = "stack-kube-objects-unique"


def messages(plan: list[dict[str, Any]], rule: str) -> list[str]:
    return [v["message"] for v in violations(plan, rule)]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (deployment("Llama_8B"), "metadata.name 'Llama_8B' is not a DNS-1123 subdomain"),
        (deployment("llama-"), "is not a DNS-1123 subdomain"),
        (deployment("l" * 254), "is 254 characters, over the 253 allowed"),
        (service("8b-web"), "metadata.name '8b-web' is not a DNS-1035 label"),
        (service("8b-web"), "(for example 'svc-8b-web')"),
        (service("web.internal"), "is not a DNS-1035 label"),
        (k8s("core/v1", "Namespace", "team.a", ns=None), "metadata.name 'team.a' is not a DNS-1123 label"),
        # a label has no dots: the suggested name has none either
        (k8s("core/v1", "Namespace", "team.a", ns=None), "(for example 'team-a')"),
        (k8s("apps/v1", "StatefulSet", "cache.primary", {}), "(for example 'cache-primary')"),
        (deployment("web", ns="team.a"), "use 'team-a'"),
        (k8s("apps/v1", "StatefulSet", "s" * 53, {}), "is 53 characters, over the 52 allowed"),
        (k8s("batch/v1", "CronJob", "c" * 53, {}), "is 53 characters, over the 52 allowed"),
        (k8s("batch/v1", "Job", "j" * 64, {}), "is 64 characters, over the 63 allowed"),
        (k8s("batch/v1", "Job", "Fetch", {}), "metadata.name 'Fetch' is not a DNS-1123 subdomain"),
        # an Indexed Job's pods are <name>-<index>, a DNS label
        (
            k8s("batch/v1", "Job", "model.fetch", {"completionMode": "Indexed", "completions": 4}),
            "'model.fetch-3' is not a DNS-1123 label",
        ),
        (
            k8s("batch/v1", "Job", "j" * 62, {"completionMode": "Indexed", "completions": 11}),
            "is 65 characters, over the 63 allowed",
        ),
        (k8s("monitoring.coreos.com/v1", "ServiceMonitor", "Llama", {}), "metadata.name 'Llama' is not a DNS-1123"),
        (k8s("rbac.authorization.k8s.io/v1", "Role", "a/b", ns="apps"), "may not be '.' or '..' or contain '/'"),
        (deployment("web", ns="Team_A"), "metadata.namespace 'Team_A' is not a DNS-1123 label"),
        (deployment("web", labels={"app": "x" * 64}), "spec.template.metadata.labels.app value 'xxx"),
        (deployment("web", ns="Team_A"), "use 'team-a'"),
        (deployment("web", labels={"bad key!": "x"}), "key 'bad key!' is not a qualified name"),
        (deployment("web", labels={"Example.COM/app": "x"}), "has the prefix 'Example.COM'"),
        (deployment("web", labels={"/app": "x"}), "key '/app' has an empty prefix"),
        (
            k8s("core/v1", "ConfigMap", "cfg", meta={"annotations": {"a/b/c": "x"}}),
            "metadata.annotations key 'a/b/c' has the prefix 'a/b'",
        ),
    ],
)
def test_a_name_the_api_server_refuses_is_named_with_its_rule(obj: dict[str, Any], expected: str) -> None:
    found = messages([obj], NAMES)
    assert any(expected in m for m in found), found
    assert all(m.startswith(obj["inputs"]["kind"] + " ") for m in found)  # each names the object it is about


@pytest.mark.parametrize(
    "obj",
    [
        deployment("llama-3.1-8b"),  # dots: a subdomain
        service("web"),
        k8s("core/v1", "Namespace", "team-a", ns=None),
        k8s("apps/v1", "StatefulSet", "s" * 52, {}),
        k8s("batch/v1", "CronJob", "c" * 52, {}),
        # a Job's or CronJob's name is a subdomain: dots are fine (its job-name label value may hold them)
        k8s("batch/v1", "Job", "llama-3.1-8b-fetch", {}),
        k8s("batch/v1", "CronJob", "cache.warmup", {}),
        k8s("batch/v1", "Job", "shards", {"completionMode": "Indexed", "completions": 4}),
        # annotation keys are checked lowercased (apimachinery ValidateAnnotations): case does not matter
        k8s("core/v1", "ConfigMap", "cfg", meta={"annotations": {"Example.COM/Owner": "x"}}),
        k8s("rbac.authorization.k8s.io/v1", "ClusterRole", "system:inferstack:reader", ns=None),
        deployment("web", labels={"app.kubernetes.io/name": "web", "inferstack.io/pool": ""}),
        k8s("core/v1", "ConfigMap", "cfg", meta={"annotations": {"inferstack.io/checksum": "x" * 300}}),
        # an alerting rule's labels are Prometheus labels, not Kubernetes ones
        k8s(
            "monitoring.coreos.com/v1",
            "PrometheusRule",
            "alerts",
            {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "1", "labels": {"summary key": "{{ x }}"}}]}]},
        ),
    ],
)
def test_valid_names_pass(obj: dict[str, Any]) -> None:
    assert messages([obj], NAMES) == []


def test_an_auto_named_object_is_checked_with_pulumis_suffix() -> None:
    # No metadata.name: Pulumi names the object "<resource name>-<8 hex digits>".
    bad = res("kubernetes:apps/v1:StatefulSet", "Cache_Primary", {"kind": "StatefulSet", "metadata": {}})
    (message,) = messages([bad], NAMES)
    assert "the resource name 'Cache_Primary' auto-names the object Cache_Primary-<8 random hex digits>" in message
    assert "'cache-primary'" in message
    long = res("kubernetes:apps/v1:StatefulSet", "c" * 44, {"kind": "StatefulSet", "metadata": {}})
    (message,) = messages([long], NAMES)
    assert "makes 53 with Pulumi's suffix, over the 52 allowed" in message
    fits = res("kubernetes:apps/v1:StatefulSet", "c" * 43, {"kind": "StatefulSet", "metadata": {}})
    assert messages([fits], NAMES) == []
    generated = res("kubernetes:batch/v1:Job", "Build", {"kind": "Job", "metadata": {"generateName": "build-"}})
    assert messages([generated], NAMES) == []


def test_a_helm_release_name_is_at_most_53_characters() -> None:
    bad = release("r", "kube-prometheus-stack", {})
    bad["inputs"]["name"] = "r" * 54
    (message,) = messages([bad], NAMES)
    assert "the release name" in message and "is 54 characters, over the 53 allowed" in message
    bad["inputs"]["name"] = "r" * 53
    assert messages([bad], NAMES) == []


def test_unknown_names_are_left_to_the_engine() -> None:
    # An Output not yet resolved reaches the rules as the engine's unknown sentinel.
    from policies.model import UNKNOWN

    unknown = deployment("web")
    unknown["inputs"]["metadata"]["name"] = UNKNOWN
    unknown["inputs"]["metadata"]["namespace"] = UNKNOWN
    assert messages([unknown], NAMES) == []
    assert messages([unknown, deployment("web")], UNIQUE) == []
    # one name in two namespaces not known until the update (two Namespace resources' outputs) may be two objects
    a, b = deployment("web"), deployment("web")
    b["name"], b["urn"] = "web-b", b["urn"] + "-b"
    for r in (a, b):
        r["inputs"]["metadata"]["namespace"] = UNKNOWN
    assert messages([a, b], UNIQUE) == []
    assert messages([a, b], "stack-workload-selectors-disjoint") == []
    x, y = release("x", "redis", {}), release("y", "redis", {})
    for r in (x, y):
        r["inputs"].update(name="cache", namespace=UNKNOWN)
    assert messages([x, y], UNIQUE) == []


def test_two_resources_creating_one_object_are_both_named() -> None:
    first, second = deployment("llama", ns="serving"), deployment("llama", ns="serving")
    second["name"], second["urn"] = "llama-canary", second["urn"] + "-canary"
    (message,) = messages([first, second], UNIQUE)
    assert message.startswith("Deployment serving/llama is created by 2 resources (llama, llama-canary)")


@pytest.mark.parametrize(
    "other",
    [
        deployment("llama", ns="canary"),  # another namespace
        service("llama", ns="serving"),  # another kind
        k8s("example.com/v1", "Deployment", "llama", {}, ns="serving"),  # another API group
    ],
)
def test_the_same_name_elsewhere_is_another_object(other: dict[str, Any]) -> None:
    other["urn"] += "-other"
    assert messages([deployment("llama", ns="serving"), other], UNIQUE) == []


def test_one_object_under_two_api_versions_or_a_patch() -> None:
    v1 = k8s("autoscaling/v2", "HorizontalPodAutoscaler", "gw", {}, ns="apps")
    v2 = k8s("autoscaling/v1", "HorizontalPodAutoscaler", "gw", {}, ns="apps")
    v2["urn"] += "-v1"
    assert len(messages([v1, v2], UNIQUE)) == 1
    patch = res("kubernetes:apps/v1:DeploymentPatch", "web-patch", {"kind": "Deployment", "metadata": {"name": "web",
                "namespace": "apps"}})  # fmt: skip
    assert messages([deployment("web"), patch], UNIQUE) == []


def test_two_helm_releases_of_one_name_in_one_namespace() -> None:
    a, b = release("a", "redis", {}), release("b", "redis", {})
    for r in (a, b):
        r["inputs"].update(name="cache", namespace="cache")
    assert "Helm release cache/cache is created by 2 resources (a, b)" in messages([a, b], UNIQUE)[0]
    b["inputs"]["namespace"] = "cache-b"
    assert messages([a, b], UNIQUE) == []


def test_one_name_under_two_providers_is_two_objects() -> None:
    """A provider is a cluster: one program may deploy the same namespace and model to two clusters (each component
    takes its cluster's provider), under `pulumi preview` (CrossGuard's own argument types) as in `inferstack plan`."""
    from pulumi_policy import StackValidationArgs
    from pulumi_policy.policy import (
        PolicyCustomTimeouts,
        PolicyProviderResource,
        PolicyResource,
        PolicyResourceOptions,
    )

    from policies.rules import POLICIES

    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    dc1, dc2 = (
        PolicyProviderResource("pulumi:providers:kubernetes", {}, f"urn:pulumi:test::inferstack::k8s::{n}", n)
        for n in ("dc1", "dc2")
    )
    first, second = deployment("llama", ns="serving"), deployment("llama", ns="serving")
    second["name"], second["urn"] = "llama-dc2", second["urn"] + "-dc2"

    def reported(providers: tuple[PolicyProviderResource, PolicyProviderResource], rule: str) -> list[str]:
        resources = [
            PolicyResource(r["type"], r["inputs"], r["urn"], r["name"], opts, p, None, [], {})
            for r, p in zip((first, second), providers, strict=True)
        ]
        policy = next(p for p in POLICIES if p.name == rule)
        out: list[str] = []
        policy.validate(StackValidationArgs(resources), lambda message, urn=None: out.append(message))
        return out

    for rule in (UNIQUE, "stack-workload-selectors-disjoint"):
        assert reported((dc1, dc2), rule) == [], rule
        assert reported((dc1, dc1), rule), rule  # one cluster: one object made twice, two selectors overlapping
    # offline, a plan-JSON resource carries its provider's URN too
    second["provider"] = dc2.urn
    assert messages([first, second], UNIQUE) == []


def _lws(name: str, ns: str = "serving", network: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 1, "leaderWorkerTemplate": {"size": 2}}
    if network is not None:
        spec["networkConfig"] = network
    lws = k8s("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, spec, ns=ns)
    lws["urn"] += "-lws"
    return lws


def test_a_service_named_after_a_leaderworkerset_takes_its_controllers_headless_service() -> None:
    # kubernetes-sigs/lws reconcileHeadlessServices: with subdomainPolicy Shared (the default) the controller creates
    # Service <lws> (clusterIP None) in the LeaderWorkerSet's namespace, the subdomain LWS_LEADER_ADDRESS resolves in.
    (message,) = messages([_lws("llama-405b"), service("llama-405b", ns="serving")], UNIQUE)
    assert message.startswith("Service serving/llama-405b (llama-405b) has the name of LeaderWorkerSet llama-405b")
    assert "name the Service otherwise (e.g. llama-405b-leader)" in message
    assert messages([_lws("llama-405b"), service("llama-405b-leader", ns="serving")], UNIQUE) == []
    assert messages([_lws("llama-405b"), service("llama-405b", ns="other")], UNIQUE) == []
    # UniquePerReplica: the controller names its Services after the groups' leaders instead.
    unique = _lws("llama-405b", network={"subdomainPolicy": "UniquePerReplica"})
    assert messages([unique, service("llama-405b", ns="serving")], UNIQUE) == []
