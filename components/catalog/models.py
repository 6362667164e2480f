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
    embedding_dimensions: int | None = None
    """Set for an embedding model (served on ``/v1/embeddings``, never for chat): the vector size."""
    embedding_max_input_tokens: int | None = None
    """Set for an embedding model: the longest input it embeds as its reference implementation does (the gateway's
    ``embeddings.max_input_tokens``: a longer prompt skips the semantic cache)."""

    @property
    def is_embedding(self) -> bool:
        return self.embedding_dimensions is not None

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
            # Edge size: Llama 3.2 1B (config.json: 16 layers, 2048 hidden, 8192 MLP, 32 heads, 8 KV, head_dim 64).
            ModelSpec(
                model_id="meta-llama/Llama-3.2-1B-Instruct",
                layers=16,
                hidden_size=2048,
                intermediate_size=8192,
                attention_heads=32,
                kv_heads=8,
                head_dim=64,
                vocab_size=128_256,
                max_context_tokens=131_072,
                tied_embeddings=True,
            ),
            # Edge size: Phi-3-mini (config.json: 32 layers, 3072 hidden, 8192 MLP, 32 heads = 32 KV heads, 4K context).
            ModelSpec(
                model_id="microsoft/Phi-3-mini-4k-instruct",
                layers=32,
                hidden_size=3072,
                intermediate_size=8192,
                attention_heads=32,
                kv_heads=32,
                head_dim=96,
                vocab_size=32_064,
                max_context_tokens=4096,
                tied_embeddings=False,
            ),
            # Edge size: Gemma 2 2B (config.json: 26 layers, 2304 hidden, 9216 MLP, 8 heads, 4 KV, head_dim 256,
            # 256K vocabulary). Gemma 2 has four norms per layer, not two: the derived count is ~0.1 % low.
            ModelSpec(
                model_id="google/gemma-2-2b-it",
                layers=26,
                hidden_size=2304,
                intermediate_size=9216,
                attention_heads=8,
                kv_heads=4,
                head_dim=256,
                vocab_size=256_000,
                max_context_tokens=8192,
                tied_embeddings=True,
            ),
            # The edge's semantic-cache embedder: all-MiniLM-L6-v2, a 6-layer BERT (config.json: 384 hidden,
            # 1536 MLP, 12 heads of 32, 512 positions), 384-dimension vectors: the gateway's default embedding
            # model (images/gateway EmbeddingsConfig), so its strict semantic threshold was measured on it.
            # A BERT MLP has two matrices, not three: ``params`` overstates it; it is served from its GGUF file.
            ModelSpec(
                model_id="sentence-transformers/all-MiniLM-L6-v2",
                layers=6,
                hidden_size=384,
                intermediate_size=1536,
                attention_heads=12,
                kv_heads=12,
                head_dim=32,
                vocab_size=30_522,
                max_context_tokens=512,
                tied_embeddings=True,
                embedding_dimensions=384,
                # Model card: "By default, input text longer than 256 word pieces is truncated" (sentence-transformers'
                # max_seq_length), so the gateway's threshold was measured on at most 256; llama.cpp refuses what
                # does not fit its 512-token batch outright. 256 also leaves the gateway's 4-characters-per-token
                # estimate room to run short.
                embedding_max_input_tokens=256,
            ),
        )
    }
)


# --- Quantized GGUF files (llama.cpp) --------------------------------------------------------
#
# What llama.cpp serves is one GGUF file per model and quantization; its size is the weight bytes
# the fit check and the node budget count. Sizes are the Hugging Face file lists' (rounded as the
# hub shows them); each row names the repository it comes from.


@dataclass(frozen=True)
class GgufFile:
    """One quantized GGUF file of a catalog model."""

    repo: str
    """Hugging Face repository holding the file (the store mirrors it under ``<model id>/gguf/``)."""
    file: str
    size_gb: float
    """Decimal GB, as the hub's file list shows it."""


GGUF_FILES: Mapping[str, Mapping[str, GgufFile]] = MappingProxyType(
    {
        "meta-llama/Llama-3.2-3B-Instruct": MappingProxyType(
            {
                # huggingface.co/bartowski/Llama-3.2-3B-Instruct-GGUF (file list). Q4_K_M re-checked: 2,019,377,600
                # bytes (sha256 6c99cc00…f74d) in a public project's pinned download manifest.
                "Q4_K_M": GgufFile("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf", 2.02),
                "Q8_0": GgufFile("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q8_0.gguf", 3.42),
            }
        ),
        "meta-llama/Llama-3.2-1B-Instruct": MappingProxyType(
            {
                # huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF: Q4_K_M 0.81 GB, Q8_0 1.32 GB, f16 2.48 GB.
                "Q4_K_M": GgufFile("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", 0.81),
                "Q8_0": GgufFile("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q8_0.gguf", 1.32),
                "F16": GgufFile("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-f16.gguf", 2.48),
            }
        ),
        "Qwen/Qwen2.5-1.5B-Instruct": MappingProxyType(
            {
                # huggingface.co/Qwen/Qwen2.5-1.5B-Instruct-GGUF (Qwen's own quantizations). Q4_K_M re-checked:
                # 1,117,320,736 bytes at revision 91cad511 (a public project's pinned download manifest).
                "Q4_K_M": GgufFile("Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf", 1.12),
                "Q8_0": GgufFile("Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q8_0.gguf", 1.89),
            }
        ),
        "microsoft/Phi-3-mini-4k-instruct": MappingProxyType(
            {
                # huggingface.co/microsoft/Phi-3-mini-4k-instruct-gguf: "q4" is Q4_K_M (model card), 2.39 GB.
                "Q4_K_M": GgufFile("microsoft/Phi-3-mini-4k-instruct-gguf", "Phi-3-mini-4k-instruct-q4.gguf", 2.39),
                "F16": GgufFile("microsoft/Phi-3-mini-4k-instruct-gguf", "Phi-3-mini-4k-instruct-fp16.gguf", 7.64),
            }
        ),
        "google/gemma-2-2b-it": MappingProxyType(
            {
                # huggingface.co/bartowski/gemma-2-2b-it-GGUF (file list).
                "Q4_K_M": GgufFile("bartowski/gemma-2-2b-it-GGUF", "gemma-2-2b-it-Q4_K_M.gguf", 1.71),
                "Q8_0": GgufFile("bartowski/gemma-2-2b-it-GGUF", "gemma-2-2b-it-Q8_0.gguf", 2.78),
            }
        ),
        "sentence-transformers/all-MiniLM-L6-v2": MappingProxyType(
            {
                # huggingface.co/second-state/All-MiniLM-L6-v2-Embedding-GGUF (file list).
                "Q8_0": GgufFile("second-state/All-MiniLM-L6-v2-Embedding-GGUF", "all-MiniLM-L6-v2-Q8_0.gguf", 0.025),
                "F16": GgufFile(
                    "second-state/All-MiniLM-L6-v2-Embedding-GGUF", "all-MiniLM-L6-v2-ggml-model-f16.gguf", 0.046
                ),
            }
        ),
    }
)
"""Model id -> GGUF quantization type (llama.cpp's names: Q4_K_M, Q8_0, F16) -> file."""


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


def gguf_dir(model_id: str, cache_root: str = MODEL_CACHE_ROOT) -> str:
    """Quantized GGUF files of one model (llama.cpp serves one of them)."""
    return f"{model_cache_dir(model_id, cache_root)}/gguf"


def trtllm_engine_dir(model_id: str, engine_key: str, cache_root: str = MODEL_CACHE_ROOT) -> str:
    """A built TensorRT-LLM engine. ``engine_key`` names everything the build baked in
    (GPU, precision, TP, PP, profile), so two differently built engines never share a folder."""
    return f"{model_cache_dir(model_id, cache_root)}/trtllm/{engine_key}"
