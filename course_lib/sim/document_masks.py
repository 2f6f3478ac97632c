"""Causal attention inside documents packed into one sequence: the work each context-parallel rank gets.

Plain Python: counts the (query, key) pairs a document mask leaves to each rank, for zig-zag over the whole
sequence and for torch's per-document head-tail layout (``_PerDocumentHeadTailLoadBalancer``).
"""

from __future__ import annotations

__all__ = ["document_work"]


def document_work(documents: list[int], world_size: int, per_document: bool) -> list[int]:
    """(query, key) pairs each rank computes when query i sees the keys <= i of its own document.

    The sequence is cut into 2 x world_size equal pieces and rank r keeps pieces r and 2N-1-r (zig-zag);
    ``per_document`` cuts each document that way instead (every length a multiple of 2 x world_size).
    """
    starts, start = [], 0
    for length in documents:
        starts += [start] * length
        start += length
    firsts = sorted(set(starts))
    spans = [(s, s + n) for s, n in zip(firsts, documents, strict=True)] if per_document else [(0, start)]
    work = [0] * world_size
    for begin, end in spans:
        if (end - begin) % (2 * world_size):
            raise ValueError(f"a span of {end - begin} tokens does not cut into {2 * world_size} pieces")
        piece = (end - begin) // (2 * world_size)
        for rank in range(world_size):
            for head in (rank, 2 * world_size - 1 - rank):
                first = begin + head * piece
                work[rank] += sum(p - starts[p] + 1 for p in range(first, first + piece))
    return work
