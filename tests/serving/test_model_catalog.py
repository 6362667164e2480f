"""The model catalog: shapes from config.json, parameter counts that match the published ones."""

from __future__ import annotations

import pytest

from components.catalog.models import (
    MODEL_CACHE_ROOT,
    MODELS,
    hf_checkpoint_dir,
    model,
    trtllm_engine_dir,
)

# Published totals. Llama: model.safetensors.index.json `metadata.total_size` / 2 bytes per BF16
# parameter. Qwen2.5-1.5B: 1.54B in the Qwen2.5 report; checked exactly through its non-embedding
# count (1.31B) below.
PUBLISHED_PARAMS = {
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    "meta-llama/Llama-3.1-70B-Instruct": 70_553_706_496,
    "meta-llama/Llama-3.1-405B-Instruct": 405_853_388_800,
    "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824,
}


@pytest.mark.parametrize(("model_id", "published"), PUBLISHED_PARAMS.items())
def test_parameter_count_derived_from_the_shape_matches_the_published_total(model_id: str, published: int) -> None:
    # GIVEN a catalog row typed in from config.json
    # WHEN its parameter count is derived from layers, widths and vocabulary
    # THEN it equals the published total, so no shape field is mistyped
    assert model(model_id).params == published


def test_qwen_parameter_count_matches_the_reported_sizes() -> None:
    # GIVEN Qwen2.5-1.5B, whose report gives 1.54B total and 1.31B non-embedding parameters
    qwen = model("Qwen/Qwen2.5-1.5B-Instruct")
    # WHEN the tied embedding is subtracted from the derived total
    non_embedding = qwen.params - qwen.vocab_size * qwen.hidden_size
    # THEN both round to the reported figures
    assert round(qwen.params / 1e9, 2) == 1.54
    assert round(non_embedding / 1e9, 2) == 1.31


def test_catalog_covers_the_three_llama_31_sizes_and_edge_models() -> None:
    # GIVEN the catalog WHEN listing it THEN prod sizes and at least one sub-4B edge model are there
    assert {"meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct",
            "meta-llama/Llama-3.1-405B-Instruct"} <= set(MODELS)  # fmt: skip
    assert any(m.params < 4e9 for m in MODELS.values())


def test_unknown_model_error_names_the_known_ids() -> None:
    # GIVEN a typo in a model id WHEN it is looked up THEN the error lists what exists
    with pytest.raises(KeyError, match=r"known: meta-llama/Llama-3\.1-8B-Instruct"):
        model("meta-llama/Llama-3.1-8B-instruct")


def test_cache_paths_live_under_the_nvme_raid_mount() -> None:
    # GIVEN the cloud cache root (nodeadm mounts the RAID0 array at /mnt/k8s-disks/0)
    # WHEN the checkpoint and engine folders of a model are derived
    # THEN both sit under it, and an engine key gets its own folder
    assert MODEL_CACHE_ROOT.startswith("/mnt/k8s-disks/0/")
    assert hf_checkpoint_dir("meta-llama/Llama-3.1-8B-Instruct") == (
        "/mnt/k8s-disks/0/inferstack/models/meta-llama/Llama-3.1-8B-Instruct/hf"
    )
    assert (
        trtllm_engine_dir("m/x", "h200-fp8-tp1-pp1-balanced", "/data/") == "/data/m/x/trtllm/h200-fp8-tp1-pp1-balanced"
    )
