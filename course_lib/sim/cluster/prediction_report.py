"""What a predict-then-measure cell prints: one line in one form, and where the ratio falls outside
``WITHIN``, the measured time per lane of a recorded timeline (compute, waiting, transfer), each second
counted once. Plain Python on ``Timeline``s; ``course_lib.sim.cluster.laptop`` re-exports it.
"""

from __future__ import annotations

from ..timeline import Timeline

__all__ = ["OVERLAPS", "WITHIN", "breakdown_lines", "lane_breakdown", "misses_sentence", "prediction_line",
           "within"]

# A prediction is right when measured / predicted lands in this range (issue 39, DESIGN.md: "within 1.5x").
WITHIN = (0.67, 1.5)


def within(ratio: float, bounds: tuple[float, float] = WITHIN) -> bool:
    return bounds[0] <= ratio <= bounds[1]


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def misses_sentence(ratios: dict[str, float], bounds: tuple[float, float] = WITHIN) -> str:
    """Where a sweep's prediction misses in this run, as the sentence a chapter prints under its ratios
    (the run says it, not prose written from another run): ``ratios`` maps each point's label ("4 KiB")
    to measured / predicted. "the model misses in this run: slower than predicted at 256 KiB (1.62x);
    faster than predicted at 1 MiB (0.58x) ...", or that every point is within the band."""
    low, high = bounds
    slower = [f"{label} ({ratio:.2f}x)" for label, ratio in ratios.items() if ratio > high]
    faster = [f"{label} ({ratio:.2f}x)" for label, ratio in ratios.items() if ratio < low]
    if not slower and not faster:
        return f"every point is within [{low}, {high}] of the prediction in this run"
    parts = ([f"slower than predicted at {_listed(slower)}"] if slower else []) + \
        ([f"faster than predicted at {_listed(faster)}"] if faster else [])
    return f"the model misses in this run: {'; '.join(parts)} (the band is [{low}, {high}])"


def milliseconds(seconds: float) -> str:
    """Milliseconds to three significant figures, never in exponent notation."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def prediction_line(chapter: str, what: str, measured: float, predicted: float) -> str:
    """``prediction <chapter> <what>: measured <x> ms, predicted <y> ms, ratio <r>`` (seconds in)."""
    return (f"prediction {chapter} {what}: measured {milliseconds(measured)} ms, "
            f"predicted {milliseconds(predicted)} ms, ratio {measured / predicted:.2f}")


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) spans merged: the time covered by any of them."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _covered(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in _union(spans))


def _covered_outside(spans: list[tuple[float, float]], excluded: list[tuple[float, float]]) -> float:
    """Seconds covered by ``spans`` and by none of ``excluded``."""
    both = _union(spans)
    return _covered(both) - sum(max(0.0, min(end, e_end) - max(start, e_start))
                                for start, end in both for e_start, e_end in _union(excluded))


OVERLAPS = ("compute", "transfer")


def lane_breakdown(timeline: Timeline, overlap: str = "compute") -> list[dict]:
    """Per lane of a recorded timeline, seconds of compute, of transfer (comm spans) and of waiting
    (idle spans and every gap up to the makespan), which add up to the makespan: each second of a lane
    is counted once. ``overlap`` says who owns a second covered by both a compute and a comm span:
    ``"compute"`` where transfers are posted and then hidden under compute (they cost nothing while the
    block computes), ``"transfer"`` where a compute span wraps the collectives it calls (its time inside
    them is not compute)."""
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {OVERLAPS}, got {overlap!r}")
    makespan = timeline.makespan
    rows = []
    for index, name in enumerate(timeline.lane_names):
        events = list(timeline.events(index))
        computing = [(e.start, e.end) for e in events if e.kind == "compute"]
        moving = [(e.start, e.end) for e in events if e.kind == "comm"]
        if overlap == "compute":
            compute, transfer = _covered(computing), _covered_outside(moving, computing)
        else:
            compute, transfer = _covered_outside(computing, moving), _covered(moving)
        rows.append({"lane": name, "compute": compute, "transfer": transfer,
                     "waiting": max(0.0, makespan - compute - transfer)})
    return rows


def breakdown_lines(timeline: Timeline, overlap: str = "compute") -> list[str]:
    """``lane_breakdown`` as one line per lane, in milliseconds."""
    return [f"  {row['lane']}: compute {row['compute'] * 1e3:.3g} ms, waiting {row['waiting'] * 1e3:.3g} ms, "
            f"transfer {row['transfer'] * 1e3:.3g} ms" for row in lane_breakdown(timeline, overlap)]
