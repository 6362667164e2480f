"""The llama.cpp engine: real server flags, GGUF fit on a small GPU or a CPU box, and the decode floor."""

from __future__ import annotations

import pytest

from components.catalog import images
from components.catalog.instances import GPUS
from components.catalog.models import GGUF_FILES, MODELS
from components.catalog.profiles import PROFILES
from components.edge.specs import EdgeNodeSpec
from components.serving._llamacpp import llamacpp_args
from components.serving._placement import PlacementProblem, place
from components.serving.inference_server import llamacpp_resources
from components.specs import ModelDeploySpec

# Flags of llama-server as listed in ggml-org/llama.cpp tools/server/README.md (auto-generated usage tables):
# every argument the kit renders must be one of them. Long and short spellings both appear there.
README_FLAGS = {
    "-m", "--model", "-a", "--alias", "--host", "--port", "-t", "--threads", "--metrics", "--no-webui",
    "--embeddings", "--embedding", "--pooling", "-np", "--parallel", "-c", "--ctx-size", "-ngl", "--n-gpu-layers",
    "-cram", "--cache-ram",
}  # fmt: skip

L4_NODE = EdgeNodeSpec(name="site", cpu=16, memory_gib=64, gpu="L4")
CPU_NODE = EdgeNodeSpec(name="site", cpu=8, memory_gib=32)


def spec(model: str = "meta-llama/Llama-3.2-3B-Instruct", **kw: object) -> ModelDeploySpec:
    return ModelDeploySpec.model_validate({"name": "m", "model": model, "engine": "llamacpp", "pool": "site", **kw})


def flags(args: list[str]) -> set[str]:
    return {a for a in args if a.startswith("-")}


@pytest.mark.parametrize("model_id", sorted(GGUF_FILES))
def test_every_rendered_flag_is_a_real_llama_server_flag(model_id: str) -> None:
    model = MODELS[model_id]
    gguf = next(iter(GGUF_FILES[model_id].values()))
    for offload in (True, False):
        args = llamacpp_args(model, gguf, PROFILES["ultra-low-latency"], gpu_offload=offload, threads=4)
        assert flags(args) <= README_FLAGS, flags(args) - README_FLAGS
        # The default port moved (8080 -> 9931) and the default host is loopback: both always passed.
        assert args[args.index("--port") + 1] == "8080"
        assert args[args.index("--host") + 1] == "0.0.0.0"
        assert "--metrics" in args


def test_images_are_pinned_to_one_release_tag() -> None:
    assert f"ghcr.io/ggml-org/llama.cpp:server-{images.LLAMACPP_TAG}" == images.LLAMACPP_CPU
    assert f"ghcr.io/ggml-org/llama.cpp:server-cuda-{images.LLAMACPP_TAG}" == images.LLAMACPP_CUDA
    assert images.LLAMACPP_TAG.startswith("b") and images.LLAMACPP_TAG[1:].isdigit()


def test_a_3b_model_in_4_bits_fits_an_l4_with_every_layer_offloaded() -> None:
    placed = place(spec(), L4_NODE)
    assert placed.gpu_offload and placed.gguf is not None and placed.gguf.file.endswith("Q4_K_M.gguf")
    assert placed.fit.fits and placed.fit.gpu == "L4"
    # 2.02 GB read per token at 300 GB/s: a 6.7 ms floor, under the 20 ms default target.
    assert placed.itl.total_ms == pytest.approx(2.02 / 300 * 1000, rel=1e-6)
    assert placed.world_size == 1


def test_on_a_cpu_box_the_decode_floor_refuses_a_20_ms_target_and_names_it() -> None:
    with pytest.raises(PlacementProblem) as caught:
        place(spec(), CPU_NODE)
    assert caught.value.key == "slo.itlP99Ms"
    assert "40.4 ms" in caught.value.allowed  # 2.02 GB at 50 GB/s


def test_on_a_cpu_box_with_a_realistic_target_it_runs_on_cpu_and_takes_no_gpu() -> None:
    placed = place(spec(slo={"itlP99Ms": 60}), CPU_NODE)
    assert not placed.gpu_offload and placed.world_size == 0
    assert placed.fit.fits and placed.fit.gpu == "CPU of site"


def test_a_model_too_big_for_the_gpu_is_refused_with_the_numbers() -> None:
    small = EdgeNodeSpec(name="site", cpu=8, memory_gib=32, gpu="RTX4000Ada")
    with pytest.raises(PlacementProblem) as caught:
        place(spec("microsoft/Phi-3-mini-4k-instruct", quantization="F16", profile="throughput"), small)
    assert caught.value.key == "model"
    assert "does not fit" in caught.value.allowed and "RTX4000Ada" in caught.value.allowed


def test_an_unknown_quantization_lists_the_files_there_are() -> None:
    with pytest.raises(PlacementProblem) as caught:
        place(spec(quantization="Q3_K_S"), L4_NODE)
    assert caught.value.key == "quantization" and "Q4_K_M, Q8_0" in caught.value.allowed


def test_the_embedding_model_stays_on_cpu_in_embedding_mode_even_on_a_gpu_node() -> None:
    placed = place(spec("sentence-transformers/all-MiniLM-L6-v2"), L4_NODE)
    assert not placed.gpu_offload and placed.gguf is not None and placed.gguf.file.endswith("Q8_0.gguf")
    args = llamacpp_args(placed.model, placed.gguf, placed.profile, gpu_offload=False, threads=2)
    assert "--embeddings" in args and args[args.index("--n-gpu-layers") + 1] == "0"


def test_the_prompt_cache_in_host_ram_is_bounded_and_counted_in_the_pods_memory() -> None:
    # GIVEN the bundled edge model (3B Q4_K_M on an L4, ultra-low-latency: 4 slots of 8192 tokens)
    placed = place(spec(), L4_NODE)
    assert placed.gguf is not None
    args = llamacpp_args(placed.model, placed.gguf, placed.profile, gpu_offload=True, threads=2)
    # THEN llama-server keeps at most one slot's f16 KV of idle prompts in host RAM, not its 8192 MiB default
    # (28 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes x 8192 tokens = 896 MiB)
    assert args[args.index("--cache-ram") + 1] == "896"
    # AND the pod's memory holds it beside the weights and 1 GiB of runtime: ceil(1.88 + 0.875 + 1) GiB
    resources = llamacpp_resources(placed, L4_NODE)
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "4Gi"


def test_an_embedding_server_keeps_no_prompt_cache() -> None:
    placed = place(spec("sentence-transformers/all-MiniLM-L6-v2"), L4_NODE)
    assert placed.gguf is not None
    args = llamacpp_args(placed.model, placed.gguf, placed.profile, gpu_offload=False, threads=2)
    assert args[args.index("--cache-ram") + 1] == "0"


def test_vllm_refuses_an_explicit_quantization_and_says_why() -> None:
    vllm = ModelDeploySpec.model_validate(
        {"name": "m", "model": "meta-llama/Llama-3.2-3B-Instruct", "engine": "vllm", "pool": "site",
         "precision": "int4", "quantization": "AWQ"}
    )  # fmt: skip
    with pytest.raises(PlacementProblem) as caught:
        place(vllm, L4_NODE)
    assert caught.value.key == "quantization" and "Marlin" in caught.value.allowed


def test_vllm_int4_on_an_l4_stays_possible() -> None:
    vllm = ModelDeploySpec.model_validate(
        {
            "name": "m",
            "model": "meta-llama/Llama-3.2-3B-Instruct",
            "engine": "vllm",
            "pool": "site",
            "precision": "int4",
            # The decode floor counts the KV cache of a full batch at the profile's context (issue 12's sizing):
            # a 3B model on one L4 serves a looser inter-token target than an H100 pool's 20 ms.
            "slo": {"itlP99Ms": 300},
        }
    )
    placed = place(vllm, L4_NODE)
    assert placed.fit.fits and placed.tp == 1


def test_edge_gpus_have_fp8_tensor_cores() -> None:
    for name in ("L4", "RTX4000Ada", "RTX6000Ada"):
        assert GPUS[name].fp8_tflops is not None
