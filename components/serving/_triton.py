"""Triton + TensorRT-LLM renders: the model repository (one ``config.pbtxt`` per model, from the
jinja2 templates in ``templates/triton/``), the engine-build commands and the server command.

Pure functions of the model, the profile and the parallelism. The InferenceServer component
turns the repository into a ConfigMap and the build commands into a Job; the tests parse every
rendered config into Triton's own ``ModelConfig`` proto and golden-check it per profile.

The repository follows TensorRT-LLM's ``triton_backend/all_models/inflight_batcher_llm``
layout: ``ensemble`` -> ``preprocessing`` -> ``tensorrt_llm`` -> ``postprocessing``. The kit
renders only the configs. Each model also needs its version folder ``1/``, and the two Python
stages need ``1/model.py`` from the TensorRT-LLM release that matches the Triton image: those
scripts look up the tensor names declared here when they load.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from components.catalog import images as _images
from components.catalog.instances import GpuSpec
from components.catalog.models import MODEL_CACHE_ROOT, ModelSpec, hf_checkpoint_dir, trtllm_engine_dir
from components.catalog.profiles import LatencyProfile
from components.catalog.sizing import ENGINE_PRECISIONS, serving_context_tokens, tensor_parallel_problem

TEMPLATES_DIR = Path(__file__).parent / "templates" / "triton"
MODEL_NAMES: tuple[str, ...] = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")
"""Models of the repository; clients call ``ensemble``."""

# Tokenization is CPU work of a few hundred microseconds per request; Python-backend instances
# are separate processes, so a handful keep the tokenizer from queueing at the batch sizes of the
# profiles without pinning more CPU than a GPU pod requests.
DEFAULT_TOKENIZER_INSTANCES = 4

# Ports of tritonserver; the trtllm launch script uses the same three.
TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001

# quantize.py turns a Hugging Face checkpoint into a TensorRT-LLM checkpoint for every precision
# (``full_prec`` exports it unquantized), sharded for TP x PP. Path inside NVIDIA's
# tensorrt-llm release image, whose working tree is /app/tensorrt_llm.
TRTLLM_QUANTIZE_SCRIPT = "/app/tensorrt_llm/examples/quantization/quantize.py"

# Calibration samples for FP8 scales: the value of TensorRT-LLM's FP8 examples (examples/llama).
FP8_CALIBRATION_SAMPLES = 512
# AWQ calibration is slow per sample; quantize.py itself caps AWQ at 32.
AWQ_CALIBRATION_SAMPLES = 32

_QFORMAT = {"fp8": "fp8", "int4": "int4_awq", "bf16": "full_prec", "fp16": "full_prec"}
_DTYPE = {"fp8": "bfloat16", "bf16": "bfloat16", "fp16": "float16", "int4": "float16"}


def _pbtxt_string(value: object) -> str:
    """Escape a value for a protobuf text-format string literal."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"')


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,  # protobuf text format, not HTML
)
_ENV.filters["pbtxt_string"] = _pbtxt_string


def engine_key(gpu: GpuSpec, precision: str, tp: int, pp: int, profile: LatencyProfile) -> str:
    """Names what an engine build baked in. TensorRT engines are specific to the GPU model they were built on and
    to the TensorRT-LLM version that built them (TensorRT Developer Guide, "Serializing a Model": serialized engines
    are not portable across TensorRT versions), and the batch and token limits come from the profile. A change in
    any of these means a new engine: never an overwrite of the one a running pod reads, nor an old engine found in
    a node's cache by the server of a newer Triton."""
    return f"{gpu.model.lower()}-{precision}-tp{tp}-pp{pp}-{profile.name}-trtllm{_images.TRTLLM_VERSION}"


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _validate(model: ModelSpec, precision: str, tp: int, pp: int) -> None:
    if precision not in ENGINE_PRECISIONS["tensorrt-llm"]:
        known = ", ".join(ENGINE_PRECISIONS["tensorrt-llm"])
        raise ValueError(f"TensorRT-LLM does not run precision {precision!r}; it runs: {known}")
    problem = tensor_parallel_problem(model, tp)
    if problem:
        raise ValueError(problem)
    if pp < 1:
        raise ValueError(f"pipeline parallelism must be at least 1; got {pp}")


def render_model_repository(
    model: ModelSpec,
    profile: LatencyProfile,
    tp: int,
    pp: int,
    *,
    precision: str,
    gpu: GpuSpec,
    cache_root: str = MODEL_CACHE_ROOT,
    preprocessing_instances: int = DEFAULT_TOKENIZER_INSTANCES,
    postprocessing_instances: int = DEFAULT_TOKENIZER_INSTANCES,
) -> dict[str, str]:
    """``{"<model>/config.pbtxt": text}`` for the four models of the repository.

    The engine and the tokenizer are read from the node-local NVMe cache under ``cache_root``:
    the engine from ``trtllm_engine_dir`` (keyed by ``engine_key``), the tokenizer from the
    Hugging Face checkpoint folder.
    """
    _validate(model, precision, tp, pp)
    engine_dir = trtllm_engine_dir(model.model_id, engine_key(gpu, precision, tp, pp, profile), cache_root)
    tokenizer_dir = hf_checkpoint_dir(model.model_id, cache_root)
    common = {
        "model_id": model.model_id,
        "max_batch_size": profile.max_batch_size,
        "max_queue_delay_microseconds": profile.max_queue_delay_microseconds,
    }
    parameters: dict[str, dict[str, str]] = {
        "preprocessing": {
            "tokenizer_dir": tokenizer_dir,
            # Chat frontends apply the model's chat template, which already starts with the BOS
            # token (Llama 3.1's template begins with `bos_token`); adding it again doubles it.
            "add_special_tokens": "false",
            # model.py reads this key unconditionally; empty means "text only".
            "multimodal_model_path": "",
            "gpt_model_path": engine_dir,
        },
        "tensorrt_llm": {
            "gpt_model_type": "inflight_fused_batching",
            "gpt_model_path": engine_dir,
            "max_beam_width": "1",
            "batch_scheduler_policy": profile.batch_scheduler_policy,
            "kv_cache_free_gpu_mem_fraction": f"{profile.kv_cache_free_gpu_mem_fraction:.2f}",
            "enable_kv_cache_reuse": _bool(profile.enable_prefix_caching),
            "enable_chunked_context": _bool(profile.enable_chunked_context),
            "cuda_graph_mode": _bool(profile.cuda_graphs),
            # Stream only the completion; the client already has its prompt.
            "exclude_input_in_output": "true",
            # Inputs arrive from the preprocessing stage on the CPU; let the backend place them.
            "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
            "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        },
        "postprocessing": {
            "tokenizer_dir": tokenizer_dir,
            "skip_special_tokens": "true",
        },
    }
    context = {
        "precision": precision,
        "tp": tp,
        "pp": pp,
        "profile": profile.name,
        "preprocessing_instances": preprocessing_instances,
        "postprocessing_instances": postprocessing_instances,
    }
    return {
        f"{name}/config.pbtxt": _ENV.get_template(f"{name}/config.pbtxt.j2").render(
            **common, **context, parameters=parameters.get(name, {})
        )
        for name in MODEL_NAMES
    }


def trtllm_checkpoint_command(
    model: ModelSpec,
    precision: str,
    tp: int,
    pp: int,
    *,
    hf_dir: str,
    checkpoint_dir: str,
    quantize_script: str = TRTLLM_QUANTIZE_SCRIPT,
) -> list[str]:
    """Step 1 of the engine-build Job: Hugging Face checkpoint -> TensorRT-LLM checkpoint, quantized
    (FP8 with an FP8 KV cache, or INT4 AWQ) or exported as is, and sharded for TP x PP."""
    _validate(model, precision, tp, pp)
    cmd = [
        "python3", quantize_script,
        "--model_dir", hf_dir,
        "--dtype", _DTYPE[precision],
        "--qformat", _QFORMAT[precision],
    ]  # fmt: skip
    if precision == "fp8":
        cmd += ["--kv_cache_dtype", "fp8", "--calib_size", str(FP8_CALIBRATION_SAMPLES)]
    elif precision == "int4":
        cmd += ["--calib_size", str(AWQ_CALIBRATION_SAMPLES)]
    cmd += ["--tp_size", str(tp), "--pp_size", str(pp), "--output_dir", checkpoint_dir]
    return cmd


def trtllm_build_args(
    model: ModelSpec,
    precision: str,
    tp: int,
    pp: int,
    profile: LatencyProfile,
    *,
    checkpoint_dir: str,
    output_dir: str,
    workers: int = 1,
) -> list[str]:
    """Step 2 of the engine-build Job: the ``trtllm-build`` command line (docs: "trtllm-build" and
    "Useful Build-Time Flags"). ``workers`` builds that many ranks in parallel, one GPU each."""
    _validate(model, precision, tp, pp)
    context_tokens = serving_context_tokens(model, profile)
    cmd = [
        "trtllm-build",
        "--checkpoint_dir", checkpoint_dir,
        "--output_dir", output_dir,
        "--gemm_plugin", "auto",
        # Runtime limits cannot exceed what the engine was built for: build exactly the profile's.
        "--max_batch_size", str(profile.max_batch_size),
        "--max_num_tokens", str(profile.max_num_batched_tokens),
        "--max_seq_len", str(context_tokens),
        "--max_input_len", str(context_tokens),
        # Paged context FMHA is what KV-cache reuse and chunked context run on.
        "--use_paged_context_fmha", "enable",
        # Several optimization profiles keep small decode batches fast as well as big ones.
        "--multiple_profiles", "enable",
        "--workers", str(min(workers, tp * pp)),
    ]  # fmt: skip
    if precision == "fp8":
        # Attention over the FP8 KV cache in FP8 too (Hopper); pairs with paged context FMHA.
        cmd += ["--use_fp8_context_fmha", "enable"]
    return cmd
