"""llama.cpp ``llama-server`` arguments: GGUF weights on CPU or offloaded to one GPU. Pure, like ``_vllm``.

Every flag below is in ``tools/server/README.md`` of ggml-org/llama.cpp (the auto-generated "Usage" tables;
the pinned image is ``components.catalog.images.LLAMACPP``): ``-m``, ``--host`` (default 127.0.0.1, so a
pod must bind 0.0.0.0), ``--port`` (the default moved from 8080 to 9931: always passed), ``-a/--alias``,
``-c/--ctx-size`` (the whole KV cache, shared by the slots), ``-np/--parallel`` (slots), ``-ngl`` (layers in
VRAM), ``-t/--threads``, ``--metrics`` (Prometheus ``/metrics``, off by default), ``--embeddings`` (restrict
the server to ``/v1/embeddings``), ``--pooling``, ``--no-webui`` and ``-cram/--cache-ram`` (the host-memory prompt
cache in MiB, "default: 8192, -1 - no limit, 0 - disable": the README's "Server-specific params" table as read at
commit 00dc805; added by PR #16391 in October 2025, thousands of builds before the pinned b10257). ``/health``
answers 503 while the model loads and 200 once a slot is free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType

from components.catalog.models import MODEL_CACHE_ROOT, GgufFile, ModelSpec, gguf_dir
from components.catalog.profiles import LatencyProfile
from components.catalog.sizing import serving_context_tokens

LLAMACPP_HTTP_PORT = 8080
"""Serves the OpenAI API, ``/health`` and ``/metrics`` on one listener."""

LLAMACPP_SLOTS: Mapping[str, int] = MappingProxyType({"ultra-low-latency": 4, "balanced": 8, "throughput": 16})
"""Concurrent sequences (``--parallel``) per latency profile. A small GPU or a CPU decodes a handful of streams
before a step stops being memory-bound; the profiles' vLLM batch sizes (64+) would only buy KV memory."""

ALL_LAYERS = "999"
"""``-ngl`` above any model's layer count offloads every layer; an exact number means the same at every release
(``auto``/``all`` are newer spellings)."""

KV_BYTES_PER_ELEMENT = 2
"""llama.cpp's default KV cache type is f16 (``-ctk``/``-ctv``, default f16)."""


def prompt_cache_mib(model: ModelSpec, profile: LatencyProfile) -> int:
    """``--cache-ram``: host memory for the prompts of idle slots (MiB), so a conversation displaced from its slot
    comes back by a copy instead of a new prefill (hundreds of milliseconds of TTFT on a small GPU).

    Bounded, and counted in the pod's memory: llama-server's default is 8192 MiB per server, kept in host RAM
    whether the model runs on the GPU or not, above what the kit requests. One slot's full context of f16 KV (the
    profile's context) holds the longest conversation, or several shorter ones. An embedding server keeps none:
    its inputs share no prefix worth restoring."""
    if model.is_embedding:
        return 0
    return math.ceil(kv_cache_bytes(model, serving_context_tokens(model, profile)) / 2**20)


def llamacpp_slots(profile: LatencyProfile) -> int:
    return LLAMACPP_SLOTS[profile.name]


def llamacpp_context_tokens(model: ModelSpec, profile: LatencyProfile) -> int:
    """``-c``: the KV cache for every slot. Each slot gets ``-c / --parallel`` tokens, the profile's context."""
    return llamacpp_slots(profile) * serving_context_tokens(model, profile)


def kv_cache_bytes(model: ModelSpec, tokens: int) -> int:
    """f16 KV cache for ``tokens``: 2 (K and V) x layers x KV heads x head_dim x 2 bytes."""
    return 2 * model.layers * model.kv_heads * model.head_dim * KV_BYTES_PER_ELEMENT * tokens


def gguf_path(model: ModelSpec, gguf: GgufFile, cache_root: str = MODEL_CACHE_ROOT) -> str:
    return f"{gguf_dir(model.model_id, cache_root)}/{gguf.file}"


def llamacpp_args(
    model: ModelSpec,
    gguf: GgufFile,
    profile: LatencyProfile,
    *,
    gpu_offload: bool,
    threads: int,
    cache_root: str = MODEL_CACHE_ROOT,
    port: int = LLAMACPP_HTTP_PORT,
) -> list[str]:
    """Arguments of the image's ``llama-server`` entrypoint.

    The model is served under its catalog id (``--alias``), as vLLM serves it (``--served-model-name``), so the
    gateway names a model the same way whatever the engine. An embedding model runs in embedding mode only.
    """
    args = [
        "-m", gguf_path(model, gguf, cache_root),
        "--alias", model.model_id,
        "--host", "0.0.0.0",
        "--port", str(port),
        "--threads", str(threads),
        "--metrics",
        "--no-webui",
    ]  # fmt: skip
    if model.is_embedding:
        # One slot per thread; each input must fit one micro-batch (512 tokens by default = MiniLM's context).
        args += ["--embeddings", "--pooling", "mean", "--parallel", str(threads),
                 "--ctx-size", str(threads * model.max_context_tokens)]  # fmt: skip
    else:
        args += [
            "--parallel", str(llamacpp_slots(profile)),
            "--ctx-size", str(llamacpp_context_tokens(model, profile)),
        ]  # fmt: skip
    args += ["--cache-ram", str(prompt_cache_mib(model, profile))]
    args += ["--n-gpu-layers", ALL_LAYERS if gpu_offload else "0"]
    return args
