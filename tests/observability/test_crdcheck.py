"""The CRD checker itself: it must accept what the API server accepts and reject what it would not."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from crdcheck import CRD_DIR, load_crds, main, to_json_schema, validate


def _scaled_object() -> dict[str, Any]:
    # Hand-written from KEDA's docs (keda.sh/docs "Scaling Deployments"), independent of the kit's builder.
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "demo", "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"name": "demo"},
            "minReplicaCount": 1,
            "maxReplicaCount": 3,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {"serverAddress": "http://prometheus:9090", "query": "sum(up)", "threshold": "5"},
                }
            ],
        },
    }


def _rule(**rule: Any) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "demo"},
        "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", **rule}]}]},
    }


def test_known_good_object_passes() -> None:
    # GIVEN a ScaledObject written the way KEDA documents it
    # WHEN it is validated
    # THEN there is no error
    assert validate(_scaled_object()) == []


def test_misspelled_field_fails_with_a_hint() -> None:
    # GIVEN a known-good object with one field misspelled (the API server would silently drop it)
    obj = _scaled_object()
    obj["spec"]["maxReplicaCont"] = obj["spec"].pop("maxReplicaCount")

    # WHEN it is validated strictly
    errors = validate(obj)

    # THEN the error names the field, where it is and what was meant
    assert errors == ["spec: unknown field 'maxReplicaCont' (did you mean 'maxReplicaCount'?)"]


def test_misspelled_field_passes_when_not_strict() -> None:
    # GIVEN the same misspelling
    obj = _scaled_object()
    obj["spec"]["maxReplicaCont"] = 3

    # WHEN it is validated the way the API server does without strict field validation
    # THEN it is accepted: strict mode is what catches it
    assert validate(obj, strict=False) == []


def test_wrong_type_fails() -> None:
    # GIVEN trigger metadata, which KEDA types as a map of strings, holding a number
    obj = _scaled_object()
    obj["spec"]["triggers"][0]["metadata"]["threshold"] = 5

    # WHEN / THEN the path of the bad value is reported
    assert validate(obj) == ["spec.triggers[0].metadata.threshold: 5 is not of type 'string'"]


@pytest.mark.parametrize("expr", ["sum(up) > 0", 1])
def test_int_or_string_accepts_either(expr: str | int) -> None:
    # GIVEN PrometheusRule's expr, declared x-kubernetes-int-or-string
    # WHEN it holds a string or an integer
    # THEN both are valid
    assert validate(_rule(expr=expr)) == []


def test_int_or_string_rejects_other_types() -> None:
    # GIVEN the same field holding a list
    # WHEN / THEN it is rejected
    assert validate(_rule(expr=["sum(up)"])) != []


@pytest.mark.parametrize(("strategy", "valid"), [("WARN", True), ("abort", True), ("maybe", False)])
def test_go_case_insensitive_pattern(strategy: str, valid: bool) -> None:
    # GIVEN partial_response_strategy, whose Go pattern is ^(?i)(abort|warn)?$ (flags after the anchor)
    obj = _rule(expr="up")
    obj["spec"]["groups"][0]["partial_response_strategy"] = strategy

    # WHEN it is validated
    # THEN the flag applies as in Go: any case of abort/warn, nothing else
    assert (validate(obj) == []) is valid


def test_unserved_version_fails() -> None:
    # GIVEN an apiVersion the CRD does not serve
    obj = _scaled_object()
    obj["apiVersion"] = "keda.sh/v1beta1"

    # WHEN / THEN the served versions are named
    assert validate(obj) == ["apiVersion: keda.sh/v1beta1 is not served by the ScaledObject CRD; served: v1alpha1"]


def test_unknown_kind_fails() -> None:
    # GIVEN a kind no vendored CRD defines
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}

    # WHEN / THEN it is an error, not a silent pass
    assert validate(obj)[0].startswith("no vendored CRD for Widget in group 'example.com'")


def test_missing_name_fails() -> None:
    # GIVEN an object without metadata.name
    obj = _scaled_object()
    del obj["metadata"]["name"]

    # WHEN / THEN the API server would refuse it, and so does the checker
    assert validate(obj) == ["metadata.name: missing"]


def test_schema_defaults_are_applied_before_required_checks() -> None:
    # GIVEN a NodePool without spec.disruption, whose schema default carries the required consolidateAfter
    pool: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "p"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "p"},
                    "requirements": [],
                }
            }
        },
    }
    # WHEN it is validated
    # THEN it passes, as it does on the API server
    assert validate(pool) == []

    # AND an explicit empty disruption (no default for its own fields) fails on the required field
    broken = copy.deepcopy(pool)
    broken["spec"]["disruption"] = {}
    assert validate(broken) == ["spec.disruption: 'consolidateAfter' is a required property"]


def test_nullable_accepts_null() -> None:
    # GIVEN a structural schema with a nullable string (none of the vendored CRDs uses nullable)
    schema = to_json_schema({"type": "object", "properties": {"s": {"type": "string", "nullable": True}}}, strict=True)
    # WHEN / THEN null and a string are valid, a number is not
    validator = jsonschema.Draft7Validator(schema)
    assert validator.is_valid({"s": None})
    assert validator.is_valid({"s": "x"})
    assert not validator.is_valid({"s": 1})


def test_preserve_unknown_fields_keeps_object_open() -> None:
    # GIVEN two objects with the same properties, one marked x-kubernetes-preserve-unknown-fields
    closed = to_json_schema({"type": "object", "properties": {"a": {"type": "string"}}}, strict=True)
    open_ = to_json_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": True},
        strict=True,
    )
    # WHEN an extra field is present
    # THEN only the closed one rejects it
    assert not jsonschema.Draft7Validator(closed).is_valid({"a": "x", "b": 1})
    assert jsonschema.Draft7Validator(open_).is_valid({"a": "x", "b": 1})


def test_every_vendored_crd_loads() -> None:
    # GIVEN the vendored CRD folder
    # WHEN it is loaded
    kinds = {kind for (_, kind) in load_crds(CRD_DIR)}

    # THEN every kind the kit renders, or writes the spec of, has a schema
    assert kinds == {
        "NodePool",
        "EC2NodeClass",
        "ScaledObject",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Prometheus",  # not rendered: kube-prometheus-stack renders it from the values' prometheusSpec
        "LeaderWorkerSet",
        "NicClusterPolicy",
        "IPAddressPool",
        "L2Advertisement",
        "ClusterPolicy",
        "IPoIBNetwork",
        "IPPool",
    }


def test_command_line_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a YAML file with one valid and one invalid object
    good, bad = _scaled_object(), _scaled_object()
    bad["spec"]["minReplicaCount"] = -1
    bad["metadata"]["name"] = "bad"
    path = tmp_path / "objs.json"
    path.write_text(json.dumps([good, bad]))

    # WHEN the checker runs as a command
    code = main([str(path)])

    # THEN it fails and reports the bad object only
    out = capsys.readouterr().out
    assert code == 1
    assert "ScaledObject/demo: ok" in out
    assert "spec.minReplicaCount: -1 is less than the minimum of 0" in out
