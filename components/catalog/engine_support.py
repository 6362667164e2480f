"""What each pinned engine image supports: one table, read by the serving renders, the tests and the policy rules.

A flag that a pinned image does not support, or a path that is not in it, fails only at run time, after a
node has been bought and a model loaded: vLLM exits at start on ``--otlp-traces-endpoint`` without the
OpenTelemetry packages (issue 12, point 6), and a build that runs a script its image does not ship fails
after the checkpoint download (point 7). So every rendered command line is checked against this table
before anything deploys: ``engine_arg_problems(image, args)`` and ``missing_paths(image, paths)``.

Each row cites where its facts come from. Change a row only together with the image pin in
``components.catalog.images``; a new image without a row is refused (unknown image).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from components.catalog import images


@dataclass(frozen=True)
class EngineImage:
    """What one pinned image accepts and carries."""

    image: str
    supported_flags: frozenset[str]
    """Flags of the engine's CLI the kit renders and this image accepts."""
    unsupported_flags: Mapping[str, str] = field(default_factory=dict)
    """Flags this image's CLI knows but cannot run as shipped, with the reason (cited)."""
    paths: frozenset[str] = frozenset()
    """Files and folders the kit runs or copies from inside this image."""
    source: str = ""
    """Where the row's facts come from."""


def _row(
    image: str, source: str, flags: Iterable[str], unsupported: dict[str, str], paths: Iterable[str]
) -> EngineImage:
    return EngineImage(image, frozenset(flags), MappingProxyType(unsupported), frozenset(paths), source)


ENGINE_IMAGES: Mapping[str, EngineImage] = MappingProxyType(
    {
        row.image: row
        for row in (
            _row(
                images.VLLM,
                # docs.vllm.ai/en/v0.11.0 "Engine Arguments" and "OpenAI-Compatible Server" (vllm serve).
                "docs.vllm.ai/en/v0.11.0/configuration/engine_args.html; vLLM issues #7679, #9340, #26491",
                {
                    "--served-model-name",
                    "--port",
                    "--quantization",
                    "--kv-cache-dtype",
                    "--dtype",
                    "--tensor-parallel-size",
                    "--pipeline-parallel-size",
                    "--max-model-len",
                    "--max-num-seqs",
                    "--max-num-batched-tokens",
                    "--gpu-memory-utilization",
                    "--enable-prefix-caching",
                    "--no-enable-prefix-caching",
                    "--speculative-config",
                },
                {
                    # The image ships no opentelemetry-sdk / -api / -exporter-otlp / -semantic-conventions-ai:
                    # vLLM raises "OpenTelemetry is not installed" at start (vllm/tracing.py is_otel_available;
                    # issues #7679, #9340, #26491). Tracing would need an image layer that adds them.
                    "--otlp-traces-endpoint": "vllm/vllm-openai:v0.11.0 lacks the OpenTelemetry packages and "
                    "exits at start (vLLM issues #7679, #9340, #26491); drop the flag or build an image layer "
                    "that installs opentelemetry-sdk, -api, -exporter-otlp and -semantic-conventions-ai",
                    "--enforce-eager": "disables CUDA graphs: the kit's latency profiles never run without them",
                },
                (),
            ),
            *(
                _row(
                    image,
                    # llama-server's "Usage" tables in ggml-org/llama.cpp tools/server/README.md (components/serving/
                    # _llamacpp.py cites each flag); the same binary in the CPU and the CUDA image of one build tag.
                    "github.com/ggml-org/llama.cpp tools/server/README.md (server flags), build " + images.LLAMACPP_TAG,
                    {
                        "-m",
                        "--alias",
                        "--host",
                        "--port",
                        "--threads",
                        "--metrics",
                        "--no-webui",
                        "--embeddings",
                        "--pooling",
                        "--parallel",
                        "--ctx-size",
                        "--cache-ram",
                        "--n-gpu-layers",
                    },
                    {},
                    (),
                )
                for image in (images.LLAMACPP_CPU, images.LLAMACPP_CUDA)
            ),
            _row(
                images.TRITON_TRTLLM,
                # The tensorrtllm_backend layout under /app (all_models/inflight_batcher_llm/<model>, tools/,
                # scripts/) and Triton's OpenAI frontend under /opt/tritonserver/python/openai (server repo,
                # python/openai/README.md); the executor worker beside the backend library.
                "docs.nvidia.com triton-inference-server user-guide 'Release Compatibility Matrix' "
                "(25.09: TensorRT-LLM 1.0.0); tensorrtllm_backend all_models/inflight_batcher_llm; "
                "server python/openai/README.md",
                {
                    "--model-repository",
                    "--tokenizer",
                    "--backend",
                    "--openai-port",
                    "--enable-kserve-frontends",
                },
                {},
                {
                    f"{images.TRITON_MODEL_TEMPLATES}/ensemble",
                    f"{images.TRITON_MODEL_TEMPLATES}/preprocessing",
                    f"{images.TRITON_MODEL_TEMPLATES}/tensorrt_llm",
                    f"{images.TRITON_MODEL_TEMPLATES}/postprocessing",
                    "/opt/tritonserver/python/openai/openai_frontend/main.py",
                    "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
                },
            ),
            _row(
                images.TRTLLM_BUILD,
                # NVIDIA's TensorRT-LLM release container keeps its source tree, examples included, at
                # /app/tensorrt_llm (the examples' own docs run /app/tensorrt_llm/examples/...); trtllm-build is
                # the wheel's console script. 1.0.0 is the TensorRT-LLM of Triton 25.09, so the engine it builds
                # is one the Triton image's backend loads (TensorRT engines are version-specific).
                "nvcr.io/nvidia/tensorrt-llm/release:1.0.0; Triton compatibility matrix (25.09: TensorRT-LLM 1.0.0)",
                {
                    "--model_dir",
                    "--dtype",
                    "--qformat",
                    "--kv_cache_dtype",
                    "--calib_size",
                    "--tp_size",
                    "--pp_size",
                    "--output_dir",
                    "--checkpoint_dir",
                    "--gemm_plugin",
                    "--max_batch_size",
                    "--max_num_tokens",
                    "--max_seq_len",
                    "--max_input_len",
                    "--use_paged_context_fmha",
                    "--multiple_profiles",
                    "--workers",
                    "--use_fp8_context_fmha",
                },
                {},
                {"/app/tensorrt_llm/examples/quantization/quantize.py"},
            ),
        )
    }
)


def engine_image(image: str) -> EngineImage:
    """The row of ``image``: by its exact reference, else by repository:tag (a row's digest pins that tag)."""
    if image in ENGINE_IMAGES:
        return ENGINE_IMAGES[image]
    tag = image.split("@", 1)[0]
    for ref, row in ENGINE_IMAGES.items():
        if ref.split("@", 1)[0] == tag:
            return row
    raise KeyError(f"no support row for image {image!r}; rows: {', '.join(ENGINE_IMAGES)}")


def engine_arg_problems(image: str, args: Iterable[object]) -> list[str]:
    """One line per flag in ``args`` that ``image`` does not support (unknown, or known to fail)."""
    row = engine_image(image)
    problems = []
    for arg in args:
        if not isinstance(arg, str) or not arg.startswith("--"):
            continue
        flag = arg.split("=", 1)[0]
        if flag in row.unsupported_flags:
            problems.append(f"{flag} on {image}: {row.unsupported_flags[flag]}")
        elif flag not in row.supported_flags:
            problems.append(
                f"{flag} on {image}: not in the image's support table (components/catalog/engine_support.py)"
            )
    return problems


def missing_paths(image: str, paths: Iterable[str]) -> list[str]:
    """The paths in ``paths`` that ``image`` is not known to carry."""
    row = engine_image(image)
    return [p for p in paths if p not in row.paths]


def check_engine_args(image: str, args: Iterable[object]) -> None:
    """Raise ``ValueError`` naming every unsupported flag of ``args`` on ``image``."""
    problems = engine_arg_problems(image, args)
    if problems:
        raise ValueError("; ".join(problems))
