"""An expert-parallel MoE layer's compute timed on one process alone, what chapter 11 predicts with.

The simulator charges a rank's experts their FLOPs at a FLOP/s. Which FLOP/s? Not the calibrated
256x256 matmul block's: an expert is two products, an activation and their backward on a piece of a few
dozen to a few hundred rows, and on a CPU that runs well below the block's rate. And a rank does more than
its experts: the router's top-k, sorting the pairs by expert, the combine's ``index_add``, the autograd
graph around them. ``experts_alone`` times both on one process with nothing else running, as
``calibrate()`` times its blocks (``timing_harness``: median of round-robin repetitions after a warm-up):

- each rank's experts, forward and backward, on the very pieces the routing gives them (one call per
  source rank and expert, as the layer makes them): the FLOP/s they really run at;
- the student's layer on one rank with experts that do nothing (``nn.Identity``): everything else,
  forward and forward + backward.

``experts_cores`` times one rank's experts alone and on every rank at once, and reads off how many
cores the ranks really share for this work (``fit_cores``, as ``calibrate()`` does for its matmul block):
an expert streams megabytes of weights and activations that the block's 256x256 products keep in cache,
so ranks sharing the caches and memory slow it more than they slow the block.

``all_to_all_link`` times gloo's own ``all_to_all_single`` on the chapter's ranks and fits the Link the
simulator's all-to-all model needs (one latency plus the busiest rank's bytes over the bandwidth), as
``calibrate()`` fits the all-reduce's on the all-reduce: gloo's all-to-all is not its all-reduce, and on
ranks that outnumber the cores its latency is several times the all-reduce's.

The simulator then plays the layer with both on the calibrated cores (``expert_layer_timeline(...,
cores=)``): the ranks computing at once share them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from course_lib.sim import Link
from course_lib.sim.cluster.laptop import fit_cores, fit_link

from ..launch.runner import run_ranks
from ..measure.calibration import _lanes_timeline
from ..measure.calibration_blocks import _alone_and_together
from ..measure.timing_harness import REPETITIONS, interleaved_times

# Bytes each rank sends the others in the timed all-to-alls: from chapter 11's counts (a few bytes) past
# its dispatch (about 10 KB a rank) to where the bandwidth shows.
ALL_TO_ALL_SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 20)


@dataclass(frozen=True)
class ExpertsAlone:
    """Seconds on one process alone. ``experts[r]``: rank r's experts, forward + backward, on the rows
    the routing sends them; ``rows[r]``: how many rows that is; ``other_forward`` and ``other_backward``:
    the layer's own work besides the experts (router, sort, dispatch and combine bookkeeping) in the
    forward and in the backward, on one rank's tokens."""

    experts: list[float]
    rows: list[int]
    other_forward: float
    other_backward: float

    def flops(self, flops_per_row: float) -> list[float]:
        """The FLOP/s each rank's experts ran at alone: forward ``flops_per_row`` a row, backward twice."""
        return [3 * flops_per_row * rows / seconds if rows else float("inf")
                for rows, seconds in zip(self.rows, self.experts, strict=True)]


def expert_pieces(router_logits: torch.Tensor, k: int) -> list[list[int]]:
    """pieces[d]: the rows rank d's experts receive, one count per (source rank, local expert) in that
    order, for ``router_logits`` of shape (ranks, tokens, experts) and top-``k`` routing."""
    ranks, _, experts = _shape(router_logits)
    if experts % ranks:
        raise ValueError(f"{experts} experts do not split evenly over {ranks} ranks: "
                         f"use a multiple of {ranks}")
    if not 1 <= k <= experts:
        raise ValueError(f"k must be between 1 and the {experts} experts, got {k}")
    per_rank = experts // ranks
    counts = torch.zeros(ranks, experts, dtype=torch.long)
    for source in range(ranks):
        counts[source] = torch.bincount(router_logits[source].topk(k, dim=-1).indices.reshape(-1),
                                        minlength=experts)
    return [[int(counts[s, e]) for s in range(ranks) for e in range(d * per_rank, (d + 1) * per_rank)]
            for d in range(ranks)]


def _shape(router_logits) -> tuple[int, int, int]:
    if not isinstance(router_logits, torch.Tensor) or router_logits.dim() != 3:
        raise ValueError("router_logits must be a tensor of shape (ranks, tokens per rank, experts), got "
                         f"{getattr(router_logits, 'shape', type(router_logits).__name__)}")
    return tuple(router_logits.shape)


def experts_alone(layer, make_expert, router_logits: torch.Tensor, hidden: int, k: int,
                  repetitions: int = REPETITIONS, timeout: float = 120) -> ExpertsAlone:
    """Time an MoE layer's compute on one process alone (see the module's text).

    ``layer(tokens, router_logits, local_experts, k)``: the layer (chapter 11's ``expert_parallel_forward``),
    run on one rank; ``make_expert()``: a new expert module mapping (n, ``hidden``) rows to (n, ``hidden``);
    ``router_logits``: (ranks, tokens per rank, experts), each rank's router output."""
    ranks, _, experts = _shape(router_logits)
    pieces = expert_pieces(router_logits, k)
    timed = run_ranks(_timed_alone, 1, layer, make_expert, pieces, router_logits[0], hidden, k,
                      experts // ranks, repetitions, timeout=timeout)[0]
    forward, backward = timed["forward"], timed["forward_backward"] - timed["forward"]
    return ExpertsAlone(experts=timed["experts"], rows=[sum(p) for p in pieces], other_forward=forward,
                        other_backward=max(0.0, backward))


def _timed_alone(rank, world_size, layer, make_expert, pieces, logits, hidden, k, per_rank, repetitions):
    torch.manual_seed(0)
    tokens = torch.randn(logits.shape[0], hidden)
    doing_nothing = nn.ModuleList(nn.Identity() for _ in range(logits.shape[1]))

    def forward():
        return layer(tokens.clone().requires_grad_(), logits.clone().requires_grad_(), doing_nothing, k)

    def forward_backward():
        forward().sum().backward()

    rank_experts = []
    for rank_pieces in pieces:
        experts = [make_expert() for _ in range(per_rank)]
        rows = [torch.randn(n, hidden) for n in rank_pieces]
        rank_experts.append(_experts_on(experts, rows))
    other = interleaved_times([forward, forward_backward], repetitions)
    return {"experts": interleaved_times(rank_experts, repetitions), "forward": other[0],
            "forward_backward": other[1]}


def _experts_on(experts, rows):
    """One call of an expert per piece (piece i goes to expert i mod len(experts), the layer's order),
    forward, then backward from the sum."""
    def forward_backward():
        outputs = [experts[i % len(experts)](piece.clone().requires_grad_()) for i, piece in enumerate(rows)]
        torch.cat(outputs).sum().backward()
    return forward_backward


def all_to_all_link(world_size: int, sizes=ALL_TO_ALL_SIZES, repetitions: int = REPETITIONS,
                    timeout: float = 120) -> Link:
    """gloo's ``all_to_all_single`` on ``world_size`` ranks as a Link: each rank sends each of the others
    an equal share of ``sizes[i]`` bytes, timed by the course's harness (the slowest rank, median of
    round-robin repetitions after a warm-up), fitted to latency + bytes / bandwidth in ratio."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ValueError(f"an all-to-all needs at least 2 ranks, got world_size={world_size!r}")
    sizes = tuple(int(n) for n in sizes)
    if len(sizes) < 2 or min(sizes) < 4 * (world_size - 1):
        raise ValueError(f"sizes must list two or more byte counts, each at least {4 * (world_size - 1)} "
                         f"(one float to each other rank), got {sizes}")
    seconds = run_ranks(_timed_all_to_alls, world_size, sizes, repetitions, timeout=timeout)[0]
    return fit_link(sizes, seconds, lambda link, nbytes: link.latency + nbytes / link.bandwidth)


def _timed_all_to_alls(rank, world_size, sizes, repetitions):
    def exchange(nbytes):
        share = max(1, nbytes // 4 // (world_size - 1))
        outgoing, incoming = torch.zeros(world_size * share), torch.empty(world_size * share)
        return lambda: dist.all_to_all_single(incoming, outgoing)
    return interleaved_times([exchange(n) for n in sizes], repetitions)


def experts_cores(make_expert, router_logits: torch.Tensor, hidden: int, k: int,
                  repetitions: int = REPETITIONS, timeout: float = 120) -> float:
    """Cores the ranks of ``router_logits`` (ranks, tokens per rank, experts) share for expert work:
    rank 0's experts on the rows the routing gives them (as ``experts_alone`` times them), forward +
    backward, on one process alone and on every rank at once, each rank running the same work
    (``fit_cores``: ranks x median alone / the slowest rank's median together)."""
    ranks, _, experts = _shape(router_logits)
    pieces = expert_pieces(router_logits, k)[0]
    alone, together = run_ranks(_experts_alone_and_together, ranks, make_expert, pieces, experts // ranks,
                                hidden, repetitions, timeout=timeout)[0]
    return fit_cores(_lanes_timeline([alone], "compute"), _lanes_timeline(together, "compute"))


def _experts_alone_and_together(rank, world_size, make_expert, pieces, per_rank, hidden, repetitions):
    torch.manual_seed(0)
    experts = [make_expert() for _ in range(per_rank)]
    return _alone_and_together(rank, world_size, repetitions,
                               _experts_on(experts, [torch.randn(n, hidden) for n in pieces]))
