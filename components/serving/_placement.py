"""Where and how one model runs: parallelism, GPUs per pod, Deployment or LeaderWorkerSet.

Pure functions of the model spec, the pool and the catalog. Config validation and the
InferenceServer component both call ``place``, so what validation accepts is exactly what
is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from components.catalog.models import GGUF_FILES, MODELS, GgufFile, ModelSpec
from components.catalog.profiles import PROFILES, LatencyProfile
from components.catalog.sizing import (
    FitResult,
    ItlEstimate,
    SizingError,
    TensorParallelChoice,
    check_fit,
    derive_tensor_parallel,
    engine_precision_problem,
    itl_floor,
    serving_context_tokens,
    tensor_parallel_problem,
    weight_bytes,
)
from components.specs import ModelDeploySpec, ServingPool

ENGINE_OF_SERVER = {"vllm": "vllm", "triton": "tensorrt-llm", "llamacpp": "llama.cpp"}
GGUF_DEFAULT = {False: "Q4_K_M", True: "Q8_0"}
"""Default GGUF quantization for a chat model (4-bit: the edge's working point) and an embedding model (8-bit:
a few MB either way, and embeddings lose recall below 8 bits)."""
CPU_MEMORY_UTILIZATION = 0.9
"""Share of a CPU node's RAM one llama.cpp server may plan for (the rest is the OS, k3s and page cache)."""


HOST_MEMORY_SHARE = 0.8
"""Share of its GPUs' part of the node's host memory a GPU pod requests; the rest is the kubelet's reserve and the
node's DaemonSets."""
ENGINE_BUILD_FLOOR_GIB = 32
"""Host memory an engine build requests at least, where its node gives that much."""


def host_memory_share_gib(spec: Any, gpus: int) -> int:
    """GiB of host memory a pod with ``gpus`` of the node's GPUs requests: their share, less room for the node."""
    return int(spec.host_memory_gib * gpus / spec.gpu_count * HOST_MEMORY_SHARE)


def engine_build_need_gib(model: ModelSpec) -> int:
    """Host memory a TensorRT-LLM engine build needs: quantization loads the BF16 checkpoint into host memory before it
    moves to the GPUs, plus a quarter for calibration and the export."""
    return int(weight_bytes(model, "bf16") / 2**30 * 1.25)


def engine_build_memory_gib(model: ModelSpec, spec: Any, gpus: int) -> int:
    """What the engine build requests: what it needs (at least ``ENGINE_BUILD_FLOOR_GIB``), within its GPUs' share of
    the node (``place`` refuses a model whose need is beyond that share)."""
    return min(max(ENGINE_BUILD_FLOOR_GIB, engine_build_need_gib(model)), host_memory_share_gib(spec, gpus))


WorkloadKind = Literal["Deployment", "LeaderWorkerSet"]


@dataclass
class PlacementProblem(Exception):
    """A model that cannot run as configured. ``key`` is the offending field, camelCase."""

    key: str
    received: str
    allowed: str
    fix: str


@dataclass(frozen=True)
class Placement:
    model: ModelSpec
    profile: LatencyProfile
    tp: int
    pp: int
    tp_derived: bool
    fit: FitResult
    itl: ItlEstimate
    gguf: GgufFile | None = None
    """llama.cpp: the GGUF file served."""
    gpu_offload: bool = False
    """llama.cpp: every layer on the pool's GPU (else the server runs on CPU)."""

    @property
    def world_size(self) -> int:
        if self.gguf is not None and not self.gpu_offload:
            return 0  # a CPU-only llama.cpp server takes no GPU
        return self.tp * self.pp

    def multi_node(self, gpus_per_node: int) -> bool:
        """More ranks than one node has GPUs: one pod per pipeline stage, in a LeaderWorkerSet."""
        return self.world_size > gpus_per_node

    def workload_kind(self, gpus_per_node: int) -> WorkloadKind:
        """What serves the model, so what kube-state-metrics reports its readiness by: a LeaderWorkerSet (through
        its leader StatefulSet) when it spans nodes, else a Deployment."""
        return "LeaderWorkerSet" if self.multi_node(gpus_per_node) else "Deployment"

    def gpus_per_pod(self, gpus_per_node: int) -> int:
        return self.tp if self.multi_node(gpus_per_node) else self.world_size

    def pods_per_group(self, gpus_per_node: int) -> int:
        return self.pp if self.multi_node(gpus_per_node) else 1


def place(spec: ModelDeploySpec, pool: ServingPool) -> Placement:
    """Resolve parallelism for ``spec`` on ``pool``; raise ``PlacementProblem`` when it cannot run.

    The fit counts the target alone. A speculative draft head (``eagle``/``eagle3``) is not in the model catalog, so
    its size is unknown here (a few hundred MiB to a few GiB) and nothing is counted for it; a separate draft model
    (``draft_model``), whose weights and KV cache would count, is refused by the config checks because the pinned
    vLLM does not run one (``stacks.environment.model_checks``).
    """
    model = MODELS[spec.model]
    profile = PROFILES[spec.profile]
    if spec.engine == "llamacpp":
        return _place_llamacpp(spec, pool, model, profile)
    if spec.quantization is not None:
        raise PlacementProblem(
            "quantization",
            repr(spec.quantization),
            f"llamacpp models only: {spec.engine} reads its quantization from the checkpoint"
            # vLLM model_executor/layers/quantization/awq_marlin.py, override_quantization_method: with no
            # --quantization it converts an AWQ checkpoint to awq_marlin; with "awq" it logs "you specified
            # quantization=awq explicitly, so forcing awq" and keeps the slow kernel (same for gptq/gptq_marlin).
            + (
                " (vLLM detects AWQ/GPTQ in config.json and picks the Marlin kernels; an explicit "
                "--quantization awq would force the slower non-Marlin kernel)"
                if spec.engine == "vllm"
                else ""
            ),
            "remove `quantization`; for 4-bit weights on vllm set precision: int4 and an AWQ/GPTQ source",
        )
    if model.is_embedding:
        raise PlacementProblem("engine", repr(spec.engine), "llamacpp for an embedding model", "set engine: llamacpp")
    gpu = pool.spec.gpu
    if gpu is None:
        raise PlacementProblem(
            "engine",
            f"{spec.engine!r} on {pool.instance_type}, which has no GPU",
            "llamacpp on a CPU-only node (vllm and triton need a GPU)",
            "set engine: llamacpp, or put the model on a node with a GPU",
        )
    gpus_per_node = pool.spec.gpu_count
    # The config names the server (triton); the precision table names the engine it runs.
    problem = engine_precision_problem(ENGINE_OF_SERVER[spec.engine], spec.precision, gpu)
    if problem:
        raise PlacementProblem(
            "precision", repr(spec.precision), problem, f"pick a precision {spec.engine} runs on {gpu.model}"
        )
    context = serving_context_tokens(model, profile)
    if spec.engine == "triton" and spec.pipeline_parallel > 1:
        raise PlacementProblem(
            "pipelineParallel",
            str(spec.pipeline_parallel),
            "1 for triton: this version runs TensorRT-LLM groups inside one node only",
            "use engine: vllm for a model that must span nodes, or a pool with enough GPU memory per node",
        )
    if spec.tensor_parallel is None:
        try:
            choice = _derive(spec, pool, model, profile)
        except SizingError as err:
            text = " ".join(line.strip() for line in str(err).splitlines())
            raise PlacementProblem(
                "tensorParallel",
                f"nothing fits (derived on {pool.instance_type})",
                text.split(" fix: ")[0],
                _use_fp8(spec) + "a bigger GPU pool, pipelineParallel across nodes, or a looser slo.itlP99Ms",
            ) from None
        placement = Placement(model, profile, choice.tp, spec.pipeline_parallel, True, choice.fit, choice.itl)
        return _engine_build_fits(spec, pool, placement)

    tp = spec.tensor_parallel
    problem = tensor_parallel_problem(model, tp)
    if problem:
        raise PlacementProblem("tensorParallel", str(tp), problem, "use a divisor of the attention and KV heads")
    if tp > gpus_per_node:
        raise PlacementProblem(
            "tensorParallel",
            f"{tp} (a {pool.instance_type} node has {gpus_per_node} GPUs)",
            f"1..{gpus_per_node}: tensor parallelism stays inside one node's NVLink domain",
            "lower tensorParallel and raise pipelineParallel to span nodes",
        )
    fit = check_fit(
        model, gpu, spec.precision, tp, spec.pipeline_parallel,
        memory_utilization=profile.gpu_memory_utilization, kv_reserve_tokens=context,
    )  # fmt: skip
    if not fit.fits:
        raise PlacementProblem(
            "tensorParallel",
            f"{tp} with {spec.precision} on {gpu.model}",
            fit.explain(),
            "raise tensorParallel, use fp8, or a pool with more GPU memory",
        )
    itl = itl_floor(
        model, gpu, spec.precision, tp, pp=spec.pipeline_parallel, batch=profile.max_batch_size,
        context_tokens=context, memory_utilization=profile.gpu_memory_utilization,
    )  # fmt: skip
    # An explicit degree is held to the same target the derived one is chosen by: the floor is a lower bound, so a
    # model over it misses its SLO at every busy step and its ITL burn alert fires from the first busy minute.
    # pipelineParallel gives no way round it: a token passes through every stage in turn and each stage reads its own
    # weights, so PP leaves the weight term as it is and only adds KV capacity (itl_floor counts both). Embedding
    # models would be exempt (they stream no tokens), but they never get here: vllm and triton refuse them above and
    # llama.cpp, which serves them, checks its own decode floor (``_place_llamacpp``).
    if itl.total_ms > spec.slo.itl_p99_ms:
        raise _explicit_itl_problem(spec, pool, model, profile, itl)
    return _engine_build_fits(spec, pool, Placement(model, profile, tp, spec.pipeline_parallel, False, fit, itl))


def _use_fp8(spec: ModelDeploySpec) -> str:
    """The fix's opening: fp8 halves a 16-bit model's weights; a model already in fp8 or int4 has nothing to gain."""
    return "use fp8, " if spec.precision in ("bf16", "fp16") else "use "


def _derive(
    spec: ModelDeploySpec, pool: ServingPool, model: ModelSpec, profile: LatencyProfile
) -> TensorParallelChoice:
    """The smallest TP on ``pool`` that fits and meets ``slo.itlP99Ms`` (``derive_tensor_parallel``, which raises
    ``SizingError`` when none does), at the profile's full batch and context."""
    context = serving_context_tokens(model, profile)
    return derive_tensor_parallel(
        model,
        pool.spec.gpu,
        spec.precision,
        spec.slo.itl_p99_ms,
        pool.spec.gpu_count,
        pp=spec.pipeline_parallel,
        memory_utilization=profile.gpu_memory_utilization,
        kv_reserve_tokens=context,
        # A full batch at full context: the step the SLO must hold at (issue 12, point 10).
        batch=profile.max_batch_size,
        context_tokens=context,
    )


def _explicit_itl_problem(
    spec: ModelDeploySpec, pool: ServingPool, model: ModelSpec, profile: LatencyProfile, itl: ItlEstimate
) -> PlacementProblem:
    """An explicit tensorParallel whose ITL floor is over ``slo.itlP99Ms``: the floor and its parts, the target (and
    whether it is the default), the degree the kit would derive on this pool if one meets it, and the fixes."""
    target = spec.slo.itl_p99_ms
    written = "itl_p99_ms" in spec.slo.model_fields_set
    pp = f", PP={spec.pipeline_parallel}" if spec.pipeline_parallel > 1 else ""
    try:
        derived: int | None = _derive(spec, pool, model, profile).tp
    except SizingError:
        derived = None
    if derived is not None:
        verdict = f"TP={derived} meets it on {pool.instance_type} (the degree the kit derives there)"
        first = f"remove tensorParallel to derive it (TP={derived}) or set it to {derived}; or "
    else:
        verdict = f"no degree up to {pool.spec.gpu_count} on {pool.instance_type} meets it"
        first = ""
    loosen = (
        "a looser slo.itlP99Ms"
        if written
        else f"write a looser slo.itlP99Ms (it is not set: {target:g} ms is the default)"
    )
    allreduce = f" + {itl.allreduce_ms:.1f} ms of all-reduces" if itl.allreduce_ms else ""
    return PlacementProblem(
        "tensorParallel",
        f"{spec.tensor_parallel} with {spec.precision} on {pool.spec.gpu.model}{pp}, whose ITL floor is "
        f"{itl.total_ms:.1f} ms a token ({itl.weight_read_ms:.1f} ms reading the weights + {itl.kv_read_ms:.1f} ms "
        f"reading {profile.max_batch_size} sequences' KV cache{allreduce})",
        f"a degree whose ITL floor meets slo.itlP99Ms, {target:g} ms"
        + ("" if written else " (the default: slo.itlP99Ms is not set)")
        + f"; {verdict}"
        + ("; pipelineParallel does not lower the floor (a token passes every stage)" if pp else ""),
        first + _use_fp8(spec) + f"a bigger GPU pool, or {loosen}",
    )


def _engine_build_fits(spec: ModelDeploySpec, pool: ServingPool, placement: Placement) -> Placement:
    """A Triton model's engine build runs on a node of its pool with the server's GPUs: its BF16 checkpoint must fit
    their share of the host memory, or the build Job never schedules and ``pulumi up`` waits for it for ever."""
    if spec.engine != "triton":
        return placement
    need = engine_build_need_gib(placement.model)
    gpus = placement.world_size
    share = host_memory_share_gib(pool.spec, gpus)
    if need > share:
        raise PlacementProblem(
            "engine",
            f"'triton' on {pool.instance_type}",
            f"an engine build whose BF16 checkpoint fits in host memory: quantizing {placement.model.model_id} "
            f"needs {need} GiB (its BF16 weights and a quarter more), and {gpus} GPU(s) of a {pool.instance_type} "
            f"get {share} GiB of its {pool.spec.host_memory_gib} GiB",
            "use engine: vllm (it loads the checkpoint as it is), or a pool with more host memory per GPU",
        )
    return placement


def _place_llamacpp(spec: ModelDeploySpec, pool: ServingPool, model: ModelSpec, profile: LatencyProfile) -> Placement:
    """A GGUF file on one GPU (chat models, when the pool has one) or on CPU: fit and decode floor."""
    from components.serving._llamacpp import kv_cache_bytes, llamacpp_context_tokens

    if "precision" in spec.model_fields_set:
        raise PlacementProblem(
            "precision",
            repr(spec.precision),
            "no precision on llamacpp: the GGUF file's quantization is its precision",
            "remove `precision`; set quantization (e.g. Q4_K_M) instead",
        )
    # The server the kit runs loads the whole file on one GPU or on the CPU (`--n-gpu-layers`, no `--split-mode`): a
    # degree of parallelism would be accepted and never used.
    for key, value in (("tensorParallel", spec.tensor_parallel), ("pipelineParallel", spec.pipeline_parallel)):
        if value is not None and value > 1:
            raise PlacementProblem(
                key,
                str(value),
                "1 on llamacpp: the kit's llama.cpp server loads the whole GGUF file on one GPU, or on the CPU",
                f"remove {key}, or serve the model with engine: vllm to spread it over GPUs",
            )
    files = GGUF_FILES.get(model.model_id)
    if not files:
        known = ", ".join(GGUF_FILES)
        raise PlacementProblem(
            "model", repr(model.model_id), f"a model with GGUF files in the catalog: {known}", "pick one of them"
        )
    quant = spec.quantization or GGUF_DEFAULT[model.is_embedding]
    gguf = files.get(quant)
    if gguf is None:
        raise PlacementProblem(
            "quantization",
            repr(quant),
            f"a GGUF file of {model.model_id}: {', '.join(files)}",
            "pick one of them (components/catalog/models.py lists each file)",
        )
    gpu = pool.spec.gpu
    offload = gpu is not None and not model.is_embedding
    tokens = model.max_context_tokens if model.is_embedding else llamacpp_context_tokens(model, profile)
    kv_gb = kv_cache_bytes(model, tokens) / 1e9
    if offload:
        where, memory_gb, utilization = gpu.model, gpu.memory_gb, profile.gpu_memory_utilization
        bandwidth_tb_s = gpu.hbm_tb_s
    else:
        where = f"CPU of {pool.name}"
        memory_gb = pool.spec.host_memory_gib * 2**30 / 1e9
        utilization = CPU_MEMORY_UTILIZATION
        bandwidth_tb_s = getattr(pool.spec, "memory_bandwidth_gb_s", 50.0) / 1000
    fit = FitResult(
        model_id=model.model_id,
        gpu=where,
        precision=quant,
        tp=1,
        pp=1,
        weights_gb_per_gpu=gguf.size_gb,
        kv_reserve_tokens=tokens,
        kv_reserve_gb_per_gpu=kv_gb,
        gpu_memory_gb=memory_gb,
        memory_utilization=utilization,
    )
    if not fit.fits:
        raise PlacementProblem(
            "model",
            f"{model.model_id} {quant} on {where}",
            fit.explain(),
            "a smaller quantization or model, a lower-context profile, or a node with more memory",
        )
    # Decode reads every weight once per token: the GGUF bytes over the GPU's or the CPU's memory bandwidth.
    itl = ItlEstimate(model.model_id, where, quant, 1, gguf.size_gb / (bandwidth_tb_s * 1e3) * 1e3, 0.0)
    if not model.is_embedding and itl.total_ms > spec.slo.itl_p99_ms:
        raise PlacementProblem(
            "slo.itlP99Ms",
            f"{spec.slo.itl_p99_ms:g} ms for {model.model_id} {quant} on {where}",
            f"at least the decode floor, {itl.total_ms:.1f} ms ({gguf.size_gb:.2f} GB read per token at "
            f"{bandwidth_tb_s * 1e3:g} GB/s)",
            "loosen slo.itlP99Ms, use a smaller quantization or model, or a GPU",
        )
    return Placement(model, profile, 1, 1, False, fit, itl, gguf=gguf, gpu_offload=offload)
