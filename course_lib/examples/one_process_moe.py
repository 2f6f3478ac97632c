"""The one-process mixture of experts an expert-parallel layer must equal: gates, capacity, dense form.

Written densely (every expert on every token, weighted by a gate matrix that is zero outside each
token's top k), so nothing here dispatches. Chapter 11's checks judge the student's expert-parallel
layer against it; it lives outside the checks' folder so that every exercise refuses it like any course
code (``grading/checks/`` files act for their caller).
"""

from __future__ import annotations

import math

import torch


def gate_matrix(logits: torch.Tensor, k: int, offsets: list, capacity_factor: float | None) -> torch.Tensor:
    """(tokens, experts): softmax over each token's top-k logits, zero elsewhere; with a capacity factor,
    each block of rows (one rank's tokens, ``offsets`` the first row of each block and the total) keeps
    per expert only its first floor(cf * T * k / E) tokens in token order."""
    top, chosen = logits.topk(k, dim=-1)
    gates = torch.zeros_like(logits).scatter(1, chosen, torch.softmax(top, dim=-1))
    if capacity_factor is None:
        return gates
    routed = torch.zeros_like(logits, dtype=torch.long).scatter(1, chosen, 1)
    kept = torch.zeros_like(routed, dtype=torch.bool)
    for start, end in zip(offsets, offsets[1:], strict=False):
        capacity = math.floor(capacity_factor * (end - start) * k / logits.shape[1])
        kept[start:end] = (routed[start:end].cumsum(0) <= capacity) & (routed[start:end] == 1)
    return gates * kept


def dense_moe(tokens: torch.Tensor, gates: torch.Tensor, experts) -> torch.Tensor:
    """sum over experts e of gates[:, e] * expert_e(tokens): the MoE layer's output for every token."""
    return sum(gates[:, e:e + 1] * expert(tokens) for e, expert in enumerate(experts))


def biased_top_k(logits: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    """(tokens, k): each token's experts in DeepSeek-V3's routing, the k largest sigmoid(logits) + bias
    (arXiv:2412.19437, section 2.1.2, equation (16)): the bias chooses, and does nothing else."""
    return (torch.sigmoid(logits) + bias).topk(k, dim=-1).indices


def sigmoid_gate_matrix(logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """(tokens, experts): DeepSeek-V3's gates (section 2.1.2, equations (13) to (15)): the affinities
    s = sigmoid(logits) of each token's ``chosen`` experts, without the bias, divided by their sum; zero
    elsewhere."""
    scores = torch.sigmoid(logits)
    picked = scores.gather(1, chosen)
    return torch.zeros_like(scores).scatter(1, chosen, picked / picked.sum(-1, keepdim=True))
