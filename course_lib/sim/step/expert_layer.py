"""One expert-parallel MoE layer on N ranks, rank by rank: what the routing puts on each, and who waits.

Given how many rows each rank sends each other rank (the routing), every rank runs: the counts'
all-to-all, the dispatch, its experts on the rows it received, the combine; backward the same in reverse
with the experts' work doubled. An all-to-all ends together for everyone: a rank cannot finish before
the slowest has sent it its rows. So the rank whose experts got the most rows sets the pace, and the
others wait for it at the combine (the chapter measures the same on real ranks). On the student's
machine the ranks share its cores (``cores=``): while several compute, each runs slower, and the busy
rank speeds up once the light ones are done.
"""

from __future__ import annotations

from ..checks import amount, whole
from ..cluster.shared_cores import shared_core_finish_times
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


def expert_layer_timeline(rows: list, hidden: int, flops_per_row: float, flops, link,
                          bytes_per_element: float = 4, backward: bool = True,
                          title: str = "expert-parallel layer, simulated",
                          other_seconds: tuple[float, float] = (0.0, 0.0),
                          cores: float | None = None) -> Timeline:
    """Lanes per rank for one MoE layer whose routing sends ``rows[s][d]`` rows from rank s to rank d.

    ``flops_per_row``: one routed row through one expert, forward; ``flops``: one rank's FLOP/s, or a
    list of N, each rank's (what its experts ran at, measured); ``link``: the Link of the all-to-all
    between ranks (one node). Rows stay ``hidden`` elements of ``bytes_per_element``.
    ``other_seconds``: (forward, backward) seconds every rank spends besides its experts (the router,
    sorting the pairs, the combine's sum), charged before the forward's counts and before the backward's
    combine gradient. ``cores``: None gives every rank a device of its own (a GPU cluster); a number
    puts the ranks on that many shared cores (the calibrated laptop), ``flops`` and ``other_seconds``
    then being one process's alone: the ranks computing at once share the cores
    (``shared_core_finish_times``), so a rank with more work runs alone once the others are done.
    """
    n = whole("ranks", len(rows))
    if any(len(row) != n for row in rows):
        raise ValueError(f"rows must be an N x N table of rows sent from each rank to each rank, got {rows}")
    for row in rows:
        for count in row:
            amount("a row count", count)
    check_link(link)
    rates, other = _per_rank_flops(flops, n), _other_seconds(other_seconds)
    if cores is not None:
        cores = amount("cores", cores, positive=True)
    a2a = _all_to_all_seconds(rows, whole("hidden", hidden) * bytes_per_element, link)
    counts = link.latency if n > 1 else 0.0
    flops_per_row = amount("flops_per_row", flops_per_row)
    work = [sum(rows[s][r] for s in range(n)) * flops_per_row / rates[r] for r in range(n)]
    timeline = Timeline([f"rank {r}" for r in range(n)], title=title)
    t = 0.0
    for phase, scale, steps in (("forward", 1, ("router", "counts", "dispatch", "experts", "combine")),
                                ("backward", 2, ("combine bookkeeping", "combine gradient", "experts grad",
                                                 "dispatch gradient"))):
        if phase == "backward" and not backward:
            break
        for step in steps:
            if step in ("router", "combine bookkeeping"):
                t = _compute(timeline, t, [other[phase == "backward"]] * n, cores,
                             f"{step} (besides the experts)")
            elif step.startswith("experts"):
                t = _compute(timeline, t, [scale * w for w in work], cores,
                             [f"{step} ({sum(x[r] for x in rows):g} rows)" for r in range(n)])
            else:
                seconds = counts if step == "counts" else a2a
                for r in range(n):
                    if seconds > 0:
                        timeline.add(r, t, t + seconds, "comm", f"{step} all-to-all")
                t += seconds
    return timeline


def _compute(timeline: Timeline, start: float, work: list[float], cores: float | None, labels) -> float:
    """Each rank's ``work`` (seconds alone) as a compute span from ``start``, on shared ``cores`` when
    given; returns when the last rank is done (the next all-to-all waits for it)."""
    seconds = work if cores is None else shared_core_finish_times(work, cores)
    labels = [labels] * len(work) if isinstance(labels, str) else labels
    for rank, (busy, label) in enumerate(zip(seconds, labels, strict=True)):
        if busy > 0:
            timeline.add(rank, start, start + busy, "compute", label)
    return start + max(seconds, default=0.0)


def _per_rank_flops(flops, n: int) -> list[float]:
    if isinstance(flops, (list, tuple)):
        if len(flops) != n:
            raise ValueError(f"flops must be one FLOP/s for every rank or a list of {n}, got {len(flops)}")
        # a rank whose experts receive no rows has no rate to measure: infinity there costs nothing
        return [amount("flops", f, positive=True, finite=False, unit="FLOP/s") for f in flops]
    return [amount("flops", flops, positive=True, unit="FLOP/s")] * n


def _other_seconds(other_seconds) -> tuple[float, float]:
    if not isinstance(other_seconds, (list, tuple)) or len(other_seconds) != 2:
        raise ValueError(f"other_seconds must be (forward seconds, backward seconds), got {other_seconds!r}")
    return tuple(amount("other_seconds", s) for s in other_seconds)
