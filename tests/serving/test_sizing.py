"""Sizing: the facts.md roofline examples, KV cache per token, the fit check and the derived TP."""

from __future__ import annotations

import re

import pytest

from components.catalog.instances import GPUS
from components.catalog.models import ModelSpec, model
from components.catalog.profiles import PROFILES
from components.catalog.sizing import (
    ALLREDUCE_LATENCY_S,
    SizingError,
    check_fit,
    derive_tensor_parallel,
    engine_precision_problem,
    itl_floor,
    kv_cache_bytes_per_token,
    serving_context_tokens,
    tensor_parallel_problem,
    weight_bytes,
)
from components.serving._placement import place
from helpers import ROOT, raw_environment
from stacks.environment import load_environment

L8B = model("meta-llama/Llama-3.1-8B-Instruct")
L70B = model("meta-llama/Llama-3.1-70B-Instruct")
L405B = model("meta-llama/Llama-3.1-405B-Instruct")
QWEN = model("Qwen/Qwen2.5-1.5B-Instruct")
H100, H200, A100 = GPUS["H100"], GPUS["H200"], GPUS["A100"]


# --- facts.md worked examples -----------------------------------------------------------------


def test_70b_fp8_weighs_70_6_gb() -> None:
    # GIVEN Llama-3.1-70B WHEN stored in FP8 THEN it weighs 70.6 GB (facts.md)
    assert weight_bytes(L70B, "fp8") / 1e9 == pytest.approx(70.6, abs=0.05)


def test_roofline_70b_fp8_on_one_h200_is_14_7_ms() -> None:
    # GIVEN 70B in FP8 on one H200 WHEN the decode floor is computed THEN it is ~14.7 ms, no all-reduce
    itl = itl_floor(L70B, H200, "fp8", tp=1)
    assert itl.total_ms == pytest.approx(14.7, rel=0.02)
    assert itl.allreduce_ms == 0


def test_roofline_70b_fp16_on_four_h100_reads_weights_in_10_5_ms() -> None:
    # GIVEN 70B in FP16 (141 GB) over 4 H100s WHEN the floor is computed
    itl = itl_floor(L70B, H100, "fp16", tp=4)
    # THEN the weight-read term is ~10.5 ms (facts.md) ...
    assert itl.weight_read_ms == pytest.approx(10.5, rel=0.02)
    # ... and TP adds 80 layers x 2 all-reduces of at least the fixed latency each
    assert itl.allreduce_ms >= 80 * 2 * ALLREDUCE_LATENCY_S * 1e3
    assert itl.total_ms == pytest.approx(itl.weight_read_ms + itl.allreduce_ms)


def test_roofline_8b_fp16_on_h200_is_3_3_ms() -> None:
    # GIVEN 8B in FP16 (16 GB) on an H200 WHEN the floor is computed THEN it is ~3.3 ms
    assert itl_floor(L8B, H200, "fp16", tp=1).total_ms == pytest.approx(3.3, rel=0.02)


@pytest.mark.parametrize(
    ("m", "kib"),
    [(L8B, 128), (L70B, 320), (L405B, 504)],
    ids=["8B", "70B", "405B"],
)
def test_kv_cache_per_token_in_bf16_matches_facts(m: ModelSpec, kib: int) -> None:
    # GIVEN a Llama 3.1 model WHEN its BF16 KV cache per token is computed THEN it matches facts.md
    assert kv_cache_bytes_per_token(m, "bf16") == kib * 1024


def test_fp8_halves_the_kv_cache() -> None:
    # GIVEN FP8 serving (FP8 KV cache) WHEN sizing KV per token THEN it is half of BF16
    assert kv_cache_bytes_per_token(L70B, "fp8") * 2 == kv_cache_bytes_per_token(L70B, "bf16")


def test_int4_weighs_a_quarter_of_bf16_but_keeps_a_16_bit_kv_cache() -> None:
    # GIVEN an edge model in INT4 WHEN sized THEN weights shrink 4x and the KV cache does not
    assert weight_bytes(QWEN, "int4") * 4 == weight_bytes(QWEN, "bf16")
    assert kv_cache_bytes_per_token(QWEN, "int4") == kv_cache_bytes_per_token(QWEN, "bf16")


# --- fit check -------------------------------------------------------------------------------


def test_70b_fp8_fits_one_h200_with_headroom() -> None:
    # GIVEN 70B FP8 and an 8K-token KV reserve WHEN checked on one H200 THEN it fits with room to spare
    fit = check_fit(L70B, H200, "fp8", tp=1, memory_utilization=0.9, kv_reserve_tokens=8192)
    assert fit.fits
    assert fit.headroom_gb > 50


def test_70b_bf16_does_not_fit_one_h100_and_the_message_quotes_the_numbers() -> None:
    # GIVEN 70B in BF16 (141 GB) on one 80 GB H100
    fit = check_fit(L70B, H100, "bf16", tp=1, memory_utilization=0.9, kv_reserve_tokens=8192)
    # WHEN checked THEN it does not fit, and the explanation carries every number a user needs
    assert not fit.fits
    text = fit.explain()
    assert "141.1 GB of weights" in text
    assert "2.7 GB of KV cache (8,192 tokens)" in text
    assert "77.3 GB (85.9 GB x 0.90)" in text
    assert text.endswith("does not fit")


def test_tensor_and_pipeline_parallelism_split_weights_and_kv_per_gpu() -> None:
    # GIVEN the same model at TP=1 and at TP=4 x PP=2 WHEN checked THEN per-GPU bytes drop 8x
    one = check_fit(L405B, H200, "fp8", tp=1, kv_reserve_tokens=32_768)
    eight = check_fit(L405B, H200, "fp8", tp=4, pp=2, kv_reserve_tokens=32_768)
    assert eight.weights_gb_per_gpu == pytest.approx(one.weights_gb_per_gpu / 8)
    assert eight.kv_reserve_gb_per_gpu == pytest.approx(one.kv_reserve_gb_per_gpu / 8)


def test_kv_reserve_follows_the_profile_context_capped_by_the_model() -> None:
    # GIVEN the throughput profile (128K context) WHEN serving a 32K-context model THEN 32K is reserved
    assert serving_context_tokens(QWEN, PROFILES["throughput"]) == 32_768
    assert serving_context_tokens(L8B, PROFILES["ultra-low-latency"]) == PROFILES["ultra-low-latency"].max_model_len


# --- tensor parallelism ----------------------------------------------------------------------


def test_derived_tp_is_1_for_70b_fp8_on_h200_at_a_20_ms_target() -> None:
    # GIVEN the prod 70B FP8 model on the H200 pool and design.md's ITL < 20 ms
    choice = derive_tensor_parallel(L70B, H200, "fp8", itl_target_ms=20, gpus_per_node=8)
    # WHEN TP is derived THEN one GPU is enough (14.7 ms floor, fits)
    assert choice.tp == 1
    assert choice.itl.total_ms == pytest.approx(14.7, rel=0.02)


def test_a_model_that_fits_but_misses_the_itl_target_gets_more_tp() -> None:
    # GIVEN 70B FP8 on H100: it fits one GPU but its floor there is ~21 ms
    choice = derive_tensor_parallel(L70B, H100, "fp8", itl_target_ms=20, gpus_per_node=8)
    # WHEN TP is derived THEN TP=1 was rejected for latency, not memory, and TP=2 is chosen
    (first_fit, first_itl), _ = choice.considered
    assert first_fit.fits and first_itl.total_ms > 20
    assert choice.tp == 2


def test_a_tighter_itl_target_buys_more_tp() -> None:
    # GIVEN the same model and GPU WHEN the ITL target drops from 20 to 10 ms THEN TP grows
    assert derive_tensor_parallel(L70B, H200, "fp8", itl_target_ms=10, gpus_per_node=8).tp == 2


def test_70b_fp16_on_h100_derives_tp4_like_the_facts_example() -> None:
    # GIVEN 70B FP16 on H100 and a 20 ms target WHEN derived THEN TP=4 (10.5 ms + all-reduce)
    choice = derive_tensor_parallel(L70B, H100, "fp16", itl_target_ms=20, gpus_per_node=8)
    assert choice.tp == 4
    assert choice.itl.total_ms < 12


def test_no_tp_within_a_node_fits_405b_bf16_and_the_error_lists_every_candidate() -> None:
    # GIVEN 405B in BF16 (812 GB) and 8 H100s per node
    # WHEN TP is derived THEN it refuses, quoting each candidate and the ways out
    with pytest.raises(SizingError) as caught:
        derive_tensor_parallel(L405B, H100, "bf16", itl_target_ms=20, gpus_per_node=8)
    message = str(caught.value)
    for tp in (1, 2, 4, 8):
        assert f"TP={tp}:" in message
    assert "pipeline parallelism" in message
    assert [fit.tp for fit, _ in caught.value.considered] == [1, 2, 4, 8]


def test_405b_fp8_fits_one_h200_node_at_tp8() -> None:
    # GIVEN 405B in FP8 on H200 WHEN derived THEN the whole node at TP=8 fits and meets 20 ms
    choice = derive_tensor_parallel(L405B, H200, "fp8", itl_target_ms=20, gpus_per_node=8)
    assert choice.tp == 8
    assert choice.fit.fits


def test_tp_never_exceeds_the_kv_heads() -> None:
    # GIVEN Qwen2.5-1.5B with 2 KV heads and an impossible 0.1 ms target
    with pytest.raises(SizingError) as caught:
        derive_tensor_parallel(QWEN, H100, "bf16", itl_target_ms=0.1, gpus_per_node=8)
    # WHEN derived THEN only TP 1 and 2 were tried
    assert [fit.tp for fit, _ in caught.value.considered] == [1, 2]


def test_tp_that_does_not_divide_the_kv_heads_is_refused_with_the_allowed_values() -> None:
    # GIVEN 70B (64 heads, 8 KV heads) WHEN TP=16 is asked THEN the message names heads and choices
    problem = tensor_parallel_problem(L70B, 16)
    assert problem is not None
    assert "64 attention heads and 8 KV heads" in problem
    assert "allowed: 1, 2, 4, 8" in problem


def test_tp_that_is_not_a_power_of_two_is_refused() -> None:
    # GIVEN TP=3 WHEN validated THEN it is refused; TP=2 passes
    assert "power of two" in (tensor_parallel_problem(L8B, 3) or "")
    assert tensor_parallel_problem(L8B, 2) is None


# --- engine / precision ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["vllm", "tensorrt-llm"])
def test_fp8_is_refused_on_a_gpu_without_fp8_tensor_cores(engine: str) -> None:
    # GIVEN an A100 pool WHEN FP8 is configured THEN the reason says so and suggests bf16
    problem = engine_precision_problem(engine, "fp8", A100)
    assert problem is not None and "FP8 tensor cores" in problem and "bf16" in problem
    assert engine_precision_problem(engine, "fp8", H100) is None


def test_unknown_precision_and_engine_are_refused_with_choices() -> None:
    # GIVEN typos WHEN validated THEN the reasons list what is supported
    assert "it runs: fp8, bf16, fp16, int4" in (engine_precision_problem("vllm", "int8", H100) or "")
    assert "known: vllm, tensorrt-llm" in (engine_precision_problem("sglang", "fp8", H100) or "")


def test_itl_floor_counts_the_kv_cache_of_a_full_batch() -> None:
    # GIVEN Llama 3.1 70B in FP8 on two H200s (4.8 TB/s each): 163,840 KV bytes per token (80 layers x 8 KV heads x
    # 128 x K and V x 1 byte), and room for 200 GB of KV beside the weights. WHEN the floor is taken at the
    # ultra-low-latency profile's 64 x 8,192 tokens
    weights_only = itl_floor(L70B, H200, "fp8", 2)
    full = itl_floor(L70B, H200, "fp8", 2, batch=64, context_tokens=8192)
    # THEN the whole batch's KV reads (86 GB over 2 GPUs, ~8.9 ms) come on top of the weights (~7.3 ms)
    assert full.kv_read_ms == pytest.approx(64 * 8192 * 163_840 / (2 * 4.8e12) * 1e3, rel=0.02)
    assert weights_only.kv_read_ms == 0 and full.weight_read_ms == weights_only.weight_read_ms


def test_itl_floor_reads_no_more_kv_cache_than_the_gpu_holds() -> None:
    # GIVEN the same model and batch on one H200: 136.3 GB usable (x 0.90), 70.6 GB of it weights, so at most
    # 65.7 GB of KV cache, less than the batch's 86 GB (the engine admits only the sequences whose KV fits)
    full = itl_floor(L70B, H200, "fp8", 1, batch=64, context_tokens=8192, memory_utilization=0.90)
    held = H200.memory_gb * 1e9 * 0.90 - weight_bytes(L70B, "fp8")
    # WHEN the floor is taken THEN a step reads what the GPU holds, not the 86 GB it cannot hold
    assert full.kv_read_ms == pytest.approx(held / 4.8e12 * 1e3, rel=0.01)
    # AND TP1 still misses 20 ms (~28.4 ms): the KV cache of a full GPU alone takes 13.7 ms to read
    assert full.total_ms == pytest.approx(28.4, abs=0.1)


def test_the_throughput_profile_derives_a_tp_from_the_kv_cache_a_gpu_holds() -> None:
    # GIVEN 8B in BF16 on H100s at the throughput profile (1,024 sequences x 131,072 tokens: 17.6 TB of KV cache,
    # which no node holds) and a 30 ms ITL target
    profile = PROFILES["throughput"]
    choice = derive_tensor_parallel(
        L8B, H100, "bf16", itl_target_ms=30, gpus_per_node=8,
        memory_utilization=profile.gpu_memory_utilization, kv_reserve_tokens=profile.max_model_len,
        batch=profile.max_batch_size, context_tokens=profile.max_model_len,
    )  # fmt: skip
    # WHEN TP is derived THEN one GPU serves it: a step reads at most its whole usable memory (81.6 GB, ~24.4 ms)
    assert choice.tp == 1
    assert choice.itl.total_ms == pytest.approx(H100.memory_gb * 0.95 / 3.35, rel=0.01)


def test_the_readmes_derived_tp_example_is_what_prod_derives() -> None:
    # GIVEN the README's worked example of a derived TP: prod's 70B FP8 on its H200 pool, and on its H100 pool
    readme = (ROOT / "README.md").read_text()
    claims = {
        gpu: re.search(rf"TP=(\d) on\s+{gpu} \(([\d.]+) ms", readme.split("**Derived TP.**", 1)[1].split("\n- ", 1)[0])
        for gpu in ("H200", "H100")
    }
    env = load_environment(raw_environment("prod"), "stacks/Pulumi.prod.yaml")
    (llama_70b,) = [m for m in env.models if m.model == L70B.model_id and m.tensor_parallel is None]
    # WHEN the kit places it on each pool (the SLO holds at the profile's full batch and context)
    for gpu, pool in (("H200", "h200"), ("H100", "h100")):
        placed = place(llama_70b.model_copy(update={"pool": pool}), env.pool(pool))
        # THEN the README quotes the TP it derives and that TP's ITL floor
        claim = claims[gpu]
        assert claim is not None, f"README: no 'TP=<n> on {gpu} (<ms> ms' under **Derived TP.**"
        assert (int(claim[1]), float(claim[2])) == (placed.tp, round(placed.itl.total_ms, 1))
