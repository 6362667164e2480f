"""stack-workload-selectors-disjoint: no workload's selector matches another's pods in its namespace."""

from __future__ import annotations

from typing import Any

from policy_builders import deployment, k8s, violations

RULE = "stack-workload-selectors-disjoint"


def messages(plan: list[dict[str, Any]]) -> list[str]:
    return [v["message"] for v in violations(plan, RULE)]


def test_one_label_for_two_deployments_is_found_from_both_sides() -> None:
    a, b = deployment("gw-a", labels={"app": "gw"}), deployment("gw-b", labels={"app": "gw"})
    found = messages([a, b])
    assert len(found) == 2
    assert found[0].startswith("Deployment apps/gw-a's selector (app=gw) also matches the pods of Deployment apps/gw-b")
    assert "own namespace" in found[0]


def test_a_broader_selector_is_found_from_its_side_only() -> None:
    # gw-a selects app=gw; gw-b's pods carry app=gw and a label of their own, and gw-b selects on both.
    a = deployment("gw-a", labels={"app": "gw"})
    b = deployment("gw-b", labels={"app": "gw", "instance": "b"})
    (found,) = messages([a, b])
    assert found.startswith("Deployment apps/gw-a's selector")


def test_match_expressions_count() -> None:
    a = deployment("a", labels={"app": "a"})
    a["inputs"]["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]}
    b = deployment("b", labels={"app": "b"})
    (found,) = messages([a, b])
    assert "(its matchExpressions)" in found
    a["inputs"]["spec"]["selector"]["matchExpressions"][0]["operator"] = "NotIn"
    assert messages([a, b]) == []


def test_other_namespaces_kinds_and_own_pods_are_fine() -> None:
    a = deployment("gw", labels={"app": "gw"}, ns="team-a")
    b = deployment("gw", labels={"app": "gw"}, ns="team-b")
    b["urn"] += "-b"
    statefulset = k8s(
        "apps/v1",
        "StatefulSet",
        "cache",
        {"selector": {"matchLabels": {"app": "cache"}}, "template": {"metadata": {"labels": {"app": "cache"}}}},
    )
    # a Job's selector is the controller's own (controller-uid); Jobs are not compared
    job = k8s("batch/v1", "Job", "load", {"template": {"metadata": {"labels": {"app": "gw"}}}}, ns="team-a")
    assert messages([a, b, statefulset, job]) == []


def test_a_statefulset_and_a_deployment_overlapping() -> None:
    sts = k8s(
        "apps/v1",
        "StatefulSet",
        "cache",
        {"selector": {"matchLabels": {"tier": "cache"}}, "template": {"metadata": {"labels": {"tier": "cache"}}}},
    )
    dep = deployment("cache-exporter", labels={"tier": "cache", "app": "exporter"})
    (found,) = messages([sts, dep])
    assert found.startswith("StatefulSet apps/cache's selector (tier=cache) also matches the pods of Deployment")
