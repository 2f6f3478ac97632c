"""Chapter 11's parts timed alone: the routing's pieces, the experts' rates, the all-to-all's link."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib.real import ExpertsAlone, all_to_all_link, expert_pieces, experts_alone, experts_cores


def one_rank_layer(tokens, router_logits, local_experts, k):
    """A one-rank MoE layer (every expert local): each token through its top-k experts, gate-weighted."""
    top, chosen = router_logits.topk(k, dim=-1)
    gates = torch.softmax(top, dim=-1)
    output = torch.zeros_like(tokens)
    for slot in range(k):
        for expert in chosen[:, slot].unique().tolist():
            rows = (chosen[:, slot] == expert).nonzero().squeeze(1)
            output = output.index_add(0, rows, gates[rows, slot, None] * local_experts[expert](tokens[rows]))
    return output


def test_the_pieces_are_each_ranks_rows_by_source_rank_then_local_expert():
    # 2 ranks, 2 tokens each, 4 experts (2 a rank), top-1: rank 0's tokens pick experts 3 and 0, rank 1's
    # experts 1 and 1
    logits = torch.full((2, 2, 4), -1.0)
    logits[0, 0, 3] = logits[0, 1, 0] = logits[1, 0, 1] = logits[1, 1, 1] = 1.0
    assert expert_pieces(logits, 1) == [[1, 0, 0, 2], [0, 1, 0, 0]]
    # top-2 sends every token twice: the rows add up to tokens x k
    assert sum(map(sum, expert_pieces(torch.randn(4, 8, 8), 2))) == 4 * 8 * 2
    for bad, match in (((torch.randn(2, 3, 3), 1), "split evenly"), ((torch.randn(2, 3, 4), 5), "k must"),
                       ((torch.randn(3, 4), 1), "shape")):
        with pytest.raises(ValueError, match=match):
            expert_pieces(*bad)


def test_the_experts_rate_counts_the_backward_twice():
    alone = ExpertsAlone(experts=[0.3, 0.1], rows=[100, 0], other_forward=0.01, other_backward=0.02)
    assert alone.flops(1e6) == [pytest.approx(3 * 1e6 * 100 / 0.3), float("inf")]


def test_the_parts_are_timed_on_the_ranks():
    hidden, logits = 16, torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(0))
    alone = experts_alone(one_rank_layer, lambda: nn.Linear(hidden, hidden), logits, hidden, 2, repetitions=2)
    assert alone.rows == [sum(p) for p in expert_pieces(logits, 2)] and sum(alone.rows) == 2 * 8 * 2
    assert all(s > 0 for s in alone.experts) and alone.other_forward > 0 and alone.other_backward >= 0
    cores = experts_cores(lambda: nn.Linear(hidden, hidden), logits, hidden, 2, repetitions=2)
    assert 0 < cores <= 2
    link = all_to_all_link(2, sizes=(64, 4096), repetitions=2)
    assert link.latency > 0 and link.bandwidth > 0
    with pytest.raises(ValueError, match="at least 2 ranks"):
        all_to_all_link(1)
    with pytest.raises(ValueError, match="sizes"):
        all_to_all_link(4, sizes=(8, 4096))
