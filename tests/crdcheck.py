"""Strict validation of custom resources against the vendored upstream CRD schemas (``tests/crds``).

A CRD's ``openAPIV3Schema`` is Kubernetes' structural-schema dialect of OpenAPI v3, not plain JSON Schema.
``to_json_schema`` translates the parts that matter into JSON Schema draft 7 for ``jsonschema``:

- ``x-kubernetes-int-or-string: true`` -> an integer or a string;
- ``nullable: true`` -> ``null`` is also accepted;
- ``x-kubernetes-preserve-unknown-fields: true`` -> the object stays open;
- strict mode: an object schema with ``properties``, no ``additionalProperties`` and no preserve-unknown-fields
  is closed, so a misspelled field is an error (the API server would silently prune it);
- Go regular expressions with an inline flag after the start (``^(?i)...``) are rewritten for Python's ``re``.

Before validating, defaults are applied and nulls of non-nullable fields dropped, as the API server does
(Kubernetes docs, "Defaulting and Nullable"). Not checked: CEL ``x-kubernetes-validations``, ``format``,
list-type uniqueness.

Usage from tests: ``validate(obj)`` returns a list of error strings (empty when valid). From a shell:
``python tests/crdcheck.py FILE...`` (YAML or JSON, multi-document) exits 1 on any error.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(__file__).resolve().parent / "crds"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INLINE_FLAGS = re.compile(r"\(\?([aiLmsux]+)\)")


@dataclass(frozen=True)
class CrdVersion:
    """One served version of one CRD."""

    group: str
    version: str
    kind: str
    openapi: Mapping[str, Any]
    """The ``openAPIV3Schema`` as upstream wrote it (defaults are read from here)."""


def _go_pattern(pattern: str) -> str:
    # Go's RE2 accepts "^(?i)(abort|warn)?$"; Python 3.11 rejects global flags that are not at the start.
    flags = "".join(_INLINE_FLAGS.findall(pattern))
    if not flags:
        return pattern
    return f"(?{''.join(sorted(set(flags)))})" + _INLINE_FLAGS.sub("", pattern)


def to_json_schema(node: Any, *, strict: bool) -> Any:
    """Translate one structural-schema node (and its children) into JSON Schema draft 7."""
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("nullable", "description", "format"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub, strict=strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = to_json_schema(value, strict=strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub, strict=strict) for sub in value]
        elif key == "pattern":
            out[key] = _go_pattern(value)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            # OpenAPI 3.0 booleans qualify minimum/maximum; draft 7 wants the bound itself.
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if value and bound in node:
                out[key] = node[bound]
        else:
            out[key] = copy.deepcopy(value)
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        bound = "minimum" if key == "exclusiveMinimum" else "maximum"
        if node.get(key) is True:
            out.pop(bound, None)

    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        either = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
        if "anyOf" in out:
            out["allOf"] = [*out.get("allOf", []), either]
        else:
            out |= either
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    open_object = node.get("x-kubernetes-preserve-unknown-fields") is True
    if strict and "properties" in node and "additionalProperties" not in node and not open_object:
        out["additionalProperties"] = False
    return out


def apply_defaults(obj: Any, schema: Mapping[str, Any]) -> Any:
    """A copy of ``obj`` with schema defaults filled in and nulls of non-nullable fields dropped."""
    if isinstance(obj, dict):
        props: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        result: dict[str, Any] = {}
        for key, value in obj.items():
            sub = props.get(key) or (extra if isinstance(extra, Mapping) else None)
            if value is None and not (sub or {}).get("nullable"):
                continue
            result[key] = apply_defaults(value, sub) if sub else value
        for key, sub in props.items():
            if key not in result and "default" in sub:
                result[key] = apply_defaults(copy.deepcopy(sub["default"]), sub)
        return result
    if isinstance(obj, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(item, schema["items"]) for item in obj]
    return obj


@cache
def load_crds(directory: Path = CRD_DIR) -> dict[tuple[str, str], dict[str, CrdVersion]]:
    """``{(group, kind): {version: CrdVersion}}`` for every served version of every CRD in ``directory``."""
    crds: dict[tuple[str, str], dict[str, CrdVersion]] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            kind = spec["names"]["kind"]
            for version in spec["versions"]:
                if version.get("served", True):
                    crds.setdefault((spec["group"], kind), {})[version["name"]] = CrdVersion(
                        spec["group"], version["name"], kind, version["schema"]["openAPIV3Schema"]
                    )
    return crds


@cache
def _validator(group: str, version: str, kind: str, strict: bool) -> jsonschema.Draft7Validator:
    crd = load_crds()[(group, kind)][version]
    schema = to_json_schema(crd.openapi, strict=strict)
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _path(parts: Iterable[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<root>"


def _describe(error: jsonschema.ValidationError) -> str:
    message = error.message
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = list(error.schema.get("properties", {}))
        hints = []
        for field in sorted(set(error.instance) - set(known)):
            close = difflib.get_close_matches(field, known, n=1)
            hints.append(f"unknown field {field!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        message = "; ".join(hints) or message
    return f"{_path(error.absolute_path)}: {message}"


def _metadata_errors(obj: Mapping[str, Any]) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ["metadata: missing"]
    errors = []
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        errors.append("metadata.name: missing")
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name.rstrip("-")):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    for key, value in (meta.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(f"metadata.labels.{key}: {value!r} is not a valid label value")
    return errors


def validate(obj: Mapping[str, Any], *, strict: bool = True) -> list[str]:
    """Error strings for ``obj`` against its CRD; empty when it is valid."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion and kind: both required"]
    group, _, version = api_version.rpartition("/")
    versions = load_crds().get((group, kind))
    if versions is None:
        known = ", ".join(f"{k} ({g})" for g, k in sorted(load_crds()))
        return [f"no vendored CRD for {kind} in group {group!r}; known: {known}"]
    if version not in versions:
        return [f"apiVersion: {api_version} is not served by the {kind} CRD; served: {', '.join(sorted(versions))}"]
    defaulted = apply_defaults(copy.deepcopy(dict(obj)), versions[version].openapi)
    validator = _validator(group, version, kind, strict)
    errors = [_describe(e) for e in sorted(validator.iter_errors(defaulted), key=lambda e: list(map(str, e.path)))]
    return _metadata_errors(obj) + errors


def _documents(paths: Iterable[str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        docs = json.loads(text) if path.endswith(".json") else list(yaml.safe_load_all(text))
        for doc in docs if isinstance(docs, list) else [docs]:
            if isinstance(doc, Mapping) and doc.get("kind", "").endswith("List") and "items" in doc:
                yield from ((path, item) for item in doc["items"])
            elif isinstance(doc, Mapping):
                yield path, doc


def main(argv: list[str]) -> int:
    """Validate every custom resource in the given files; objects of kinds without a CRD here are skipped."""
    failed = False
    for path, doc in _documents(argv):
        group = str(doc.get("apiVersion", "")).rpartition("/")[0]
        name = f"{path}: {doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"
        if (group, doc.get("kind")) not in load_crds():
            print(f"{name}: skipped (no CRD)")
            continue
        errors = validate(doc)
        failed |= bool(errors)
        print(f"{name}: " + ("ok" if not errors else "\n  " + "\n  ".join(errors)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
