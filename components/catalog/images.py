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
TRTLLM_BUILD: Final = "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
"""NVIDIA's TensorRT-LLM release container, for the engine build: it carries ``examples/quantization/quantize.py``
(the Triton image does not) and TensorRT-LLM 1.0.0, the version Triton 25.09's backend runs (Triton "Release
Compatibility Matrix", trtllm-python-py3 25.09: TensorRT-LLM 1.0.0), so the engine it builds loads there."""
REDIS: Final = "redis:8.2.2"
"""Redis 8 Open Source: the official image includes the Query Engine (FT.* vector search)."""
KIT_IMAGE_TAG: Final = "0.1.0"
"""Tag of the kit's own images; build and push them first (README, "Images")."""
