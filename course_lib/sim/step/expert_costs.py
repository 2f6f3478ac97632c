"""One MoE layer's expert work and all-to-alls for one micro-batch on one device (the CostModel's MoE part).

Forward: dispatch (tokens to their experts' ranks), the experts, combine (results back); backward: the
combine's gradient to the experts, their backward (twice the forward), the dispatch's gradient home. The
busiest rank sets the pace of a synchronous all-to-all: ``expert_imbalance`` scales its expert work and
what it receives. With ``ep_overlap`` the all-to-alls run beside another micro-batch's compute, as
DeepSeek-V3's DualPipe pairs a forward chunk with a backward chunk (arXiv 2412.19437, section 3.2.1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..collectives.expert_traffic import expert_all_to_all_time
from ..timeline import span


@dataclass(frozen=True)
class ExpertTimes:
    """Seconds of one MoE layer's expert part (forward compute; the four all-to-alls)."""

    compute: float           # router, shared experts and the busiest rank's routed pairs, forward
    dispatch: float
    combine: float
    back_combine: float      # backward: the results' gradients to the experts' ranks
    back_dispatch: float     # backward: the tokens' gradients home

    @property
    def forward_comm(self) -> float:
        return self.dispatch + self.combine

    @property
    def backward_comm(self) -> float:
        return self.back_combine + self.back_dispatch


def expert_times(costs, index: int) -> ExpertTimes | None:
    """The layer's ExpertTimes, or None for a dense layer (or a dense model)."""
    c, model = costs.config, costs.config.model
    if not (hasattr(model, "is_moe_layer") and model.is_moe_layer(index)):
        return None
    tokens, k, imbalance = costs.tokens / c.cp, model.active_experts, c.expert_imbalance   # on this rank
    routed = 2 * tokens * k * model.expert_params * imbalance
    always = 2 * tokens * (model.router_params + model.shared_experts * model.expert_params)
    busiest = tokens * imbalance

    def all_to_all(bytes_per_element: float) -> float:
        return expert_all_to_all_time(busiest, model.hidden, k, c.ep, costs.ep_link, c.node_limit,
                                      bytes_per_element)

    combine = all_to_all(c.combine_bytes)
    return ExpertTimes(costs.matmul_seconds((routed + always) / c.tp), all_to_all(c.dispatch_bytes),
                       combine, combine, combine)


def append_forward(events: list, t: float, times: ExpertTimes, name: str, overlap: bool) -> float:
    """The experts' forward from ``t``; without overlap, between their dispatch and combine."""
    if not overlap:
        t = _put(events, t, times.dispatch, "comm", f"{name} EP dispatch all-to-all")
    t = _put(events, t, times.compute, "compute", f"{name} experts")
    return t if overlap else _put(events, t, times.combine, "comm", f"{name} EP combine all-to-all")


def append_backward(events: list, t: float, times: ExpertTimes, name: str, overlap: bool) -> float:
    if not overlap:
        t = _put(events, t, times.back_combine, "comm", f"{name} EP combine-gradient all-to-all")
    t = _put(events, t, 2 * times.compute, "compute", f"{name} experts grad")
    label = f"{name} EP dispatch-gradient all-to-all"
    return t if overlap else _put(events, t, times.back_dispatch, "comm", label)


def overlap_block(block, times: ExpertTimes) -> None:
    """DualPipe's pairing: the layer's four all-to-alls hide behind its forward and backward compute
    together; what they take beyond it stretches both, in proportion (the comm spans show the share)."""
    communication = times.forward_comm + times.backward_comm
    compute = block.fwd_time + block.bwd_time
    stretch = max(1.0, communication / compute) if compute > 0 else 1.0
    for events, length in ((block.fwd, block.fwd_time), (block.bwd, block.bwd_time)):
        share = communication * length / compute if compute > 0 else 0.0
        if share > 0:
            events.append(span(0.0, share, "comm", f"{block.name} EP all-to-alls, overlapped"))
        if stretch > 1:
            events.append(span(length, length * stretch, "comm", f"{block.name} waiting for the all-to-alls"))
    block.fwd_time *= stretch
    block.bwd_time *= stretch


def _put(events: list, t: float, seconds: float, kind: str, label: str) -> float:
    if seconds > 0:
        events.append(span(t, t + seconds, kind, label))
    return t + seconds
