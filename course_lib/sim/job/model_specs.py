"""Model descriptions the simulator trains: a transformer (parameters, FLOPs) and the course's MLP.

Formulas: parameters and training FLOPs of Narayanan et al. 2021 ("Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", SC21, section 5.1), generalised to GQA and gated MLPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import amount, whole


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer. Defaults describe a GPT layer: 4h MLP, biases, LayerNorm, tied
    embeddings and learned positions; Llama-style models set kv_heads, gated_mlp=True, bias=False,
    tied_embeddings=False, learned_positions=False."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab_size: int
    ffn_hidden: int | None = None
    kv_heads: int | None = None
    gated_mlp: bool = False
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True
    name: str = "transformer"
    dropout: bool = True          # GPT trains with dropout (its masks are stored); Llama 3 does not

    def __post_init__(self):
        for field in ("layers", "hidden", "heads", "seq_len", "vocab_size"):
            whole(f"TransformerSpec.{field}", getattr(self, field))
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.kv_heads is not None:
            # Grouped-query attention: each of kv_heads key/value heads serves heads/kv_heads query heads.
            whole("TransformerSpec.kv_heads", self.kv_heads,
                  hint=" (None for one per attention head, as in GPT; 8 in Llama 3)")
            if self.heads % self.kv_heads:
                divisors = [d for d in range(1, self.heads + 1) if self.heads % d == 0]
                raise ValueError(f"TransformerSpec.kv_heads ({self.kv_heads}) must divide heads "
                                 f"({self.heads}): pick one of {divisors}")
        if self.ffn_hidden is not None:
            whole("TransformerSpec.ffn_hidden", self.ffn_hidden, hint=" (None for 4 x hidden)")
        for field in ("gated_mlp", "bias", "tied_embeddings", "learned_positions", "dropout"):
            value = getattr(self, field)
            if not isinstance(value, bool):
                raise ValueError(f"TransformerSpec.{field} must be True or False, got {value!r}")
        if not isinstance(self.name, str):
            raise ValueError(f"TransformerSpec.name must be a string, got {self.name!r}")

    @property
    def ffn(self) -> int:
        return self.ffn_hidden if self.ffn_hidden is not None else 4 * self.hidden

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * (self.hidden // self.heads)

    # -- parameters ------------------------------------------------------------------------------
    @property
    def attention_matrix_params(self) -> int:
        h = self.hidden
        return 2 * h * h + 2 * h * self.kv_dim          # Q and output projections; K and V

    @property
    def mlp_matrix_params(self) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * self.ffn

    @property
    def params_per_layer(self) -> int:
        """With GPT defaults 12h^2 + 13h (Narayanan et al. 2021, 5.1)."""
        h = self.hidden
        biases = (h + 2 * self.kv_dim + h + self.ffn + h) if self.bias else 0
        norms = 2 * (2 * h if self.bias else h)         # two LayerNorms (scale+shift) or RMSNorms (scale)
        return self.attention_matrix_params + self.mlp_matrix_params + biases + norms

    def layer_params(self, index: int) -> int:
        """Parameters of layer ``index`` (all alike here; a mixture of experts differs by layer)."""
        return self.params_per_layer

    def layer_expert_params(self, index: int) -> int:
        """Routed experts' parameters in layer ``index``: none in a dense model (see moe.py)."""
        return 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden + (self.seq_len * self.hidden if self.learned_positions else 0)

    @property
    def head_params(self) -> int:
        """The output projection when it is not tied to the embedding, plus the final norm."""
        norm = 2 * self.hidden if self.bias else self.hidden
        return norm + (0 if self.tied_embeddings else self.vocab_size * self.hidden)

    @property
    def num_params(self) -> int:
        """All parameters, embeddings included: GPT defaults give 12lh^2(1 + 13/(12h) + (V+s)/(12lh))
        plus the final LayerNorm."""
        return self.layers * self.params_per_layer + self.embedding_params + self.head_params

    # -- FLOPs -----------------------------------------------------------------------------------
    def attention_core_flops(self, tokens: float) -> float:
        """Scores and weighted sum: 4 s h per token (causality not exploited)."""
        return 4 * self.seq_len * self.hidden * tokens

    def layer_forward_flops(self, tokens: float, index: int | None = None) -> tuple[float, float]:
        """(attention block, MLP block) forward FLOPs for ``tokens`` tokens: 2 per matrix parameter per
        token, plus the attention core; every layer alike (``index`` matters for a mixture of experts)."""
        attention = 2 * self.attention_matrix_params * tokens + self.attention_core_flops(tokens)
        return attention, 2 * self.mlp_matrix_params * tokens

    def head_forward_flops(self, tokens: float) -> float:
        return 2 * self.hidden * self.vocab_size * tokens

    def forward_flops(self, tokens: float) -> float:
        attention, mlp = self.layer_forward_flops(tokens)
        return self.layers * (attention + mlp) + self.head_forward_flops(tokens)

    def training_flops(self, tokens: float) -> float:
        """Model FLOPs of forward + backward (backward = 2x forward), no recomputation: for GPT
        72 B s l h^2 (1 + s/(6h) + V/(12 l h)): eq. (3) of Narayanan et al. 2021 minus its recompute pass."""
        return 3 * self.forward_flops(amount("tokens", tokens))


@dataclass(frozen=True)
class MLPSpec:
    """A plain multi-layer perceptron (the course's 6 -> 4 -> 2 MLP); one 'token' is one sample."""

    sizes: tuple = (6, 4, 2)
    name: str = "mlp"
    seq_len: int = 1

    def __post_init__(self):
        sizes = self.sizes
        if (not isinstance(sizes, (tuple, list)) or len(sizes) < 2
                or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes)):
            raise ValueError(f"MLPSpec.sizes must be two or more positive widths, got {sizes!r}")
        whole("MLPSpec.seq_len", self.seq_len)

    @property
    def layers(self) -> int:
        return len(self.sizes) - 1

    def layer_params(self, i: int) -> int:
        return self.sizes[i] * self.sizes[i + 1] + self.sizes[i + 1]

    @property
    def num_params(self) -> int:
        return sum(self.layer_params(i) for i in range(self.layers))

    def training_flops(self, tokens: float) -> float:
        """6 FLOPs per weight per sample: 2 forward, 4 backward (input and weight gradients)."""
        tokens = amount("tokens", tokens)
        weights = sum(self.sizes[i] * self.sizes[i + 1] for i in range(self.layers))
        return 6 * weights * tokens


# Public configurations. GPT-3: Brown et al. 2020, Table 2.1. Llama 3: Llama Team 2024, "The Llama 3
# Herd of Models", Table 3 (8192-token sequences, 128K vocabulary, GQA with 8 KV heads, SwiGLU).
GPT3_175B = TransformerSpec(96, 12288, 96, 2048, 50257, name="GPT-3 175B")
_LLAMA = dict(seq_len=8192, vocab_size=128256, kv_heads=8, gated_mlp=True, bias=False,
              tied_embeddings=False, learned_positions=False, dropout=False)
LLAMA3_8B = TransformerSpec(32, 4096, 32, ffn_hidden=14336, name="Llama-3 8B", **_LLAMA)
LLAMA3_70B = TransformerSpec(80, 8192, 64, ffn_hidden=28672, name="Llama-3 70B", **_LLAMA)
LLAMA3_405B = TransformerSpec(126, 16384, 128, ffn_hidden=53248, name="Llama-3 405B", **_LLAMA)
COURSE_MLP = MLPSpec((6, 4, 2), name="course MLP 6-4-2")

MODELS = {m.name: m for m in (GPT3_175B, LLAMA3_8B, LLAMA3_70B, LLAMA3_405B, COURSE_MLP)}
