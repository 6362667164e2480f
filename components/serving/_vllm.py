"""vLLM OpenAI-compatible server arguments, rendered from a model, a precision, the parallelism
and a latency profile. Pure: the InferenceServer component puts the list into the container's
``args``; tests golden-check it per profile.

Flags and their meaning: docs.vllm.ai "Engine Arguments" and facts.md ("vLLM, OpenAI-compatible
server"). CUDA graphs stay on: the kit never renders ``--enforce-eager`` (one public Triton
blueprint shipped ``enforce_eager: true`` and lost them).
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from components.catalog.models import MODEL_CACHE_ROOT, ModelSpec, hf_checkpoint_dir
from components.catalog.profiles import LatencyProfile
from components.catalog.sizing import ENGINE_PRECISIONS, serving_context_tokens, tensor_parallel_problem

VLLM_ENTRYPOINT: tuple[str, ...] = ("vllm", "serve")
"""The command of the vllm/vllm-openai image; ``vllm_args`` are its arguments."""

VLLM_HTTP_PORT = 8000
"""vLLM's default port; serves ``/v1/*``, ``/health`` and ``/metrics`` on the same listener."""

# Precision -> the flags that select it. FP8 also stores the KV cache in FP8 (half the bytes per
# token, see _sizing.KV_CACHE_BYTES_PER_ELEMENT). INT4 adds nothing: vLLM reads the AWQ/GPTQ
# method from the checkpoint's config.json.
_PRECISION_FLAGS: dict[str, tuple[str, ...]] = {
    "fp8": ("--quantization", "fp8", "--kv-cache-dtype", "fp8"),
    "bf16": ("--dtype", "bfloat16"),
    "fp16": ("--dtype", "float16"),
    "int4": (),
}


DRAFT_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""A Hugging Face repository id, ``org/name``: no leading ``/``, no ``..``, one slash."""


class SpeculativeConfig(BaseModel):
    """vLLM ``--speculative-config`` (docs.vllm.ai "Speculative Decoding")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Literal["eagle3", "eagle", "ngram", "mtp", "draft_model"]
    """``eagle3``/``eagle`` need a draft head (``model``); ``ngram`` proposes from the prompt
    itself and needs no second model; ``mtp`` uses the model's own multi-token-prediction heads."""
    num_speculative_tokens: int = Field(ge=1, le=16)
    """Tokens proposed per step. More tokens help only while most are accepted."""
    model: str | None = None
    """The draft model or head's Hugging Face id (``org/name``, e.g. ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``). It lives
    in the stack's model store under ``<id>/hf/`` (also when ``models[].source`` takes the target from elsewhere); the
    server pod's ``fetch-draft`` init container copies it to the node-local cache (``hf_checkpoint_dir``), and vLLM
    reads it there."""
    prompt_lookup_max: int | None = Field(default=None, ge=1)
    """``ngram`` only: longest n-gram matched against the prompt."""
    prompt_lookup_min: int | None = Field(default=None, ge=1)
    """``ngram`` only: shortest n-gram matched against the prompt."""

    @model_validator(mode="after")
    def _method_fields(self) -> SpeculativeConfig:
        # The draft's errors carry their own allowed and fix (``components.specs.config_error``'s shape), which
        # ``ModelDeploySpec`` passes on: the user's way out is how to name the draft, not vLLM's docs.
        draft_id = "the draft's Hugging Face id, org/name (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)"
        if self.method in ("eagle3", "eagle", "draft_model") and not self.model:
            raise PydanticCustomError(
                "inferstack",
                f"speculative method {self.method!r} needs `model` (the draft's Hugging Face id)",
                {"allowed": f"model: {draft_id}", "fix": "set `model` to the draft's id, or use method ngram"},
            )
        if self.method in ("ngram", "mtp") and self.model:
            raise PydanticCustomError(
                "inferstack",
                f"speculative method {self.method!r} takes no `model` (it drafts without a second model)",
                {"allowed": "model with eagle3, eagle or draft_model only", "fix": "remove `model`"},
            )
        if self.model and (not DRAFT_ID.fullmatch(self.model) or ".." in self.model):
            # A path would be read on the node, where nothing put it: the server would exit at start.
            raise PydanticCustomError(
                "inferstack",
                f"`model` {self.model!r} is not a Hugging Face id: name the draft as org/name",
                {
                    "allowed": f"model: {draft_id}: one slash, no '..', not a path",
                    "fix": "write the draft's org/name and put its checkpoint in the model store under <org/name>/hf/",
                },
            )
        if self.method == "ngram" and self.prompt_lookup_max is None:
            raise PydanticCustomError(
                "inferstack",
                "speculative method 'ngram' needs `promptLookupMax`",
                {"allowed": "promptLookupMax: the longest n-gram matched against the prompt, 1 or more",
                 "fix": "add `promptLookupMax: 4` (and optionally `promptLookupMin`)"},
            )  # fmt: skip
        if self.method != "ngram" and (self.prompt_lookup_max is not None or self.prompt_lookup_min is not None):
            raise PydanticCustomError(
                "inferstack",
                f"`promptLookupMax`/`promptLookupMin` with method {self.method!r}",
                {"allowed": "promptLookupMax and promptLookupMin with method ngram only",
                 "fix": "remove promptLookupMax/promptLookupMin, or use method ngram"},
            )  # fmt: skip
        return self

    def to_json(self, cache_root: str = MODEL_CACHE_ROOT) -> str:
        """Compact JSON with sorted keys, so the rendered argument is stable across runs. The draft is named by its
        node-local copy, which the ``fetch-draft`` init container fills."""
        fields = self.model_dump(exclude_none=True)
        if self.model:
            fields["model"] = hf_checkpoint_dir(self.model, cache_root)
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def vllm_args(
    model: ModelSpec,
    precision: str,
    tp: int,
    pp: int,
    profile: LatencyProfile,
    speculative: SpeculativeConfig | None = None,
    *,
    cache_root: str = MODEL_CACHE_ROOT,
    port: int = VLLM_HTTP_PORT,
    otlp_traces_endpoint: str | None = None,
) -> list[str]:
    """Arguments for ``vllm serve`` (after ``VLLM_ENTRYPOINT``).

    The model is served from its node-local checkpoint (the model loader put it there) under its
    Hugging Face id, so clients and the gateway name it the same way on every tier.
    Raises ``ValueError`` for a precision vLLM does not run or a TP that does not divide the heads.
    """
    if precision not in ENGINE_PRECISIONS["vllm"]:
        raise ValueError(f"vLLM does not run precision {precision!r}; it runs: {', '.join(ENGINE_PRECISIONS['vllm'])}")
    problem = tensor_parallel_problem(model, tp)
    if problem:
        raise ValueError(problem)
    if pp < 1:
        raise ValueError(f"pipeline parallelism must be at least 1; got {pp}")

    args = [
        hf_checkpoint_dir(model.model_id, cache_root),
        "--served-model-name", model.model_id,
        "--port", str(port),
        *_PRECISION_FLAGS[precision],
        "--tensor-parallel-size", str(tp),
        "--pipeline-parallel-size", str(pp),
        "--max-model-len", str(serving_context_tokens(model, profile)),
        "--max-num-seqs", str(profile.max_batch_size),
        "--max-num-batched-tokens", str(profile.max_num_batched_tokens),
        "--gpu-memory-utilization", f"{profile.gpu_memory_utilization:.2f}",
        # Explicit either way: the V1 default is on, but a default is not a contract.
        "--enable-prefix-caching" if profile.enable_prefix_caching else "--no-enable-prefix-caching",
    ]  # fmt: skip
    if speculative is not None:
        args += ["--speculative-config", speculative.to_json(cache_root)]
    if otlp_traces_endpoint:
        args += ["--otlp-traces-endpoint", otlp_traces_endpoint]
    return args
