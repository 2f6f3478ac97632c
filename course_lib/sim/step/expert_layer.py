"""One expert-parallel MoE layer on N ranks, rank by rank: what the routing puts on each, and who waits.

Given how many rows each rank sends each other rank (the routing), every rank runs: the counts'
all-to-all, the dispatch, its experts on the rows it received, the combine; backward the same in reverse
with the experts' work doubled. An all-to-all ends together for everyone: a rank cannot finish before
the slowest has sent it its rows. So the rank whose experts got the most rows sets the pace, and the
others wait for it at the combine (the chapter measures the same on real ranks).
"""

from __future__ import annotations

from ..checks import amount, whole
from ..collectives.cost import check_link
from ..timeline import Timeline


def _all_to_all_seconds(rows: list, row_bytes: float, link) -> float:
    """Every rank's shares at once over one link (one node): the rank that sends or receives the most
    bytes to or from the others sets the time, plus one latency."""
    n = len(rows)
    sent = [sum(rows[r][d] for d in range(n) if d != r) for r in range(n)]
    received = [sum(rows[s][r] for s in range(n) if s != r) for r in range(n)]
    busiest = max(max(sent), max(received)) * row_bytes
    return link.latency + busiest / link.bandwidth if n > 1 else 0.0


def expert_layer_timeline(rows: list, hidden: int, flops_per_row: float, flops: float, link,
                          bytes_per_element: float = 4, backward: bool = True,
                          title: str = "expert-parallel layer, simulated") -> Timeline:
    """Lanes per rank for one MoE layer whose routing sends ``rows[s][d]`` rows from rank s to rank d.

    ``flops_per_row``: one routed row through one expert, forward; ``flops``: one rank's FLOP/s;
    ``link``: the Link between ranks (one node). Rows stay ``hidden`` elements of ``bytes_per_element``.
    """
    n = whole("ranks", len(rows))
    if any(len(row) != n for row in rows):
        raise ValueError(f"rows must be an N x N table of rows sent from each rank to each rank, got {rows}")
    for row in rows:
        for count in row:
            amount("a row count", count)
    check_link(link)
    flops = amount("flops", flops, positive=True, unit="FLOP/s")
    a2a = _all_to_all_seconds(rows, whole("hidden", hidden) * bytes_per_element, link)
    counts = link.latency if n > 1 else 0.0
    per_row = amount("flops_per_row", flops_per_row) / flops
    work = [sum(rows[s][r] for s in range(n)) * per_row for r in range(n)]
    timeline = Timeline([f"rank {r}" for r in range(n)], title=title)
    t = 0.0
    for phase, scale, steps in (("forward", 1, ("counts", "dispatch", "experts", "combine")),
                                ("backward", 2, ("combine gradient", "experts grad", "dispatch gradient"))):
        if phase == "backward" and not backward:
            break
        for step in steps:
            if step.startswith("experts"):
                for r in range(n):
                    label = f"{step} ({sum(x[r] for x in rows):g} rows)"
                    timeline.add(r, t, t + scale * work[r], "compute", label)
                t += scale * max(work)
            else:
                seconds = counts if step == "counts" else a2a
                for r in range(n):
                    if seconds > 0:
                        timeline.add(r, t, t + seconds, "comm", f"{step} all-to-all")
                t += seconds
    return timeline
