"""The pinned engine images' support table, and every rendered command checked against it (issue 12, 6-7)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from components.catalog import images
from components.catalog.engine_support import ENGINE_IMAGES, engine_arg_problems, missing_paths
from components.catalog.models import MODELS
from components.catalog.profiles import PROFILES
from components.serving._triton import MODEL_NAMES
from components.serving._vllm import vllm_args
from components.serving.inference_server import triton_repo_script
from helpers import bundled_stacks
from inferstack_cli import render
from inferstack_cli.plan import Plan

PlanOf = Callable[[str], Plan]


def containers(plan: Plan) -> list[dict[str, Any]]:
    out = []
    for path, text in render.renders(plan.resources).items():
        if not path.startswith("manifests/inferstack-serving/"):
            continue
        manifest = yaml.safe_load(text)
        if manifest["kind"] in ("Deployment", "Job"):
            pod = manifest["spec"]["template"]["spec"]
            out += pod.get("initContainers", []) + pod["containers"]
    return out


def test_every_pinned_engine_image_has_a_support_row() -> None:
    assert {images.VLLM, images.TRITON_TRTLLM, images.TRTLLM_BUILD} <= set(ENGINE_IMAGES)
    assert all(row.source for row in ENGINE_IMAGES.values())


def test_otlp_tracing_flag_is_refused_on_the_pinned_vllm_image() -> None:
    # GIVEN vLLM args with an OTLP endpoint WHEN checked against vllm/vllm-openai:v0.11.0
    args = vllm_args(
        MODELS["meta-llama/Llama-3.1-8B-Instruct"], "fp8", 1, 1, PROFILES["ultra-low-latency"],
        otlp_traces_endpoint="http://collector:4317",
    )  # fmt: skip
    (problem,) = engine_arg_problems(images.VLLM, args)
    # THEN the problem names the flag, the image and the cited reason
    assert problem.startswith(f"--otlp-traces-endpoint on {images.VLLM}")
    assert "#7679" in problem and "image layer" in problem


def test_unknown_flag_is_refused() -> None:
    assert engine_arg_problems(images.VLLM, ["--made-up-flag", "1"]) == [
        f"--made-up-flag on {images.VLLM}: not in the image's support table (components/catalog/engine_support.py)"
    ]


@pytest.mark.parametrize("stack", bundled_stacks())
def test_every_rendered_engine_command_is_supported_by_its_image(plan_of: PlanOf, stack: str) -> None:
    checked = 0
    for container in containers(plan_of(stack)):
        if container["image"] not in ENGINE_IMAGES:
            continue  # the kit's own loader image
        command = [str(a) for a in container.get("command", [])]
        if container["image"] == images.VLLM:
            assert engine_arg_problems(images.VLLM, command[2:]) == [], container["name"]
            assert "--otlp-traces-endpoint" not in command
            checked += 1
        if container["image"] in (images.LLAMACPP_CPU, images.LLAMACPP_CUDA):
            # llama-server takes its flags as the image entrypoint's arguments
            assert engine_arg_problems(container["image"], container["args"]) == [], container["name"]
            checked += 1
    assert checked


def test_triton_init_copies_only_the_rendered_models(plan_of: PlanOf) -> None:
    script = triton_repo_script()
    assert "tensorrt_llm_bls" not in script
    assert f"{images.TRITON_MODEL_TEMPLATES}/." not in script  # never the whole folder
    for name in MODEL_NAMES:
        assert f"{images.TRITON_MODEL_TEMPLATES}/{name}" in script
    inits = [c for c in containers(plan_of("prod")) if c["name"] == "model-repository"]
    assert inits and all(c["command"][-1] == script for c in inits)


def test_every_path_the_engine_build_runs_is_in_its_image(plan_of: PlanOf) -> None:
    (builder,) = [c for c in containers(plan_of("prod")) if c["name"] == "trtllm-build"]
    # The quantize script ships in TensorRT-LLM's release image, not in the Triton image.
    assert builder["image"] == images.TRTLLM_BUILD
    # Nothing to build when the Job's probe found the engine in the store; then quantize && build && clean up
    guard, _, script = builder["command"][-1].partition("fi; ")
    assert guard.startswith("if [ -e /build-state/engine-present ]; then ") and "exit 0" in guard
    quantize = script.split(" && ")[0].split()
    assert quantize[0] == "python3"
    assert missing_paths(builder["image"], [quantize[1]]) == []
    assert missing_paths(images.TRITON_TRTLLM, [quantize[1]]) == [quantize[1]]
    build = script.split(" && ")[1].split()
    assert build[0] == "trtllm-build"
    assert engine_arg_problems(builder["image"], quantize[2:] + build[1:]) == []
