"""Triton + TensorRT-LLM renders: configs parse into Triton's ModelConfig, carry the profile,
wire the ensemble correctly; build and server commands; golden renders per profile."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from serving.serving_helpers import canonical_model_config, parse_model_config
from tritonclient.grpc import model_config_pb2

from components.catalog import images
from components.catalog.instances import GPUS
from components.catalog.models import model
from components.catalog.profiles import PROFILES, LatencyProfile
from components.catalog.sizing import ENGINE_PRECISIONS
from components.serving._triton import (
    MODEL_NAMES,
    engine_key,
    render_model_repository,
    trtllm_build_args,
    trtllm_checkpoint_command,
)

L70B = model("meta-llama/Llama-3.1-70B-Instruct")
H200 = GPUS["H200"]


def repo(
    profile: LatencyProfile, precision: str = "fp8", tp: int = 1, **kw: object
) -> dict[str, model_config_pb2.ModelConfig]:
    rendered = render_model_repository(L70B, profile, tp, 1, precision=precision, gpu=H200, **kw)  # type: ignore[arg-type]
    return {path.split("/")[0]: parse_model_config(text) for path, text in rendered.items()}


def params(config: model_config_pb2.ModelConfig) -> dict[str, str]:
    return {key: value.string_value for key, value in config.parameters.items()}


@pytest.mark.parametrize(("profile_name", "precision"), itertools.product(PROFILES, ENGINE_PRECISIONS["tensorrt-llm"]))
def test_every_rendered_config_parses_into_tritons_model_config(profile_name: str, precision: str) -> None:
    # GIVEN any profile and precision WHEN the repository is rendered
    rendered = render_model_repository(L70B, PROFILES[profile_name], 2, 1, precision=precision, gpu=H200)
    # THEN it holds the four models, and each config parses with Triton's proto (unknown fields raise)
    assert sorted(rendered) == sorted(f"{name}/config.pbtxt" for name in MODEL_NAMES)
    for path, text in rendered.items():
        assert parse_model_config(text).name == path.split("/")[0]


def test_engine_model_is_decoupled_with_inflight_fused_batching() -> None:
    # GIVEN the tensorrt_llm model WHEN rendered THEN it streams and batches in flight
    trt = repo(PROFILES["balanced"])["tensorrt_llm"]
    assert trt.backend == "tensorrtllm"
    assert trt.model_transaction_policy.decoupled is True
    assert params(trt)["gpt_model_type"] == "inflight_fused_batching"


@pytest.mark.parametrize("profile_name", list(PROFILES))
def test_profile_settings_reach_the_engine_config(profile_name: str) -> None:
    # GIVEN a profile WHEN the engine config is rendered THEN every profile column is in it
    row = PROFILES[profile_name]
    trt = repo(row)["tensorrt_llm"]
    p = params(trt)
    assert trt.max_batch_size == row.max_batch_size
    assert trt.dynamic_batching.max_queue_delay_microseconds == row.max_queue_delay_microseconds
    assert p["kv_cache_free_gpu_mem_fraction"] == f"{row.kv_cache_free_gpu_mem_fraction:.2f}"
    assert p["batch_scheduler_policy"] == row.batch_scheduler_policy
    assert p["enable_kv_cache_reuse"] == str(row.enable_prefix_caching).lower()
    assert p["enable_chunked_context"] == str(row.enable_chunked_context).lower()
    assert p["cuda_graph_mode"] == str(row.cuda_graphs).lower()


def test_queue_delay_is_small_in_every_profile() -> None:
    # GIVEN all profiles WHEN rendered THEN Triton never holds a request for more than a millisecond
    for row in PROFILES.values():
        assert repo(row)["tensorrt_llm"].dynamic_batching.max_queue_delay_microseconds <= 1000


def test_engine_and_tokenizer_are_read_from_the_node_local_cache() -> None:
    # GIVEN an on-prem cache root WHEN rendered THEN the engine and tokenizer paths live under it
    configs = repo(PROFILES["ultra-low-latency"], cache_root="/var/lib/inferstack/models")
    engine_dir = params(configs["tensorrt_llm"])["gpt_model_path"]
    assert engine_dir == (
        "/var/lib/inferstack/models/meta-llama/Llama-3.1-70B-Instruct/trtllm/"
        f"h200-fp8-tp1-pp1-ultra-low-latency-trtllm{images.TRTLLM_VERSION}"
    )
    for stage in ("preprocessing", "postprocessing"):
        assert (
            params(configs[stage])["tokenizer_dir"] == "/var/lib/inferstack/models/meta-llama/Llama-3.1-70B-Instruct/hf"
        )


def test_preprocessing_declares_every_tensor_the_upstream_script_looks_up_at_load() -> None:
    # GIVEN TensorRT-LLM's preprocessing/1/model.py, which reads these configs in initialize()
    # (a missing one fails the model load, multimodal ones included)
    required_outputs = {
        "INPUT_ID", "DECODER_INPUT_ID", "REQUEST_INPUT_LEN", "REQUEST_DECODER_INPUT_LEN", "BAD_WORDS_IDS",
        "STOP_WORDS_IDS", "OUT_END_ID", "OUT_PAD_ID", "OUT_PROMPT_TABLE_EXTRA_IDS", "PIXEL_VALUES", "IMAGE_SIZES",
    }  # fmt: skip
    required_inputs = {"EMBEDDING_BIAS_WORDS", "EMBEDDING_BIAS_WEIGHTS"}
    # WHEN the preprocessing config is rendered
    pre = repo(PROFILES["balanced"])["preprocessing"]
    # THEN it declares them, and the key it reads unconditionally
    assert required_outputs <= {t.name for t in pre.output}
    assert required_inputs <= {t.name for t in pre.input}
    assert "multimodal_model_path" in params(pre)


def test_ensemble_wires_only_tensors_its_models_declare() -> None:
    # GIVEN the rendered repository (Triton refuses to load an ensemble that maps unknown tensors)
    configs = repo(PROFILES["balanced"])
    ensemble = configs["ensemble"]
    ensemble_inputs = {t.name for t in ensemble.input}
    produced: set[str] = set()
    # WHEN each step's maps are checked against the model it calls
    for step in ensemble.ensemble_scheduling.step:
        callee = configs[step.model_name]
        assert set(step.input_map) <= {t.name for t in callee.input}, step.model_name
        assert set(step.output_map) <= {t.name for t in callee.output}, step.model_name
        # THEN every tensor a step consumes is an ensemble input or an earlier step's output
        assert set(step.input_map.values()) <= ensemble_inputs | produced, step.model_name
        produced |= set(step.output_map.values())
    # AND every ensemble output is produced, every required callee input is fed
    assert {t.name for t in ensemble.output} <= produced
    for step in ensemble.ensemble_scheduling.step:
        required = {t.name for t in configs[step.model_name].input if not t.optional}
        assert required <= set(step.input_map), step.model_name


def test_composing_models_accept_the_ensemble_batch() -> None:
    # GIVEN Triton's rule that an ensemble's max_batch_size may not exceed its models'
    configs = repo(PROFILES["throughput"])
    # WHEN rendered THEN every model shares the profile's batch size
    assert {c.max_batch_size for c in configs.values()} == {PROFILES["throughput"].max_batch_size}


def test_unsupported_tp_is_refused() -> None:
    # GIVEN TP=3 WHEN the repository is rendered THEN it raises before writing anything
    with pytest.raises(ValueError, match="power of two"):
        render_model_repository(L70B, PROFILES["balanced"], 3, 1, precision="fp8", gpu=H200)


@pytest.mark.parametrize("profile_name", list(PROFILES))
def test_golden_repository_per_profile(profile_name: str, golden: Callable[[str, str], None]) -> None:
    # GIVEN the prod 70B FP8 model at TP=1 on H200 WHEN rendered per profile
    rendered = render_model_repository(L70B, PROFILES[profile_name], 1, 1, precision="fp8", gpu=H200)
    # THEN each config, in protobuf's canonical text form, matches its golden file
    for path, text in sorted(rendered.items()):
        golden(f"triton/{profile_name}/{path}", canonical_model_config(text))


# --- engine build ----------------------------------------------------------------------------


def test_fp8_checkpoint_quantizes_weights_and_kv_cache_sharded_for_tp() -> None:
    # GIVEN FP8 at TP=2 WHEN the checkpoint step is rendered THEN it calibrates FP8 weights and KV cache
    cmd = trtllm_checkpoint_command(L70B, "fp8", 2, 1, hf_dir="/in", checkpoint_dir="/ckpt")
    joined = " ".join(cmd)
    assert "--qformat fp8" in joined and "--kv_cache_dtype fp8" in joined
    assert "--tp_size 2" in joined and "--pp_size 1" in joined
    assert cmd[cmd.index("--output_dir") + 1] == "/ckpt"


def test_bf16_checkpoint_is_exported_unquantized() -> None:
    # GIVEN BF16 WHEN the checkpoint step is rendered THEN it exports full precision, no calibration
    cmd = trtllm_checkpoint_command(L70B, "bf16", 4, 1, hf_dir="/in", checkpoint_dir="/ckpt")
    assert cmd[cmd.index("--qformat") + 1] == "full_prec"
    assert "--kv_cache_dtype" not in cmd and "--calib_size" not in cmd


def test_int4_checkpoint_uses_awq() -> None:
    # GIVEN INT4 WHEN the checkpoint step is rendered THEN it is AWQ with FP16 activations
    cmd = trtllm_checkpoint_command(
        model("meta-llama/Llama-3.2-3B-Instruct"), "int4", 1, 1, hf_dir="/i", checkpoint_dir="/c"
    )
    assert cmd[cmd.index("--qformat") + 1] == "int4_awq"
    assert cmd[cmd.index("--dtype") + 1] == "float16"


def test_build_bakes_in_the_profile_limits() -> None:
    # GIVEN the ultra-low-latency profile WHEN the trtllm-build line is rendered
    row = PROFILES["ultra-low-latency"]
    cmd = trtllm_build_args(L70B, "fp8", 1, 1, row, checkpoint_dir="/ckpt", output_dir="/engine")
    # THEN the engine's limits are the profile's, and KV reuse / chunked context are buildable
    assert cmd[0] == "trtllm-build"
    assert cmd[cmd.index("--max_batch_size") + 1] == str(row.max_batch_size)
    assert cmd[cmd.index("--max_num_tokens") + 1] == str(row.max_num_batched_tokens)
    assert cmd[cmd.index("--max_seq_len") + 1] == str(row.max_model_len)
    assert cmd[cmd.index("--use_paged_context_fmha") + 1] == "enable"
    assert cmd[cmd.index("--use_fp8_context_fmha") + 1] == "enable"


def test_bf16_build_has_no_fp8_attention() -> None:
    # GIVEN BF16 WHEN the build is rendered THEN FP8 context attention is not requested
    cmd = trtllm_build_args(L70B, "bf16", 4, 1, PROFILES["balanced"], checkpoint_dir="/c", output_dir="/e")
    assert "--use_fp8_context_fmha" not in cmd


def test_engine_key_changes_with_everything_baked_into_the_engine() -> None:
    # GIVEN two builds that differ in GPU, precision, TP or profile WHEN keyed THEN all keys differ
    base = (H200, "fp8", 1, 1, PROFILES["balanced"])
    variants = [
        base,
        (GPUS["H100"], "fp8", 1, 1, PROFILES["balanced"]),
        (H200, "bf16", 1, 1, PROFILES["balanced"]),
        (H200, "fp8", 2, 1, PROFILES["balanced"]),
        (H200, "fp8", 1, 2, PROFILES["balanced"]),
        (H200, "fp8", 1, 1, PROFILES["throughput"]),
    ]
    assert len({engine_key(*v) for v in variants}) == len(variants)


def test_engine_key_names_the_tensorrt_llm_version_that_builds_it() -> None:
    # GIVEN the kit's TensorRT-LLM (the build image's tag): an engine built by one version does not load in another
    key = engine_key(H200, "fp8", 1, 1, PROFILES["balanced"])
    # THEN the key (the store's folder and the node cache's) names that version: a kit that moves to another
    # TensorRT-LLM builds into a new folder, and a node's cache of the old engine is never served by the new Triton
    assert key.endswith(f"-trtllm{images.TRTLLM_VERSION}"), key
    assert images.TRTLLM_BUILD.startswith(f"nvcr.io/nvidia/tensorrt-llm/release:{images.TRTLLM_VERSION}@sha256:")
