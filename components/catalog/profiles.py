"""Latency profiles: the one table of engine settings that trade latency for throughput.

A model names a profile; vLLM's arguments, the TensorRT-LLM engine build, the Triton model
repository and the KEDA trigger all read the same row, so the three engines cannot drift apart.

Why the columns move the way they do (decode is memory-bound, see facts.md "Physics of decode"):
- Batch size barely changes the time of one decode step until the GPU turns compute-bound, but
  every admitted sequence adds KV reads and, more importantly, every *prefill* admitted into a
  step stretches that step for all running sequences. Low-latency rows keep both small.
- The per-step token budget (``max_num_batched_tokens``; TensorRT-LLM ``max_num_tokens``) caps
  how much prefill work one step may carry: with chunked prefill a long prompt is cut into
  budget-sized pieces, so inter-token latency stays bounded while TTFT grows slightly.
- Waiting in a queue is pure latency: the ultra-low-latency row never delays a request to form
  a batch, and it asks KEDA for another replica as soon as one request waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

ProfileName = Literal["ultra-low-latency", "balanced", "throughput"]
BatchSchedulerPolicy = Literal["guaranteed_no_evict", "max_utilization"]


@dataclass(frozen=True)
class LatencyProfile:
    """One row of engine settings. Units are in the names."""

    name: ProfileName
    max_batch_size: int
    """Sequences decoded together: vLLM ``--max-num-seqs``, TensorRT-LLM ``--max_batch_size`` and
    Triton ``max_batch_size`` (the same quantity in the three places)."""
    max_num_batched_tokens: int
    """Tokens one engine step may process: vLLM ``--max-num-batched-tokens``, TensorRT-LLM
    ``--max_num_tokens``. With chunked prefill this is the prefill chunk."""
    max_model_len: int
    """Longest prompt + completion served (capped at the model's own context). vLLM refuses to
    start unless the KV cache holds one such sequence, so the fit check reserves it."""
    gpu_memory_utilization: float
    """vLLM ``--gpu-memory-utilization``: share of GPU memory for weights + activations + KV."""
    kv_cache_free_gpu_mem_fraction: float
    """TensorRT-LLM: share of the memory left *after* loading the engine that goes to KV cache."""
    max_queue_delay_microseconds: int
    """Triton dynamic batcher: how long a request may wait for others to join its batch."""
    batch_scheduler_policy: BatchSchedulerPolicy
    """TensorRT-LLM scheduler: ``guaranteed_no_evict`` never pauses a started request."""
    enable_chunked_context: bool
    """TensorRT-LLM ``enable_chunked_context`` (vLLM V1 always chunks prefills)."""
    enable_prefix_caching: bool
    """vLLM ``--enable-prefix-caching`` / TensorRT-LLM ``enable_kv_cache_reuse``."""
    cuda_graphs: bool
    """TensorRT-LLM ``cuda_graph_mode``. vLLM keeps CUDA graphs on in every profile: the kit
    never passes ``--enforce-eager``."""
    keda_queue_depth_per_replica: int
    """KEDA target for waiting requests per pod (``vllm:num_requests_waiting`` or Triton's
    ``nv_trt_llm_request_metrics{request_type="waiting"}``) before it adds a replica."""


PROFILES: Mapping[str, LatencyProfile] = MappingProxyType(
    {
        # Interactive chat against TTFT p99 < 100 ms and ITL < 20 ms (design.md).
        "ultra-low-latency": LatencyProfile(
            name="ultra-low-latency",
            # 64 concurrent sequences: enough for one pod to absorb a burst, small enough that a
            # step stays memory-bound (vLLM's own H100 server default is 1024: a throughput choice).
            max_batch_size=64,
            # 2048 tokens per step is vLLM's default for the API server on GPUs under 70 GiB
            # (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults); on H100/H200 vLLM raises it
            # to 8192, which lets one long prompt stretch a step 4x for every running stream.
            max_num_batched_tokens=2048,
            # Long prompts cannot meet a 100 ms TTFT anyway (prefill ~ 2 x params x tokens FLOPs),
            # and a short maximum frees KV memory for concurrency.
            max_model_len=8192,
            # vLLM's default: room for activations and CUDA graphs beside weights and KV.
            gpu_memory_utilization=0.90,
            # TensorRT-LLM's default (docs/model_config.md, tensorrtllm_backend).
            kv_cache_free_gpu_mem_fraction=0.90,
            # In-flight batching admits a request at the next iteration anyway; any delay is TTFT.
            max_queue_delay_microseconds=0,
            # A paused (evicted) request stalls its stream for a whole re-prefill: an ITL spike.
            batch_scheduler_policy="guaranteed_no_evict",
            # Bounded prefill chunks keep decode steps of other streams short.
            enable_chunked_context=True,
            # Shared system prompts skip prefill: the cheapest TTFT win there is.
            enable_prefix_caching=True,
            # Small-batch decode is launch-bound without graphs.
            cuda_graphs=True,
            # One waiting request already means a TTFT miss: scale out at once.
            keda_queue_depth_per_replica=1,
        ),
        # General serving: latency matters, but GPUs should be kept reasonably busy.
        "balanced": LatencyProfile(
            name="balanced",
            max_batch_size=256,
            # vLLM's own API-server default on H100/H200 (arg_utils.py, get_batch_defaults).
            max_num_batched_tokens=8192,
            max_model_len=32_768,
            gpu_memory_utilization=0.90,
            kv_cache_free_gpu_mem_fraction=0.90,
            # 100 us lets near-simultaneous arrivals share their first iteration; TTFT barely notices.
            max_queue_delay_microseconds=100,
            batch_scheduler_policy="guaranteed_no_evict",
            enable_chunked_context=True,
            enable_prefix_caching=True,
            cuda_graphs=True,
            # A short queue is acceptable; add a replica when each pod has a few waiting.
            keda_queue_depth_per_replica=4,
        ),
        # Batch and offline work: tokens per GPU-second first, latency second.
        "throughput": LatencyProfile(
            name="throughput",
            # vLLM's API-server default on H100/H200 (arg_utils.py, get_batch_defaults).
            max_batch_size=1024,
            # vLLM's offline (LLM class) default on H100/H200: big steps amortise weight reads.
            max_num_batched_tokens=16_384,
            # The full context the models support (capped per model by the sizing code).
            max_model_len=131_072,
            # More KV cache means bigger batches; activations at these batch sizes are known.
            gpu_memory_utilization=0.95,
            kv_cache_free_gpu_mem_fraction=0.95,
            # 1 ms of batching is noise against multi-second batch jobs.
            max_queue_delay_microseconds=1000,
            # Pack greedily; an occasional pause/resume is the price of a fuller batch.
            batch_scheduler_policy="max_utilization",
            enable_chunked_context=True,
            enable_prefix_caching=True,
            # At large batches launch overhead is a small share of a step, and each captured
            # graph holds memory that would otherwise be KV cache.
            cuda_graphs=False,
            # Queues are expected; scale on a sustained backlog only.
            keda_queue_depth_per_replica=16,
        ),
    }
)


def profile(name: str) -> LatencyProfile:
    """The row for ``name``; the ``KeyError`` names the known profiles."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown latency profile {name!r}; known: {', '.join(PROFILES)}") from None
