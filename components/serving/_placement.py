"""Where and how one model runs: parallelism, GPUs per pod, Deployment or LeaderWorkerSet.

Pure functions of the model spec, the pool and the catalog. Config validation and the
InferenceServer component both call ``place``, so what validation accepts is exactly what
is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.catalog.models import MODELS, ModelSpec
from components.catalog.profiles import PROFILES, LatencyProfile
from components.catalog.sizing import (
    FitResult,
    ItlEstimate,
    SizingError,
    check_fit,
    derive_tensor_parallel,
    engine_precision_problem,
    itl_floor,
    serving_context_tokens,
    tensor_parallel_problem,
)
from components.specs import ModelDeploySpec, ServingPool

ENGINE_OF_SERVER = {"vllm": "vllm", "triton": "tensorrt-llm"}


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

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    def multi_node(self, gpus_per_node: int) -> bool:
        """More ranks than one node has GPUs: one pod per pipeline stage, in a LeaderWorkerSet."""
        return self.world_size > gpus_per_node

    def gpus_per_pod(self, gpus_per_node: int) -> int:
        return self.tp if self.multi_node(gpus_per_node) else self.world_size

    def pods_per_group(self, gpus_per_node: int) -> int:
        return self.pp if self.multi_node(gpus_per_node) else 1


def place(spec: ModelDeploySpec, pool: ServingPool) -> Placement:
    """Resolve parallelism for ``spec`` on ``pool``; raise ``PlacementProblem`` when it cannot run."""
    model = MODELS[spec.model]
    profile = PROFILES[spec.profile]
    gpu = pool.spec.gpu
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
            choice = derive_tensor_parallel(
                model,
                gpu,
                spec.precision,
                spec.slo.itl_p99_ms,
                gpus_per_node,
                pp=spec.pipeline_parallel,
                memory_utilization=profile.gpu_memory_utilization,
                kv_reserve_tokens=context,
                # A full batch at full context: the step the SLO must hold at (issue 12, point 10).
                batch=profile.max_batch_size,
                context_tokens=context,
            )
        except SizingError as err:
            text = " ".join(line.strip() for line in str(err).splitlines())
            raise PlacementProblem(
                "tensorParallel",
                f"nothing fits (derived on {pool.instance_type})",
                text.split(" fix: ")[0],
                "use fp8, a bigger GPU pool, pipelineParallel across nodes, or a looser slo.itlP99Ms",
            ) from None
        return Placement(model, profile, choice.tp, spec.pipeline_parallel, True, choice.fit, choice.itl)

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
    itl = itl_floor(model, gpu, spec.precision, tp, batch=profile.max_batch_size, context_tokens=context)
    return Placement(model, profile, tp, spec.pipeline_parallel, False, fit, itl)
