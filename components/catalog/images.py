"""Container images the kit deploys, pinned in one place.

Third-party images are pinned by digest (``tag@sha256:…``): a tag can be re-pushed, a digest cannot.
Each digest below is one recorded publicly for that exact tag (cited); verify one with
``docker buildx imagetools inspect <image>`` before changing it. An image whose digest could not be
verified stays on its tag, listed in ``DIGEST_ALLOWLIST`` with the reason. The kit's own images (gateway,
model-loader) come from the stack's registry at ``KIT_IMAGE_TAG``, which ECR keeps immutable.
"""

from __future__ import annotations

from typing import Final

VLLM: Final = "vllm/vllm-openai:v0.11.0@sha256:014a95f21c9edf6abe0aea6b07353f96baa4ec291c427bb1176dc7c93a85845c"
"""vLLM's OpenAI-compatible server image (Docker Hub ``vllm/vllm-openai``). The digest of tag v0.11.0 as pinned
in several unrelated public repositories (e.g. Dockerfiles ``FROM vllm/vllm-openai:v0.11.0@sha256:014a95f2…``)."""
TRITON_TRTLLM: Final = "nvcr.io/nvidia/tritonserver:25.09-trtllm-python-py3"
# No public record of this tag's digest was found (NGC): on the allow-list below until one is verified.
"""Triton with the TensorRT-LLM backend (NGC). Also runs ``trtllm-build`` for the engine Job."""
TRITON_MODEL_TEMPLATES: Final = "/app/all_models/inflight_batcher_llm"
"""Where the Triton TRT-LLM image carries the inflight-batcher model repository (model.py files);
the kit copies it and overlays its own rendered ``config.pbtxt`` files."""
TRTLLM_VERSION: Final = "1.0.0"
"""The TensorRT-LLM that builds the engines and that Triton's backend loads them with (below). An engine is a
serialized TensorRT plan for one TensorRT-LLM version: the engine key names it (``_triton.engine_key``)."""
TRTLLM_BUILD: Final = (
    f"nvcr.io/nvidia/tensorrt-llm/release:{TRTLLM_VERSION}"
    "@sha256:e0d966e2daec1827046dd30c6143b39c947ef06ed3fb9ef9469c83a8643b29d7"
)
"""NVIDIA's TensorRT-LLM release container, for the engine build: it carries ``examples/quantization/quantize.py``
(the Triton image does not) and TensorRT-LLM 1.0.0, the version Triton 25.09's backend runs (Triton "Release
Compatibility Matrix", trtllm-python-py3 25.09: TensorRT-LLM 1.0.0), so the engine it builds loads there."""
REDIS: Final = "redis:8.2.2-bookworm@sha256:4521b581dbddea6e7d81f8fe95ede93f5648aaa66a9dacd581611bf6fe7527bd"
"""Redis 8 Open Source: the official image includes the Query Engine (FT.* vector search). ``8.2.2-bookworm`` is
the same image as ``8.2.2`` (Debian is the default variant); digest as pinned in public acceptance scripts."""
LLAMACPP_TAG: Final = "b10257"
"""llama.cpp release (github.com/ggml-org/llama.cpp/releases/tag/b10257); its images are published as
``ghcr.io/ggml-org/llama.cpp:server-<tag>`` (CPU) and ``:server-cuda-<tag>`` (CUDA)."""
LLAMACPP_CPU: Final = f"ghcr.io/ggml-org/llama.cpp:server-{LLAMACPP_TAG}"
LLAMACPP_CUDA: Final = f"ghcr.io/ggml-org/llama.cpp:server-cuda-{LLAMACPP_TAG}"
"""llama-server with the CUDA backend: used when the model is offloaded to a GPU."""
KIT_IMAGE_TAG: Final = "0.1.0"
KIT_IMAGES: Final = ("gateway", "model-loader")
"""The kit's own images (``images/<name>``): the cloud stack deploys each from its ECR repository of that name."""
"""Tag of the kit's own images; build and push them first (README, "Images")."""

NETWORK_OPERATOR_REPOSITORY: Final = "nvcr.io/nvidia/mellanox"
NETWORK_OPERATOR_VERSION: Final = "network-operator-v26.4.1"
"""Component images of a Network Operator release are tagged ``network-operator-v<release>`` (the example CRs
in Mellanox/network-operator ``example/crs/``); the NicClusterPolicy names each as repository/image/version."""
DOCA_DRIVER_VERSION: Final = "doca3.4.1-26.04-1.1.0.0-1"
"""The DOCA driver container of the 26.04 line (Mellanox/network-operator example NicClusterPolicy)."""
NETWORK_OPERATOR_COMPONENTS: Final = {
    "k8s-rdma-shared-dev-plugin": NETWORK_OPERATOR_VERSION,
    "multus-cni": NETWORK_OPERATOR_VERSION,
    "plugins": NETWORK_OPERATOR_VERSION,
    "ipoib-cni": NETWORK_OPERATOR_VERSION,
    "nvidia-k8s-ipam": NETWORK_OPERATOR_VERSION,
    "doca-driver": DOCA_DRIVER_VERSION,
}


def network_operator_image(name: str) -> str:
    return f"{NETWORK_OPERATOR_REPOSITORY}/{name}:{NETWORK_OPERATOR_COMPONENTS[name]}"


DIGEST_ALLOWLIST: Final = {
    **{
        image: "llama.cpp publishes a server image per build tag; no offline record of this tag's digest could be "
        "verified (pin it with docker buildx imagetools inspect before production)"
        for image in (LLAMACPP_CPU, LLAMACPP_CUDA)
    },
    TRITON_TRTLLM: "no public record of the digest of nvcr.io/nvidia/tritonserver:25.09-trtllm-python-py3 could be "
    "found offline; pin it (docker buildx imagetools inspect) before production",
    **{
        network_operator_image(name): "NicClusterPolicy names images by repository/image/version tag; the tags are "
        "the ones the pinned Network Operator release ships (no offline record of their digests)"
        for name in NETWORK_OPERATOR_COMPONENTS
    },
}
"""Third-party images still on a tag, each with the reason. Empty is the goal."""
THIRD_PARTY: Final = (
    VLLM,
    TRITON_TRTLLM,
    TRTLLM_BUILD,
    REDIS,
    LLAMACPP_CPU,
    LLAMACPP_CUDA,
    *(network_operator_image(name) for name in NETWORK_OPERATOR_COMPONENTS),
)
