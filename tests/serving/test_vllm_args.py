"""vLLM server arguments: flags per precision and profile, never --enforce-eager, golden renders."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from components.catalog.models import model
from components.catalog.profiles import PROFILES
from components.catalog.sizing import ENGINE_PRECISIONS
from components.serving._vllm import SpeculativeConfig, vllm_args

L8B = model("meta-llama/Llama-3.1-8B-Instruct")
L70B = model("meta-llama/Llama-3.1-70B-Instruct")
QWEN = model("Qwen/Qwen2.5-1.5B-Instruct")
ULL = PROFILES["ultra-low-latency"]


def flag(args: list[str], name: str) -> str:
    """The value after ``name``; fails the test when the flag is absent."""
    assert name in args, f"{name} missing from {args}"
    return args[args.index(name) + 1]


@pytest.mark.parametrize(("precision", "profile_name"), itertools.product(ENGINE_PRECISIONS["vllm"], PROFILES))
def test_cuda_graphs_stay_on_in_every_render(precision: str, profile_name: str) -> None:
    # GIVEN any precision and profile WHEN vLLM's arguments are rendered
    args = vllm_args(L8B, precision, 1, 1, PROFILES[profile_name])
    # THEN --enforce-eager (which disables CUDA graphs) is never among them
    assert not any(a.startswith("--enforce-eager") for a in args)


def test_fp8_quantizes_weights_and_the_kv_cache() -> None:
    # GIVEN FP8 WHEN rendered THEN both weights and KV cache are FP8
    args = vllm_args(L8B, "fp8", 1, 1, ULL)
    assert flag(args, "--quantization") == "fp8"
    assert flag(args, "--kv-cache-dtype") == "fp8"


def test_bf16_renders_no_quantization() -> None:
    # GIVEN BF16 WHEN rendered THEN nothing is quantized and the dtype is explicit
    args = vllm_args(L8B, "bf16", 1, 1, ULL)
    assert "--quantization" not in args and "--kv-cache-dtype" not in args
    assert flag(args, "--dtype") == "bfloat16"


def test_profile_values_reach_the_engine_flags() -> None:
    # GIVEN the balanced profile WHEN rendered THEN its batch, token and memory settings are passed
    row = PROFILES["balanced"]
    args = vllm_args(L70B, "fp8", 2, 1, row)
    assert flag(args, "--max-num-seqs") == str(row.max_batch_size)
    assert flag(args, "--max-num-batched-tokens") == str(row.max_num_batched_tokens)
    assert flag(args, "--gpu-memory-utilization") == "0.90"
    assert flag(args, "--tensor-parallel-size") == "2"
    assert "--enable-prefix-caching" in args


def test_model_is_served_from_the_node_cache_under_its_hub_id() -> None:
    # GIVEN a custom cache root WHEN rendered THEN the checkpoint path is local and the name is the hub id
    args = vllm_args(L8B, "fp8", 1, 1, ULL, cache_root="/var/lib/inferstack/models")
    assert args[0] == "/var/lib/inferstack/models/meta-llama/Llama-3.1-8B-Instruct/hf"
    assert flag(args, "--served-model-name") == "meta-llama/Llama-3.1-8B-Instruct"


def test_max_model_len_is_capped_by_the_model_context() -> None:
    # GIVEN the throughput profile (128K) and a 32K-context model WHEN rendered THEN 32K is asked
    assert flag(vllm_args(QWEN, "bf16", 1, 1, PROFILES["throughput"]), "--max-model-len") == "32768"


EAGLE3_HEAD = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def test_speculative_config_is_rendered_as_stable_json() -> None:
    # GIVEN EAGLE-3 speculation with a draft head named by its Hugging Face id
    spec = SpeculativeConfig(method="eagle3", num_speculative_tokens=3, model=EAGLE3_HEAD)
    # WHEN rendered under a cache root
    value = flag(vllm_args(L8B, "fp8", 1, 1, ULL, spec, cache_root="/cache"), "--speculative-config")
    # THEN the flag carries compact, key-sorted JSON naming the draft's node-local copy (what fetch-draft fills)
    assert value == (
        '{"method":"eagle3","model":"/cache/yuhuili/EAGLE3-LLaMA3.1-Instruct-8B/hf","num_speculative_tokens":3}'
    )
    assert json.loads(value)["num_speculative_tokens"] == 3


@pytest.mark.parametrize(
    "draft",
    ["/mnt/draft", "/mnt/k8s-disks/0/inferstack/models/eagle3", "eagle3", "org/../etc", "org/name/extra", "../x"],
)
def test_a_draft_named_by_a_node_path_is_refused(draft: str) -> None:
    # GIVEN a draft named by a path (nothing fetches it: vLLM would exit at start) WHEN validated THEN refused, saying
    # how to name it
    with pytest.raises(ValidationError, match="not a Hugging Face id: name the draft as org/name"):
        SpeculativeConfig(method="eagle3", num_speculative_tokens=3, model=draft)


def test_ngram_with_a_draft_model_is_refused() -> None:
    # GIVEN n-gram lookup with a draft model (vLLM's ngram proposer reads none) WHEN validated THEN refused
    with pytest.raises(ValidationError, match="takes no `model`"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4, model=EAGLE3_HEAD)


def test_ngram_speculation_needs_no_draft_model() -> None:
    # GIVEN n-gram prompt lookup WHEN configured without a draft model THEN it is accepted
    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=4, prompt_lookup_max=4)
    assert json.loads(spec.to_json()) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def test_eagle_without_a_draft_model_is_refused() -> None:
    # GIVEN EAGLE-3 without its draft head WHEN validated THEN the error names the missing field
    with pytest.raises(ValidationError, match="needs `model`"):
        SpeculativeConfig(method="eagle3", num_speculative_tokens=3)


def test_no_speculation_and_no_tracing_by_default() -> None:
    # GIVEN no speculative config and no OTLP endpoint WHEN rendered THEN neither flag appears
    args = vllm_args(L8B, "fp8", 1, 1, ULL)
    assert "--speculative-config" not in args and "--otlp-traces-endpoint" not in args


def test_otlp_endpoint_is_passed_when_configured() -> None:
    # GIVEN a collector endpoint WHEN rendered THEN vLLM exports traces to it
    args = vllm_args(L8B, "fp8", 1, 1, ULL, otlp_traces_endpoint="http://otel-collector:4317")
    assert flag(args, "--otlp-traces-endpoint") == "http://otel-collector:4317"


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    # GIVEN Qwen2.5-1.5B (2 KV heads) WHEN TP=4 is rendered THEN it raises with the allowed values
    with pytest.raises(ValueError, match="allowed: 1, 2"):
        vllm_args(QWEN, "bf16", 4, 1, ULL)


def test_unsupported_precision_is_refused() -> None:
    # GIVEN a precision outside vLLM's table WHEN rendered THEN it raises naming the supported ones
    with pytest.raises(ValueError, match="it runs: fp8, bf16, fp16, int4"):
        vllm_args(L8B, "int8", 1, 1, ULL)


@pytest.mark.parametrize("profile_name", list(PROFILES))
def test_golden_args_per_profile(profile_name: str, golden: Callable[[str, str], None]) -> None:
    # GIVEN the prod 8B model in FP8 at TP=1 WHEN rendered for each profile THEN it matches the golden
    args = vllm_args(L8B, "fp8", 1, 1, PROFILES[profile_name])
    golden(f"vllm/{profile_name}.json", json.dumps(args, indent=2) + "\n")


def test_golden_args_with_speculation(golden: Callable[[str, str], None]) -> None:
    # GIVEN the ultra-low-latency render plus EAGLE-3 and tracing WHEN rendered THEN it matches the golden
    spec = SpeculativeConfig(method="eagle3", num_speculative_tokens=3, model=EAGLE3_HEAD)
    args = vllm_args(L8B, "fp8", 1, 1, ULL, spec, otlp_traces_endpoint="http://otel-collector:4317")
    golden("vllm/ultra-low-latency-eagle3.json", json.dumps(args, indent=2) + "\n")
