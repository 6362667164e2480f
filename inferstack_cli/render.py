"""Artifacts ``inferstack plan --render DIR`` writes, read back from the planned resources.

Nothing is rendered twice: node user data is decoded from the launch templates' inputs,
Kubernetes manifests are the typed resources' inputs, so what is written is exactly what
``pulumi up`` would send.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

from inferstack_cli.mocks import Registration

_K8S_SKIP = ("pulumi:providers:", "kubernetes:helm.sh/")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _manifest(resource: Registration) -> dict[str, Any] | None:
    inputs = resource.inputs
    if "apiVersion" not in inputs or "kind" not in inputs:
        return None
    ordered: dict[str, Any] = {k: inputs[k] for k in ("apiVersion", "kind", "metadata") if k in inputs}
    ordered.update({k: v for k, v in inputs.items() if k not in ordered})
    return ordered


def renders(resources: list[Registration]) -> dict[str, str]:
    """Relative path → file text for every rendered artifact in a plan."""
    files: dict[str, str] = {}
    for r in resources:
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate" and r.inputs.get("userData"):
            files[f"user-data/{_safe(r.name)}.mime"] = base64.b64decode(r.inputs["userData"]).decode()
        elif r.type.startswith("kubernetes:") and not r.type.startswith(_K8S_SKIP):
            manifest = _manifest(r)
            if manifest is None:
                continue
            for field in ("data", "stringData"):
                if manifest.get(field) == "[secret]":
                    # Secret values never leave the plan; keep the manifest's shape valid for review.
                    manifest[field] = {"REDACTED": "[secret]"}
            meta = manifest.get("metadata") or {}
            namespace = meta.get("namespace") or "_cluster"
            kind = str(manifest["kind"]).lower()
            files[f"manifests/{_safe(namespace)}/{kind}-{_safe(meta.get('name') or r.name)}.yaml"] = yaml.safe_dump(
                manifest, sort_keys=False
            )
            for key, text in (manifest.get("data") or {}).items() if manifest["kind"] == "ConfigMap" else ():
                if key.endswith(".pbtxt"):
                    files[f"triton/{_safe(meta.get('name') or r.name)}/{key.replace('__', '/')}"] = text
        elif r.type == "kubernetes:helm.sh/v3:Release":
            # By the release's name (`helm list`), not the Pulumi resource's (``<component>-<release>``).
            release = r.inputs.get("name")
            release = release if isinstance(release, str) and release != "[secret]" else r.name
            files[f"helm/{_safe(release)}.values.yaml"] = yaml.safe_dump(r.inputs.get("values") or {}, sort_keys=True)
    return files


def write(files: dict[str, str], directory: Path) -> list[Path]:
    written = []
    for relative, text in sorted(files.items()):
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
