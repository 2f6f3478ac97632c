"""What context parallelism costs in closed form: each method's bytes, messages and keys/values held per
rank, the causal work each rank does under a layout, and the timeline of one ring attention.

Sizes follow one attention call over ``tokens`` tokens (batch x sequence) split over ``cp`` ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import amount, one_of, whole
from ..timeline import Timeline
from ..vocabulary import CP_LAYOUTS, CP_METHODS
from .cost import check_link


@dataclass(frozen=True)
class ContextParallelCost:
    """One rank's communication for one attention forward: bytes it sends, messages it sends (each pays
    the link's latency once), collective calls it makes, and the most key/value bytes it holds at once."""

    method: str
    cp: int
    sent_bytes: float
    messages: int
    calls: int
    kv_held_bytes: float
    note: str = ""

    def comm_seconds(self, link) -> float:
        """messages x latency + bytes / bandwidth on ``link``: the communication alone, none of it hidden."""
        check_link(link)
        return self.messages * link.latency + self.sent_bytes / link.bandwidth


def _sizes(tokens, cp, heads, kv_heads, head_dim, bytes_per_element):
    tokens = whole("tokens", tokens)
    cp = whole("cp", cp)
    heads, head_dim = whole("heads", heads), whole("head_dim", head_dim)
    kv_heads = whole("kv_heads", kv_heads)
    if heads % kv_heads:
        raise ValueError(f"kv_heads ({kv_heads}) must divide heads ({heads}): each key/value head serves "
                         "heads / kv_heads query heads")
    if tokens % cp:
        raise ValueError(f"cp={cp} must divide the {tokens} tokens, so that every rank holds as many")
    chunk = tokens // cp
    element = amount("bytes_per_element", bytes_per_element, positive=True, unit="bytes")
    return cp, chunk, chunk * heads * head_dim * element, 2 * chunk * kv_heads * head_dim * element


def context_parallel_cost(method: str, tokens: int, cp: int, heads: int, head_dim: int,
                          kv_heads: int | None = None, bytes_per_element: float = 2) -> ContextParallelCost:
    """Per-rank traffic and key/value memory of one attention forward split ``cp`` ways by ``method``.

    all_gather: K and V all-gathered by a ring before the attention: (cp-1) chunks of K and V sent, in
    cp-1 messages; the whole K and V held. ring: each of cp-1 steps passes one chunk of K and V to the
    next rank while the attention works on the one it holds: the same bytes, and only two chunks held.
    ulysses: all-to-all of Q, K and V from sequence-sharded to head-sharded, full attention on heads/cp
    heads, all-to-all of the output back: (cp-1)/cp of each, 4 calls of cp-1 messages; needs heads
    divisible by cp, and when kv_heads is not, K and V are all-gathered instead (their heads replicated).
    """
    one_of("method", method, CP_METHODS)
    kv_heads = heads if kv_heads is None else kv_heads
    cp, chunk, q_bytes, kv_bytes = _sizes(tokens, cp, heads, kv_heads, head_dim, bytes_per_element)
    steps = cp - 1
    if method == "all_gather":
        return ContextParallelCost(method, cp, steps * kv_bytes, steps, 1, cp * kv_bytes)
    if method == "ring":
        return ContextParallelCost(method, cp, steps * kv_bytes, steps, 0, min(2, cp) * kv_bytes)
    if heads % cp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        raise ValueError(f"Ulysses gives each rank heads / cp whole heads: cp={cp} must divide the {heads} "
                         f"heads (pick cp among {divisors}), or use method='ring' or 'all_gather'")
    queries = 2 * q_bytes * steps / cp            # Q in, the output back
    if kv_heads % cp == 0:
        return ContextParallelCost(method, cp, queries + kv_bytes * steps / cp, 4 * steps, 4, kv_bytes)
    if cp % kv_heads:
        raise ValueError(f"Ulysses splits the {kv_heads} key/value heads over cp={cp} ranks: one of the two "
                         "must divide the other")
    # Fewer key/value heads than ranks: each is copied cp / kv_heads times before the all-to-all, so a
    # rank receives the one head its queries use, for the whole sequence.
    one_head = kv_bytes / kv_heads
    return ContextParallelCost(method, cp, queries + one_head * steps, 4 * steps, 4, cp * one_head,
                               note=f"{kv_heads} key/value heads copied to {cp} before the all-to-all")


# -- causal work per rank --------------------------------------------------------------------------------
def _layout_chunks(rank: int, world_size: int, layout: str) -> list[tuple[int, int]]:
    """(chunk index, of how many) of the sequence that ``rank`` holds, in order."""
    if layout == "contiguous":
        return [(rank, world_size)]
    return [(rank, 2 * world_size), (2 * world_size - 1 - rank, 2 * world_size)]


def _pair_work(mine: tuple[int, int], theirs: tuple[int, int], triangle: float) -> float:
    """Work of one (query piece, key piece) pair in units of that pair's full product."""
    if mine[0] == theirs[0]:
        return triangle       # the diagonal: half of it is masked
    return 1.0 if mine[0] > theirs[0] else 0.0


def causal_step_work(world_size: int, layout: str = "contiguous", causal: bool = True,
                     triangle: float = 0.5) -> list[list[float]]:
    """work[rank][step]: how much of a full (chunk x chunk) block rank ``rank`` computes at ring step
    ``step``, when it holds the keys of rank (rank - step) % world_size.

    Without the mask every block is 1. With it, a block whose keys all come after the queries is 0
    (skipped), one whose keys all come before is 1, and a diagonal block is ``triangle``: 0.5 when the
    kernel skips its masked half (FlashAttention does, tile by tile), 1.0 when it computes it and masks.
    """
    n = whole("world_size", world_size)
    one_of("layout", layout, CP_LAYOUTS)
    triangle = amount("triangle", triangle)
    if not causal:
        return [[1.0] * n for _ in range(n)]
    work = []
    for rank in range(n):
        mine = _layout_chunks(rank, n, layout)
        row = []
        for step in range(n):
            theirs = _layout_chunks((rank - step) % n, n, layout)
            share = 1 / (len(mine) * len(theirs))
            row.append(share * sum(_pair_work(q, k, triangle) for q in mine for k in theirs))
        work.append(row)
    return work


def causal_work(world_size: int, layout: str = "contiguous", causal: bool = True,
                triangle: float = 0.5) -> list[float]:
    """Each rank's whole attention work, in full (chunk x chunk) blocks: the sum of its ring steps."""
    return [sum(row) for row in causal_step_work(world_size, layout, causal, triangle)]


# -- one ring attention on a clock -----------------------------------------------------------------------
def ring_attention_timeline(world_size: int, block_seconds: float, step_seconds: float,
                            causal: bool = False, layout: str = "contiguous", triangle: float = 0.5,
                            title: str = "ring attention, simulated") -> Timeline:
    """One ring attention: at step i every rank computes on the keys and values of rank (rank - i) % N
    while it passes them on to rank + 1 (one send at a time, ``step_seconds`` each); a block of work w
    takes w x ``block_seconds`` and starts once its keys and values have arrived."""
    n = whole("world_size", world_size)
    block = amount("block_seconds", block_seconds)
    hop = amount("step_seconds", step_seconds)
    work = causal_step_work(n, layout, causal, triangle)
    timeline = Timeline([f"rank {r}" for r in range(n)], title=title)
    have = [0.0] * n                      # when rank r holds the keys and values of step i
    computed, sent = [0.0] * n, [0.0] * n
    for step in range(n):
        arrivals = list(have)
        for rank in range(n):
            source = (rank - step) % n
            if step < n - 1:
                start = max(have[rank], sent[rank])
                sent[rank] = start + hop
                right = (rank + 1) % n
                timeline.add(rank, start, sent[rank], "comm", f"send K,V of rank {source} -> {right}",
                             {"op": "send", "peer": right, "step": step})
                arrivals[(rank + 1) % n] = sent[rank]
            seconds = work[rank][step] * block
            if seconds > 0:
                start = max(computed[rank], have[rank])
                computed[rank] = start + seconds
                timeline.add(rank, start, computed[rank], "compute", f"block of rank {source}",
                             {"step": step, "work": work[rank][step]})
        have = arrivals
    return timeline
