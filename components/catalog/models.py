"""The one catalog of model architectures the kit can size and serve.

Sizing (weight bytes, KV cache per token), tensor-parallel validation (it must divide the
attention and KV heads) and the engine renders read a model's shape from here; nothing else
repeats these numbers.

Source: each model's Hugging Face ``config.json`` (``hidden_size``, ``intermediate_size``,
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim`` or
``hidden_size / num_attention_heads``, ``vocab_size``, ``max_position_embeddings``,
``tie_word_embeddings``; Qwen2 adds biases on the q/k/v projections). The parameter count is
derived from that shape, not typed in: ``tests/serving/test_models.py`` checks it against the
totals the model cards publish (8.03B, 70.6B, 405.9B, 3.21B, 1.54B), so a wrong field fails a test.

Where a model lands on a node is also decided here (the node-local cache layout), because the
model loader, the vLLM arguments and the Triton model repository must all agree on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class ModelSpec:
    """The architecture of one decoder-only transformer, as config.json states it."""

    model_id: str
    """Hugging Face id, e.g. ``meta-llama/Llama-3.1-8B-Instruct``; also the served model name."""
    layers: int
    """``num_hidden_layers``."""
    hidden_size: int
    intermediate_size: int
    """Width of the gated MLP (three matrices: gate, up, down)."""
    attention_heads: int
    """``num_attention_heads``: tensor parallelism must divide it."""
    kv_heads: int
    """``num_key_value_heads`` (GQA): tensor parallelism must divide it too."""
    head_dim: int
    vocab_size: int
    max_context_tokens: int
    """``max_position_embeddings``: the longest context the model was trained for."""
    tied_embeddings: bool
    """``tie_word_embeddings``: the LM head reuses the embedding matrix (small models)."""
    qkv_bias: bool = False
    """Qwen2 carries biases on the q/k/v projections; Llama does not."""

    @property
    def name(self) -> str:
        """The id without its organisation, e.g. ``Llama-3.1-70B-Instruct``."""
        return self.model_id.rsplit("/", 1)[-1]

    @property
    def params(self) -> int:
        """Total parameter count, derived from the shape.

        Per layer: q and o projections (``hidden x heads x head_dim`` each), k and v
        (``hidden x kv_heads x head_dim`` each), the gated MLP (3 x ``hidden x intermediate``)
        and two RMSNorm weight vectors; plus the embedding, the LM head (unless tied) and the
        final norm.
        """
        q_width = self.attention_heads * self.head_dim
        kv_width = self.kv_heads * self.head_dim
        attention = 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        mlp = 3 * self.hidden_size * self.intermediate_size
        per_layer = attention + mlp + 2 * self.hidden_size
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return embeddings + self.layers * per_layer + self.hidden_size


def _llama31(size: str, layers: int, hidden: int, intermediate: int, heads: int) -> ModelSpec:
    # Llama 3.1 shares everything but depth and width: GQA with 8 KV heads, head_dim 128,
    # the 128,256-token tokenizer and 128K context (rope_scaling llama3).
    return ModelSpec(
        model_id=f"meta-llama/Llama-3.1-{size}-Instruct",
        layers=layers,
        hidden_size=hidden,
        intermediate_size=intermediate,
        attention_heads=heads,
        kv_heads=8,
        head_dim=128,
        vocab_size=128_256,
        max_context_tokens=131_072,
        tied_embeddings=False,
    )


MODELS: Mapping[str, ModelSpec] = MappingProxyType(
    {
        m.model_id: m
        for m in (
            _llama31("8B", layers=32, hidden=4096, intermediate=14_336, heads=32),
            _llama31("70B", layers=80, hidden=8192, intermediate=28_672, heads=64),
            _llama31("405B", layers=126, hidden=16_384, intermediate=53_248, heads=128),
            # Edge size: 24 heads / 8 KV heads allow TP 1, 2, 4, 8; embeddings tied.
            ModelSpec(
                model_id="meta-llama/Llama-3.2-3B-Instruct",
                layers=28,
                hidden_size=3072,
                intermediate_size=8192,
                attention_heads=24,
                kv_heads=8,
                head_dim=128,
                vocab_size=128_256,
                max_context_tokens=131_072,
                tied_embeddings=True,
            ),
            # Edge size: only 2 KV heads, so TP is at most 2; 32K context; qkv biases.
            ModelSpec(
                model_id="Qwen/Qwen2.5-1.5B-Instruct",
                layers=28,
                hidden_size=1536,
                intermediate_size=8960,
                attention_heads=12,
                kv_heads=2,
                head_dim=128,
                vocab_size=151_936,
                max_context_tokens=32_768,
                tied_embeddings=True,
                qkv_bias=True,
            ),
        )
    }
)


def model(model_id: str) -> ModelSpec:
    """The catalog row for ``model_id``; the ``KeyError`` names the known ids."""
    try:
        return MODELS[model_id]
    except KeyError:
        raise KeyError(f"unknown model {model_id!r}; known: {', '.join(MODELS)}") from None


# --- Node-local cache layout --------------------------------------------------------------
#
# On cloud nodes nodeadm assembles the instance-store NVMe disks into one RAID0 array and
# mounts it at /mnt/k8s-disks/0 (NodeConfig spec.instance.localStorage.strategy: RAID0; see
# facts.md). Weights live under one kit-owned folder there so pods on the same node share them.
# On-prem and edge pass their own root (a local-volume path or a plain local disk).
MODEL_CACHE_ROOT = "/mnt/k8s-disks/0/inferstack/models"


def model_cache_dir(model_id: str, cache_root: str = MODEL_CACHE_ROOT) -> str:
    """Folder for one model on the node, e.g. ``<root>/meta-llama/Llama-3.1-8B-Instruct``."""
    return f"{cache_root.rstrip('/')}/{model_id}"


def hf_checkpoint_dir(model_id: str, cache_root: str = MODEL_CACHE_ROOT) -> str:
    """The Hugging Face checkpoint (config, tokenizer, safetensors): what vLLM serves from,
    and where Triton's pre/post-processing read the tokenizer."""
    return f"{model_cache_dir(model_id, cache_root)}/hf"


def trtllm_engine_dir(model_id: str, engine_key: str, cache_root: str = MODEL_CACHE_ROOT) -> str:
    """A built TensorRT-LLM engine. ``engine_key`` names everything the build baked in
    (GPU, precision, TP, PP, profile), so two differently built engines never share a folder."""
    return f"{model_cache_dir(model_id, cache_root)}/trtllm/{engine_key}"
