"""How FLOPs are counted for MFU and HFU, and the conventions papers use, so that figures convert.

Model FLOPs (MFU's numerator) follow PaLM (Chowdhery et al. 2022, Appendix B): per token, 6 per parameter
of the matrix multiplies (2 forward, 4 backward) plus 12 L h s for the attention scores and their product
with V, counted whole whatever the mask; torchtitan counts the same ("we follow the convention and do not
account for sparsity in causal attention", torchtitan's get_num_flop_per_token). Hardware FLOPs (HFU's)
add the work recomputation repeats. Megatron-LM's 2021 paper counted its hardware FLOPs (eq. 3).
"""

from __future__ import annotations

from ..checks import amount, one_of

ATTENTION_COUNTS = ("whole", "causal half")     # scores counted whole (PaLM), or only the unmasked half


def attention_flops(model, tokens: float) -> float:
    """Training FLOPs of the attention scores and their product with V: 12 L h s per token (3 x 4 L h s)."""
    return 3 * model.layers * 4 * model.seq_len * model.hidden * amount("tokens", tokens)


def model_flops(model, tokens: float, attention: str = "whole") -> float:
    """Model FLOPs of training on ``tokens``: the simulator's count (PaLM's) with ``attention="whole"``;
    ``"causal half"`` counts only the unmasked half of the scores, the work a causal FlashAttention does."""
    one_of("attention", attention, ATTENTION_COUNTS)
    flops = model.training_flops(tokens)
    return flops - attention_flops(model, tokens) / 2 if attention == "causal half" else flops


def hardware_flops(model, tokens: float, recompute: str = "none") -> float:
    """FLOPs the GPUs actually run: the model's plus what recomputation repeats (full: one more forward,
    a third of the model's; selective: the attention scores' forward again, a third of theirs)."""
    one_of("recompute", recompute, ("none", "selective", "full"))
    flops = model.training_flops(tokens)
    extra = {"none": 0.0, "selective": attention_flops(model, tokens) / 3, "full": flops / 3}[recompute]
    return flops + extra


def megatron_2021_flops(model, sequences: float) -> float:
    """Narayanan et al. 2021, eq. (3): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) for a batch of B sequences of
    a GPT layer with full recomputation: the FLOPs its TFLOP/s per GPU were counted in."""
    b, s, layers, h, v = sequences, model.seq_len, model.layers, model.hidden, model.vocab_size
    return 96 * b * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


def utilization(flops_per_second_per_gpu: float, peak_flops: float) -> float:
    """A rate per GPU as a fraction of the peak: MFU for model FLOPs, HFU for hardware FLOPs."""
    return amount("flops_per_second_per_gpu", flops_per_second_per_gpu) / amount("peak_flops", peak_flops,
                                                                                 positive=True)
