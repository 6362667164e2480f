"""Container images the kit deploys, pinned in one place.

Third-party images are pinned by tag here; the kit's own images (gateway, model-loader) come
from the stack's registry at ``KIT_IMAGE_TAG``, which ECR keeps immutable.
"""

from __future__ import annotations

from typing import Final

VLLM: Final = "vllm/vllm-openai:v0.11.0"
"""vLLM's OpenAI-compatible server image (Docker Hub ``vllm/vllm-openai``)."""
TRITON_TRTLLM: Final = "nvcr.io/nvidia/tritonserver:25.09-trtllm-python-py3"
"""Triton with the TensorRT-LLM backend (NGC). Also runs ``trtllm-build`` for the engine Job."""
TRITON_MODEL_TEMPLATES: Final = "/app/all_models/inflight_batcher_llm"
"""Where the Triton TRT-LLM image carries the inflight-batcher model repository (model.py files);
the kit copies it and overlays its own rendered ``config.pbtxt`` files."""
LLAMACPP_TAG: Final = "b10257"
"""llama.cpp release (github.com/ggml-org/llama.cpp/releases/tag/b10257); its images are published as
``ghcr.io/ggml-org/llama.cpp:server-<tag>`` (CPU) and ``:server-cuda-<tag>`` (CUDA)."""
LLAMACPP_CPU: Final = f"ghcr.io/ggml-org/llama.cpp:server-{LLAMACPP_TAG}"
LLAMACPP_CUDA: Final = f"ghcr.io/ggml-org/llama.cpp:server-cuda-{LLAMACPP_TAG}"
"""llama-server with the CUDA backend: used when the model is offloaded to a GPU."""
REDIS: Final = "redis:8.2.2"
"""Redis 8 Open Source: the official image includes the Query Engine (FT.* vector search)."""
KIT_IMAGE_TAG: Final = "0.1.0"
"""Tag of the kit's own images; build and push them first (README, "Images")."""
