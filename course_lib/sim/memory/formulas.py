"""Memory per device: ZeRO's sharding of parameters, gradients and optimizer states, and activations.

ZeRO: Rajbhandari et al. 2020 (SC20), section 3 and Figure 1 (2 + 2 + 12 bytes per parameter with Adam
in mixed precision). Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation", Table 2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Integral

from ..checks import amount, whole
from ..vocabulary import ATTENTION, RECOMPUTE

GB = 1e9


def zero_memory_breakdown(num_params: float, dp_degree: int, stage: int, param_bytes: float = 2,
                          grad_bytes: float = 2, optimizer_bytes: float = 12) -> dict:
    """Bytes per device of parameters, gradients and optimizer states under ZeRO stage 0-3."""
    # 1.0 or True would pass `in (0, 1, 2, 3)`; a ZeRO stage is a whole number.
    if isinstance(stage, bool) or not isinstance(stage, Integral) or stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0 (plain DDP), 1, 2 or 3, got {stage!r}")
    whole("dp_degree", dp_degree)
    n = amount("num_params", num_params, unit="parameters")
    param_bytes, grad_bytes, optimizer_bytes = (
        amount(name, value, unit="bytes per parameter") for name, value in
        (("param_bytes", param_bytes), ("grad_bytes", grad_bytes), ("optimizer_bytes", optimizer_bytes)))
    return {
        "parameters": n * param_bytes / (dp_degree if stage >= 3 else 1),
        "gradients": n * grad_bytes / (dp_degree if stage >= 2 else 1),
        "optimizer_states": n * optimizer_bytes / (dp_degree if stage >= 1 else 1),
    }


def zero_memory_per_device(num_params: float, dp_degree: int, stage: int, param_bytes: float = 2,
                           grad_bytes: float = 2, optimizer_bytes: float = 12) -> float:
    """Bytes per device for model states: stage 0 = (2+2+12) N; stage 3 = (2+2+12) N / dp."""
    return sum(zero_memory_breakdown(num_params, dp_degree, stage, param_bytes, grad_bytes,
                                     optimizer_bytes).values())


def activation_terms(spec) -> tuple:
    """(replicated, split, scores): one layer's stored bytes per s b h, and per a s^2 b for the scores.

    Korthikanti et al. 2022, section 4.1, counted op by op for a GPT layer: 4 for the two LayerNorm
    inputs, 2 + 2 for the inputs of the QKV and first MLP matrices, 1 + 1 for the two dropout masks
    (replicated across TP ranks: 10); Q and K (4), V (2) and the output projection's input (2), the MLP's
    8 + 8 (split by TP: 24); 5 a s^2 b for softmax output, dropout mask and output. The same count
    generalised: K and V shrink with grouped-query attention, a gated (SwiGLU) MLP stores its gate, up
    and product outputs (3 x 2 s b ffn), and without dropout the masks and the dropout output vanish
    (Llama 3 trains without dropout). GPT's defaults give back 10, 24 and 5 exactly. A mixture of experts
    (MoESpec) counts its active width, (k + shared) experts, and 2 bytes per h for each of the k routed
    copies of a token (an approximation: its dense first layers are counted the same way).
    """
    replicated = 8 + (2 if spec.dropout else 0)
    # A mixture of experts stores its (k + shared) experts' intermediates and each routed copy of its input.
    width, copies = getattr(spec, "active_ffn", spec.ffn), getattr(spec, "active_experts", 0)
    mlp = (6 if spec.gated_mlp else 4) * width / spec.hidden + 2 * copies
    split = 2 + 4 * spec.kv_dim / spec.hidden + 2 + mlp
    return replicated, split, (5 if spec.dropout else 2)


def activation_memory_per_layer(spec, micro_batch: int, tp: int = 1, sequence_parallel: bool = False,
                                recompute: str = "none", cp: int = 1, attention: str = "fused") -> float:
    """Bytes of one transformer layer's stored activations in 16-bit training (Korthikanti et al. 2022).

    attention="unfused" counts the s x s scores as Korthikanti et al. do: for GPT s b h (34 + 5 a s / h)
    without parallelism; s b h (10 + 24/t + 5as/(ht)) with tensor parallel; s b h / t (34 + 5as/h) adding
    sequence parallel; selective recompute drops the 5as/h term. attention="fused" (the default: what
    FlashAttention runs, Dao et al. 2022, section 3.1) never stores the scores, so it is the count without
    them, s b h (10 + 24/t) for GPT (FlashAttention's softmax statistics, a s b floats, are left out: 4a/h
    bytes per s b h, under 1% at these widths). Full recompute keeps only the layer input, 2 s b h (/t with
    sequence parallel). ``cp`` divides s. Other architectures: activation_terms."""
    if not isinstance(recompute, str) or recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if not isinstance(attention, str) or attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION} (fused: FlashAttention, no s x s scores), "
                         f"got {attention!r}")
    for name, value in (("micro_batch", micro_batch), ("tp", tp), ("cp", cp)):
        whole(name, value)
    if not isinstance(sequence_parallel, bool):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    if not (hasattr(spec, "hidden") or hasattr(spec, "sizes")):
        raise ValueError(f"spec must be a TransformerSpec or an MLPSpec, got {spec!r}")
    if not hasattr(spec, "hidden"):   # an MLP: keep each layer's 16-bit input and output
        return 2.0 * micro_batch * max(spec.sizes) * 2
    s, b, h, a, t = spec.seq_len / cp, micro_batch, spec.hidden, spec.heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    replicated, split, score_terms = activation_terms(spec)
    scores = 0.0 if recompute == "selective" or attention == "fused" else score_terms * a * s / h
    if sequence_parallel:
        return sbh * (replicated + split + scores) / t
    return sbh * (replicated + split / t + scores / t)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one device holds at its peak, by category."""

    parameters: float
    gradients: float
    optimizer_states: float
    activations: float
    buffers: float = 0.0
    capacity: float | None = None

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer_states + self.activations + self.buffers

    @property
    def fits(self) -> bool:
        return self.capacity is None or self.total <= self.capacity

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "capacity"}

    def __str__(self) -> str:
        parts = ", ".join(f"{k} {v / GB:.2f}" for k, v in self.as_dict().items())
        cap = f" of {self.capacity / GB:.1f} GB" if self.capacity else ""
        return f"{self.total / GB:.2f} GB{cap} ({parts} GB)"


class OutOfMemoryError(ValueError):
    """A configuration needs more memory per device than the device has; never silently simulated."""

    def __init__(self, needed: float, available: float, stage: int, breakdown: MemoryBreakdown):
        self.needed, self.available, self.stage, self.breakdown = needed, available, stage, breakdown
        super().__init__(
            f"out of memory: pipeline stage {stage} needs {needed / GB:.2f} GB per device but a device has "
            f"{available / GB:.2f} GB ({(needed - available) / GB:.2f} GB too much). Breakdown: {breakdown}. "
            "To fit: raise zero_stage, tp or pp, use recompute='selective' or 'full', "
            "sequence_parallel=True, a smaller micro-batch, or a device with more memory")
