"""Latency profiles: one table, ordered from latency to throughput."""

from __future__ import annotations

import pytest

from components.catalog.profiles import PROFILES, profile

ORDER = ["ultra-low-latency", "balanced", "throughput"]


def test_the_three_profiles_exist() -> None:
    # GIVEN the table WHEN listed THEN it holds exactly the three documented profiles
    assert list(PROFILES) == ORDER


@pytest.mark.parametrize(
    "column",
    ["max_batch_size", "max_num_batched_tokens", "max_queue_delay_microseconds", "keda_queue_depth_per_replica"],
)
def test_latency_columns_grow_from_ultra_low_latency_to_throughput(column: str) -> None:
    # GIVEN a column that trades latency for throughput WHEN read along the table THEN it only grows
    values = [getattr(PROFILES[name], column) for name in ORDER]
    assert values == sorted(values) and values[0] < values[-1]


def test_ultra_low_latency_never_holds_a_request_and_never_evicts_one() -> None:
    # GIVEN the ultra-low-latency row WHEN read THEN no batching delay, no eviction, scale at one waiter
    ull = profile("ultra-low-latency")
    assert ull.max_queue_delay_microseconds == 0
    assert ull.batch_scheduler_policy == "guaranteed_no_evict"
    assert ull.keda_queue_depth_per_replica == 1
    assert ull.cuda_graphs and ull.enable_prefix_caching and ull.enable_chunked_context


@pytest.mark.parametrize("name", ORDER)
def test_step_token_budget_admits_every_sequence(name: str) -> None:
    # GIVEN a profile WHEN vLLM validates it THEN max_num_batched_tokens >= max_num_seqs holds
    # (vLLM refuses to start otherwise: each running sequence needs a token per step)
    row = PROFILES[name]
    assert row.max_num_batched_tokens >= row.max_batch_size


@pytest.mark.parametrize("name", ORDER)
def test_memory_fractions_leave_headroom(name: str) -> None:
    # GIVEN a profile WHEN its memory fractions are read THEN they stay below the whole GPU
    row = PROFILES[name]
    assert 0.5 < row.gpu_memory_utilization < 1
    assert 0.5 < row.kv_cache_free_gpu_mem_fraction < 1


def test_unknown_profile_error_names_the_known_ones() -> None:
    # GIVEN a typo WHEN looked up THEN the error lists the profiles
    with pytest.raises(KeyError, match="known: ultra-low-latency, balanced, throughput"):
        profile("low-latency")
