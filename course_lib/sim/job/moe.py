"""Mixture-of-experts transformers: routed and shared experts, dense first layers, and DeepSeek-V3's shape.

A token goes through ``shared_experts`` experts and the ``active_experts`` (k) of ``experts`` its router
picks, so its FLOPs count k + shared experts while the layer stores all of them: DeepSeek-V3 holds 671B
parameters and runs 37B per token (DeepSeek-AI 2024, arXiv 2412.19437, section 4.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import whole
from .model_specs import TransformerSpec


def mla_attention_params(hidden: int, heads: int, q_rank: int, kv_rank: int, nope_dim: int, rope_dim: int,
                         v_dim: int) -> int:
    """Parameters of one multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, section 2.1), V3's too.

    Queries and keys/values are compressed to ``q_rank`` and ``kv_rank`` (each with an RMSNorm scale), then
    expanded per head to a no-position part (nope_dim) and, for queries, a rotary part (rope_dim); one rotary
    key of rope_dim is shared by all heads; values have v_dim per head; the output projection maps back.
    """
    queries = hidden * q_rank + q_rank + q_rank * heads * (nope_dim + rope_dim)
    keys_values = hidden * (kv_rank + rope_dim) + kv_rank + kv_rank * heads * (nope_dim + v_dim)
    return queries + keys_values + heads * v_dim * hidden


@dataclass(frozen=True)
class MoESpec(TransformerSpec):
    """A decoder whose MLPs, after ``dense_layers`` dense ones, are mixtures of experts.

    experts: routed experts per MoE layer; active_experts (k): those each token is sent to; expert_ffn: one
    expert's hidden width (None: ffn_hidden); shared_experts: experts every token goes through;
    attention_params: the attention's matrix parameters when it is not standard (MLA), with qk_head_dim and
    v_head_dim setting the attention core's FLOPs; mtp_depth: multi-token-prediction modules trained beside
    the model (each one more MoE layer, a 2h x h projection and the output head per token, not counted in
    num_params, as DeepSeek-V3's 671B does not count them).
    """

    experts: int = 8
    active_experts: int = 2
    expert_ffn: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    attention_params: int | None = None
    qk_head_dim: int | None = None
    v_head_dim: int | None = None
    mtp_depth: int = 0

    def __post_init__(self):
        super().__post_init__()
        whole("MoESpec.experts", self.experts)
        whole("MoESpec.active_experts", self.active_experts, hint=" (k, the experts each token is sent to)")
        if self.active_experts > self.experts:
            raise ValueError(f"MoESpec.active_experts ({self.active_experts}) cannot exceed experts "
                             f"({self.experts}): a token picks k of the routed experts")
        for name in ("shared_experts", "dense_layers", "mtp_depth"):
            whole(f"MoESpec.{name}", getattr(self, name), 0)
        if self.dense_layers >= self.layers:
            raise ValueError(f"MoESpec.dense_layers ({self.dense_layers}) must leave at least one of the "
                             f"{self.layers} layers a mixture of experts")
        for name in ("expert_ffn", "attention_params", "qk_head_dim", "v_head_dim"):
            if getattr(self, name) is not None:
                whole(f"MoESpec.{name}", getattr(self, name), hint=" (or None for the standard value)")

    # -- shapes ----------------------------------------------------------------------------------
    @property
    def expert_width(self) -> int:
        return self.expert_ffn if self.expert_ffn is not None else self.ffn

    @property
    def expert_params(self) -> int:
        """One expert: a (gated) MLP of hidden -> expert_width -> hidden."""
        matrices = (3 if self.gated_mlp else 2) * self.hidden * self.expert_width
        return matrices + (self.expert_width + self.hidden if self.bias else 0)

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def active_ffn(self) -> int:
        """The MLP width a token runs through in an MoE layer: (k + shared) experts' widths."""
        return (self.active_experts + self.shared_experts) * self.expert_width

    @property
    def attention_matrix_params(self) -> int:
        return self.attention_params if self.attention_params is not None else super().attention_matrix_params

    def is_moe_layer(self, index: int) -> bool:
        return index >= self.dense_layers

    # -- parameters --------------------------------------------------------------------------------
    @property
    def _shell_params(self) -> int:
        """A layer without its MLP: attention, norms and the attention's biases."""
        mlp_biases = self.ffn + self.hidden if self.bias else 0
        return self.params_per_layer - self.mlp_matrix_params - mlp_biases

    def layer_params(self, index: int) -> int:
        if not self.is_moe_layer(index):
            return self.params_per_layer
        return (self._shell_params + self.router_params
                + (self.experts + self.shared_experts) * self.expert_params)

    def layer_expert_params(self, index: int) -> int:
        """Routed experts' parameters in layer ``index``: what expert parallelism spreads over ranks."""
        return self.experts * self.expert_params if self.is_moe_layer(index) else 0

    def layer_active_params(self, index: int) -> int:
        if not self.is_moe_layer(index):
            return self.params_per_layer
        return self._shell_params + self.router_params + (self.active_experts + self.shared_experts) * \
            self.expert_params

    @property
    def num_params(self) -> int:
        return sum(map(self.layer_params, range(self.layers))) + self.embedding_params + self.head_params

    @property
    def active_params(self) -> int:
        """Parameters one token runs through (embedding and head included, as 37B counts them)."""
        layers = sum(map(self.layer_active_params, range(self.layers)))
        return layers + self.embedding_params + self.head_params

    # -- FLOPs -------------------------------------------------------------------------------------
    def attention_core_flops(self, tokens: float) -> float:
        """Scores and weighted sum: 2 s per head x (q.k width + v width) per token."""
        qk = self.qk_head_dim or self.hidden // self.heads
        v = self.v_head_dim or self.hidden // self.heads
        return 2 * self.seq_len * self.heads * (qk + v) * tokens

    def layer_forward_flops(self, tokens: float, index: int | None = None) -> tuple[float, float]:
        """(attention, MLP) forward FLOPs of layer ``index`` (None: an MoE layer) for ``tokens`` tokens."""
        attention = 2 * self.attention_matrix_params * tokens + self.attention_core_flops(tokens)
        if index is not None and not self.is_moe_layer(index):
            return attention, 2 * self.mlp_matrix_params * tokens
        routed = self.router_params + (self.active_experts + self.shared_experts) * self.expert_params
        return attention, 2 * routed * tokens

    def mtp_forward_flops(self, tokens: float) -> float:
        """Each MTP module: an MoE layer, a 2h x h projection and the shared output head, per token."""
        return self.mtp_depth * (sum(self.layer_forward_flops(tokens)) + 2 * 2 * self.hidden ** 2 * tokens
                                 + self.head_forward_flops(tokens))

    def forward_flops(self, tokens: float) -> float:
        layers = sum(sum(self.layer_forward_flops(tokens, i)) for i in range(self.layers))
        return layers + self.head_forward_flops(tokens) + self.mtp_forward_flops(tokens)


# DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437, section 4.2): 61 layers, hidden 7,168, 128 heads of 128,
# MLA with query rank 1,536, key-value rank 512 and rotary dimension 64; every MLP after the first three is
# MoE with 1 shared and 256 routed experts of width 2,048, 8 routed experts per token; one MTP module;
# 4K-token sequences in pre-training. The dense layers' width (18,432) and the vocabulary (129,280) are
# the released config.json's (huggingface.co/deepseek-ai/DeepSeek-V3); the report says "128K" tokens.
DEEPSEEK_V3 = MoESpec(
    61, 7168, 128, 4096, 129280, ffn_hidden=18432, gated_mlp=True, bias=False, tied_embeddings=False,
    learned_positions=False, dropout=False, name="DeepSeek-V3", experts=256, active_experts=8,
    expert_ffn=2048, shared_experts=1, dense_layers=3,
    attention_params=mla_attention_params(7168, 128, 1536, 512, 128, 64, 128), qk_head_dim=128 + 64,
    v_head_dim=128, mtp_depth=1)
