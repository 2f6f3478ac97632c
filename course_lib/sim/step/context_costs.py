"""One layer's attention with its context-parallel traffic, as the step's events: keys and values
all-gathered (Llama 3), passed round a ring (Liu et al. 2023) or exchanged all-to-all (Ulysses).

Every function appends Spans relative to the layer's start and returns the time the attention ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..collectives.cost import collective_time
from ..timeline import span


@dataclass(frozen=True)
class AttentionCosts:
    """Seconds of one layer's attention on one rank, and what its context-parallel group sends.

    attention: the whole attention block (projections and the scores); core: the scores and the weighted
    sum alone, the part a ring splits into cp blocks; kv_bytes: K and V of the whole sequence for this
    rank's heads; q_bytes: this rank's queries (or its output).
    """

    method: str
    cp: int
    attention: float
    core: float
    kv_bytes: float
    q_bytes: float
    kv_split: bool          # Ulysses: the key/value heads divide cp ways (else they are copied up to cp)
    link: object
    local_overlap: bool = False   # all-gather: the local chunk's attention runs while K and V arrive (torch)


def _add(events: list, start: float, seconds: float, kind: str, label: str) -> float:
    if seconds > 0:
        events.append(span(start, start + seconds, kind, label))
    return start + seconds


def _hop(link):
    """The link one ring message crosses: a NIC when the group spans nodes (the slowest hop sets the pace)."""
    return link.rail() if getattr(link, "spans_nodes", False) else link


def _ring(events, t, a: AttentionCosts, name: str, label: str, factor: float) -> float:
    """Projections, then cp blocks of the core, each block's K and V (and, backward, their gradients:
    ``factor`` 2) arriving over the ring while the one before is computed."""
    hop = factor * _hop(a.link).transfer_time(a.kv_bytes / a.cp)
    block = factor * a.core / a.cp
    ring = block + (a.cp - 1) * max(block, hop)
    rest = factor * (a.attention - a.core)
    _add(events, t + rest, (a.cp - 1) * hop, "comm", f"{name} CP ring K,V ({a.cp - 1} steps)")
    end = t + rest + ring
    _add(events, end - factor * a.attention, factor * a.attention, "compute", label)
    return end


def _ulysses(events, t, a: AttentionCosts, name: str, label: str, factor: float) -> float:
    """All-to-all of Q, K, V to whole heads, the attention on cp times fewer heads, all-to-all back."""
    queries = collective_time("all_to_all", a.q_bytes, a.cp, a.link)
    if a.kv_split:
        keys = 2 * collective_time("all_to_all", a.kv_bytes / (2 * a.cp), a.cp, a.link)
    else:   # one key/value head per rank, copied before the all-to-all: as much as all-gathering it
        keys = 2 * collective_time("all_gather", a.kv_bytes / 2, a.cp, a.link)
    t = _add(events, t, queries + keys, "comm", f"{name} Ulysses all-to-all Q,K,V")
    t = _add(events, t, factor * a.attention, "compute", label)
    return _add(events, t, queries, "comm", f"{name} Ulysses all-to-all out")


def attention_forward(events: list, t: float, a: AttentionCosts, name: str) -> float:
    """Layer ``name``'s forward attention from ``t`` with its CP traffic; returns when it ends."""
    label = f"{name} attention"
    if a.cp == 1:
        return _add(events, t, a.attention, "compute", label)
    if a.method == "ring":
        return _ring(events, t, a, name, label, 1)
    if a.method == "ulysses":
        return _ulysses(events, t, a, name, label, 1)
    return _gathered(events, t, a, name, label, 1)


def attention_backward(events: list, t: float, a: AttentionCosts, name: str) -> float:
    """Layer ``name``'s backward attention (twice the forward's compute) with its CP traffic."""
    label = f"{name} attention grad"
    if a.cp == 1:
        return _add(events, t, 2 * a.attention, "compute", label)
    if a.method == "ring":
        return _ring(events, t, a, name, label, 2)
    if a.method == "ulysses":
        return _ulysses(events, t, a, name, label, 2)
    return _gathered(events, t, a, name, label, 2)


def _gathered(events, t, a: AttentionCosts, name: str, label: str, factor: float) -> float:
    """All-gather context parallel as Llama 3 ran it (Dubey et al. 2024, section 3.3.2): K and V are
    all-gathered before the attention, which needs them, so the gather is exposed ("exposed in the critical
    path", same section); the backward gathers them again and reduce-scatters dK and dV after its attention
    core, exposed too. ``local_overlap``: torch's all-gather variant (_AllGatherRotater in
    torch/distributed/tensor/experimental/_context_parallel/_attention.py) issues the all-gather, computes
    the local chunk's block (1/cp of the core) while it travels, and only then waits for it."""
    gather = collective_time("all_gather", a.kv_bytes, a.cp, a.link)
    hidden = factor * a.core / a.cp if a.local_overlap else 0.0
    what = "all-gather KV" if factor == 1 else "all-gather KV (again, for the backward)"
    _add(events, t, gather, "comm", f"{name} CP {what}")
    end = _add(events, t + max(gather - hidden, 0.0), factor * a.attention, "compute", label)
    if factor == 1:
        return end
    reduce = collective_time("reduce_scatter", a.kv_bytes, a.cp, a.link)
    return _add(events, end, reduce, "comm", f"{name} CP reduce-scatter dKV")
