"""Model sizing: weight and KV-cache bytes, the GPU fit check, the decode roofline and the
tensor-parallel degree the kit derives from them.

Pure functions of the model catalog (``_models``) and the GPU catalog (``_catalog``); the
config validation quotes their structured results in its error messages.

Units: model and memory sizes are decimal gigabytes (1e9 bytes), the unit model cards and the
roofline examples in facts.md use; GPU memory comes from ``GpuSpec.memory_gb``.

**The decode roofline (what ``itl_floor`` computes).** Generating one token reads every
weight once, so a decode step cannot finish faster than

    weight_read = weight_bytes / (TP x HBM bandwidth)

(each of TP GPUs reads its 1/TP shard at the same time). Tensor parallelism then pays for
communication: Megatron-style sharding does two all-reduces per layer (after the attention
output projection and after the MLP down projection). Each one moves the layer's activations,
``batch x hidden_size x 2`` bytes (BF16 on the wire), and costs

    allreduce = ALLREDUCE_LATENCY_S + 2 x (TP - 1) / TP x message_bytes / link_bandwidth

(a ring all-reduce sends and receives 2(TP-1)/TP of the message per GPU). At decode the
message is a few KiB, so the latency term dominates: it is what makes a TP of 8 slower than
the bandwidth term alone suggests. Pipeline parallelism does not shorten the floor: a token
still passes through every stage, and every stage reads its own weights.

Every decode step also reads the KV cache of every sequence in the batch. At the profile's batch and
context this is no longer small (Llama 3.1 70B in FP8: 64 sequences x 8,192 tokens x 160 KiB = 86 GB,
more than the weights), so the floor counts it, split over TP ranks (each holds its KV heads):

    kv_read = min(batch x context x kv_bytes_per_token, kv_capacity) / (TP x HBM bandwidth)

at the profile's maximum batch and context (``itl_floor(batch=, context_tokens=)``), not at batch 1
(issue 12, point 10). ``kv_capacity`` is what the GPUs hold beside the weights (TP x PP x memory x
utilization - weight bytes, as in the fit check): the engine admits only the sequences whose KV cache
fits (vLLM preempts the rest), so a step never reads more. Without the cap the throughput profile's
1,024 x 131,072 tokens (17.6 TB for 8B in BF16) made every model miss any target. The floor ignores kernel launch gaps
(CUDA graphs remove most) and the embedding lookup (one row, not the whole matrix). Real ITL is
above it, so a target the floor misses can never be met; a target the floor meets is necessary,
not sufficient.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from components.catalog.instances import GpuSpec
from components.catalog.models import ModelSpec
from components.catalog.profiles import PROFILES, LatencyProfile

Precision = Literal["fp8", "bf16", "fp16", "int4"]
Engine = Literal["vllm", "tensorrt-llm"]

BYTES_PER_PARAM: Mapping[str, float] = MappingProxyType(
    {
        "fp8": 1.0,
        "bf16": 2.0,
        "fp16": 2.0,
        # W4A16 (AWQ/GPTQ): the group scales (one FP16 per 128 weights, ~1.6 %) are left out.
        "int4": 0.5,
    }
)
"""Weight storage per parameter."""

KV_CACHE_BYTES_PER_ELEMENT: Mapping[str, int] = MappingProxyType(
    {
        # FP8 models also keep an FP8 KV cache (vLLM --kv-cache-dtype fp8, TensorRT-LLM
        # --kv_cache_dtype fp8): half the bytes, twice the context per GB.
        "fp8": 1,
        "bf16": 2,
        "fp16": 2,
        # INT4 is weight-only; activations and the KV cache stay 16-bit.
        "int4": 2,
    }
)

# --- What each engine runs -----------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionSupport:
    """How one engine runs one precision."""

    needs_fp8_tensor_cores: bool
    """True where the engine's kernels need FP8 tensor cores (Ada, Hopper, Blackwell)."""
    how: str
    """What the engine does with it (shown in config errors)."""


ENGINE_PRECISIONS: Mapping[str, Mapping[str, PrecisionSupport]] = MappingProxyType(
    {
        "vllm": MappingProxyType(
            {
                # vLLM quantizes a BF16 checkpoint to FP8 at load time (docs.vllm.ai "FP8 W8A8").
                # Older GPUs would fall back to weight-only FP8 (Marlin) and lose the FP8 KV-cache
                # attention kernels, so the kit keeps FP8 on FP8-capable pools.
                "fp8": PrecisionSupport(True, "--quantization fp8 --kv-cache-dtype fp8 on the BF16 checkpoint"),
                "bf16": PrecisionSupport(False, "native checkpoint precision"),
                "fp16": PrecisionSupport(False, "--dtype float16"),
                # vLLM cannot quantize to INT4 itself; it detects AWQ/GPTQ from config.json.
                "int4": PrecisionSupport(False, "needs a pre-quantized AWQ or GPTQ checkpoint as the model source"),
            }
        ),
        "tensorrt-llm": MappingProxyType(
            {
                # TensorRT-LLM's FP8 GEMMs and FP8 context FMHA need SM89+ (quantization docs).
                "fp8": PrecisionSupport(True, "quantize.py --qformat fp8 --kv_cache_dtype fp8, then trtllm-build"),
                "bf16": PrecisionSupport(False, "convert_checkpoint.py --dtype bfloat16, then trtllm-build"),
                "fp16": PrecisionSupport(False, "convert_checkpoint.py --dtype float16, then trtllm-build"),
                "int4": PrecisionSupport(False, "quantize.py --qformat int4_awq (W4A16), then trtllm-build"),
            }
        ),
    }
)
"""Engine -> precision -> how it is run. A pair missing here is not supported."""


def engine_precision_problem(engine: str, precision: str, gpu: GpuSpec) -> str | None:
    """Why ``engine`` cannot run ``precision`` on ``gpu``, or ``None`` when it can."""
    supported = ENGINE_PRECISIONS.get(engine)
    if supported is None:
        return f"unknown engine {engine!r}; known: {', '.join(ENGINE_PRECISIONS)}"
    support = supported.get(precision)
    if support is None:
        return f"{engine} does not run precision {precision!r}; it runs: {', '.join(supported)}"
    if support.needs_fp8_tensor_cores and gpu.fp8_tflops is None:
        return (
            f"{engine} runs {precision} only on GPUs with FP8 tensor cores; {gpu.model} has none. "
            f"Use bf16 on {gpu.model}, or a pool of H100/H200/L40S/B200."
        )
    return None


# --- Bytes -----------------------------------------------------------------------------------


def weight_bytes(model: ModelSpec, precision: str) -> float:
    """Bytes of all weights at ``precision`` (parameters x bytes per parameter)."""
    return model.params * BYTES_PER_PARAM[precision]


def kv_cache_bytes_per_token(model: ModelSpec, precision: str) -> int:
    """KV cache per token: 2 (K and V) x layers x KV heads x head_dim x bytes per element."""
    return 2 * model.layers * model.kv_heads * model.head_dim * KV_CACHE_BYTES_PER_ELEMENT[precision]


def serving_context_tokens(model: ModelSpec, profile: LatencyProfile) -> int:
    """The ``max_model_len`` a profile serves this model with: the profile's cap, never more
    than the model was trained for."""
    return min(profile.max_model_len, model.max_context_tokens)


# --- Fit check -------------------------------------------------------------------------------

_DEFAULT_PROFILE = PROFILES["ultra-low-latency"]
DEFAULT_MEMORY_UTILIZATION = _DEFAULT_PROFILE.gpu_memory_utilization
"""Defaults follow the ultra-low-latency row; pass the model's own profile values."""
DEFAULT_KV_RESERVE_TOKENS = _DEFAULT_PROFILE.max_model_len


@dataclass(frozen=True)
class FitResult:
    """Whether a model's shard and a minimum KV cache fit one GPU, with the numbers."""

    model_id: str
    gpu: str
    precision: str
    tp: int
    pp: int
    weights_gb_per_gpu: float
    kv_reserve_tokens: int
    kv_reserve_gb_per_gpu: float
    gpu_memory_gb: float
    memory_utilization: float

    @property
    def required_gb_per_gpu(self) -> float:
        return self.weights_gb_per_gpu + self.kv_reserve_gb_per_gpu

    @property
    def usable_gb_per_gpu(self) -> float:
        return self.gpu_memory_gb * self.memory_utilization

    @property
    def headroom_gb(self) -> float:
        """Usable minus required; negative when it does not fit."""
        return self.usable_gb_per_gpu - self.required_gb_per_gpu

    @property
    def fits(self) -> bool:
        return self.headroom_gb >= 0

    def explain(self) -> str:
        """One sentence with every number, for a config error message."""
        verdict = "fits" if self.fits else "does not fit"
        return (
            f"{self.model_id} in {self.precision} at TP={self.tp}, PP={self.pp} needs "
            f"{self.weights_gb_per_gpu:.1f} GB of weights + {self.kv_reserve_gb_per_gpu:.1f} GB of KV cache "
            f"({self.kv_reserve_tokens:,} tokens) = {self.required_gb_per_gpu:.1f} GB per GPU; "
            f"one {self.gpu} offers {self.usable_gb_per_gpu:.1f} GB "
            f"({self.gpu_memory_gb:.1f} GB x {self.memory_utilization:.2f}): {verdict}"
        )


def check_fit(
    model: ModelSpec,
    gpu: GpuSpec,
    precision: str,
    tp: int,
    pp: int = 1,
    *,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    kv_reserve_tokens: int = DEFAULT_KV_RESERVE_TOKENS,
) -> FitResult:
    """Weights per GPU (``weight_bytes / (TP x PP)``) plus KV cache for ``kv_reserve_tokens``
    (sharded the same way: TP splits the KV heads, PP the layers) against ``memory x utilization``.

    The reserve should be the served ``max_model_len``: vLLM refuses to start when its KV cache
    cannot hold one full-length sequence.
    """
    shards = tp * pp
    return FitResult(
        model_id=model.model_id,
        gpu=gpu.model,
        precision=precision,
        tp=tp,
        pp=pp,
        weights_gb_per_gpu=weight_bytes(model, precision) / shards / 1e9,
        kv_reserve_tokens=kv_reserve_tokens,
        kv_reserve_gb_per_gpu=kv_cache_bytes_per_token(model, precision) * kv_reserve_tokens / shards / 1e9,
        gpu_memory_gb=gpu.memory_gb,
        memory_utilization=memory_utilization,
    )


# --- Decode roofline -------------------------------------------------------------------------

ALLREDUCE_LATENCY_S = 5e-6
"""Fixed cost of one small all-reduce inside a node (NVLink/NVSwitch). An assumption, not a
measurement: it is the order of the one-shot custom all-reduce kernels vLLM and TensorRT-LLM use
for decode-sized messages; NCCL's small-message latency is higher. Calibrate with a benchmark."""

ALLREDUCES_PER_LAYER = 2
"""Megatron-style TP: after the attention output projection and after the MLP down projection."""

ACTIVATION_BYTES = 2
"""Activations cross the link in BF16, whatever the weight precision."""

PCIE_GB_S = 32.0
"""Per-direction bandwidth of a PCIe Gen4 x16 link, used for GPUs without NVLink (the catalog
carries ``nvlink_gb_s=None`` for them)."""


@dataclass(frozen=True)
class ItlEstimate:
    """The decode roofline for one model on one GPU type at one TP degree."""

    model_id: str
    gpu: str
    precision: str
    tp: int
    weight_read_ms: float
    """weight bytes / (TP x HBM bandwidth)."""
    allreduce_ms: float
    """layers x all-reduces per layer x (latency + bandwidth term); 0 at TP=1."""
    kv_read_ms: float = 0.0
    """batch x context x KV bytes per token / (TP x HBM bandwidth): the KV cache a full batch reads per step."""

    @property
    def total_ms(self) -> float:
        return self.weight_read_ms + self.allreduce_ms + self.kv_read_ms


def itl_floor(
    model: ModelSpec,
    gpu: GpuSpec,
    precision: str,
    tp: int,
    *,
    pp: int = 1,
    batch: int = 1,
    context_tokens: int = 0,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
) -> ItlEstimate:
    """Lower bound of the inter-token latency (see the module docstring for the model). ``context_tokens``
    counts the KV-cache reads of ``batch`` sequences that long, at most what the TP x PP GPUs hold beside the
    weights at ``memory_utilization``; 0 leaves them out (weights only)."""
    weights = weight_bytes(model, precision)
    weight_read_s = weights / (tp * gpu.hbm_tb_s * 1e12)
    kv_capacity = max(0.0, tp * pp * gpu.memory_gb * 1e9 * memory_utilization - weights)
    kv_bytes = min(batch * context_tokens * kv_cache_bytes_per_token(model, precision), kv_capacity)
    kv_read_s = kv_bytes / (tp * gpu.hbm_tb_s * 1e12)
    allreduce_s = 0.0
    if tp > 1:
        link_bytes_s = (gpu.nvlink_gb_s if gpu.nvlink_gb_s is not None else PCIE_GB_S) * 1e9
        message_bytes = batch * model.hidden_size * ACTIVATION_BYTES
        one = ALLREDUCE_LATENCY_S + 2 * (tp - 1) / tp * message_bytes / link_bytes_s
        allreduce_s = model.layers * ALLREDUCES_PER_LAYER * one
    return ItlEstimate(
        model_id=model.model_id,
        gpu=gpu.model,
        precision=precision,
        tp=tp,
        weight_read_ms=weight_read_s * 1e3,
        allreduce_ms=allreduce_s * 1e3,
        kv_read_ms=kv_read_s * 1e3,
    )


# --- Tensor parallelism ----------------------------------------------------------------------


def tensor_parallel_problem(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot shard ``model``, or ``None`` when it can.

    Each rank must hold whole attention heads and whole KV heads: vLLM and TensorRT-LLM split
    both across ranks. Powers of two only, because NVLink domains and the kit's pools come in
    1, 2, 4 and 8 GPUs.
    """
    if tp < 1 or tp & (tp - 1):
        return f"tensor parallelism must be a power of two (1, 2, 4, 8); got {tp}"
    if model.attention_heads % tp or model.kv_heads % tp:
        allowed = ", ".join(str(d) for d in valid_tensor_parallel_degrees(model, model.kv_heads))
        return (
            f"tensor parallelism {tp} does not divide the {model.attention_heads} attention heads and "
            f"{model.kv_heads} KV heads of {model.model_id}; allowed: {allowed}"
        )
    return None


def valid_tensor_parallel_degrees(model: ModelSpec, max_tp: int) -> tuple[int, ...]:
    """Powers of two up to ``max_tp`` that divide both the attention and the KV heads."""
    degrees = []
    tp = 1
    while tp <= max_tp:
        if model.attention_heads % tp == 0 and model.kv_heads % tp == 0:
            degrees.append(tp)
        tp *= 2
    return tuple(degrees)


@dataclass(frozen=True)
class TensorParallelChoice:
    """The derived TP degree and the numbers behind it."""

    tp: int
    fit: FitResult
    itl: ItlEstimate
    considered: tuple[tuple[FitResult, ItlEstimate], ...]
    """Every candidate evaluated, smallest TP first (the last one is the choice)."""


class SizingError(ValueError):
    """No tensor-parallel degree fits and meets the ITL target. Carries every candidate's numbers."""

    def __init__(self, message: str, considered: tuple[tuple[FitResult, ItlEstimate], ...]) -> None:
        super().__init__(message)
        self.considered = considered


def derive_tensor_parallel(
    model: ModelSpec,
    gpu: GpuSpec,
    precision: str,
    itl_target_ms: float,
    gpus_per_node: int,
    *,
    pp: int = 1,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    kv_reserve_tokens: int = DEFAULT_KV_RESERVE_TOKENS,
    batch: int = 1,
    context_tokens: int = 0,
) -> TensorParallelChoice:
    """The smallest TP that fits the GPU and whose roofline meets ``itl_target_ms``.

    Candidates are the valid degrees (``valid_tensor_parallel_degrees``) up to ``gpus_per_node``:
    TP runs an all-reduce twice per layer, which only NVLink inside one node makes cheap, so a
    model too big for one node needs pipeline parallelism (``pp``) across nodes, not more TP.
    Smallest wins because every extra GPU per replica is a GPU not serving another replica.
    Raises ``SizingError`` naming each candidate's numbers when none qualifies.
    """
    considered: list[tuple[FitResult, ItlEstimate]] = []
    for tp in valid_tensor_parallel_degrees(model, gpus_per_node):
        fit = check_fit(
            model, gpu, precision, tp, pp, memory_utilization=memory_utilization, kv_reserve_tokens=kv_reserve_tokens
        )
        itl = itl_floor(
            model, gpu, precision, tp, pp=pp, batch=batch, context_tokens=context_tokens,
            memory_utilization=memory_utilization,
        )  # fmt: skip
        considered.append((fit, itl))
        if fit.fits and itl.total_ms <= itl_target_ms:
            return TensorParallelChoice(tp=tp, fit=fit, itl=itl, considered=tuple(considered))
    lines = [
        f"  TP={fit.tp}: {fit.required_gb_per_gpu:.1f} of {fit.usable_gb_per_gpu:.1f} GB per GPU "
        f"({'fits' if fit.fits else 'too big'}), ITL floor {itl.total_ms:.1f} ms"
        for fit, itl in considered
    ]
    message = (
        f"no tensor-parallel degree up to {gpus_per_node} GPUs per node serves {model.model_id} in {precision} "
        f"on {gpu.model} with PP={pp} within an ITL of {itl_target_ms:g} ms:\n"
        + "\n".join(lines)
        + "\nfix: use fp8, a GPU with more memory or bandwidth, pipeline parallelism across nodes (pp), "
        "or a looser ITL target"
    )
    raise SizingError(message, tuple(considered))
