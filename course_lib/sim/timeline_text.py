"""A Timeline drawn as text, one row per lane: what a check's failure message can show in any notebook.

Each op fills the columns of its time span with its label (``F3===``), idle time is ``.``; one column is
``quantum`` seconds, so uneven op times keep their proportions.
"""

from __future__ import annotations


def timeline_text(timeline, quantum: float | None = None, max_columns: int = 160) -> str:
    """``timeline``'s compute events as text rows; ``quantum`` seconds per column (default: a third of the
    shortest op, capped so that the longest row stays within ``max_columns``)."""
    events = [e for lane in timeline.lanes for e in lane if e.kind == "compute"]
    if not events:
        return "(no compute events)"
    if quantum is None:
        shortest = min((e.end - e.start for e in events if e.end > e.start), default=1.0)
        quantum = max(shortest / 3, timeline.makespan / max_columns)
    width = max(1, round(timeline.makespan / quantum))
    name_width = max(len(name) for name in timeline.lane_names)
    rows = []
    for name, lane in zip(timeline.lane_names, timeline.lanes, strict=True):
        row = ["."] * width
        for e in lane:
            if e.kind != "compute":
                continue
            first, last = round(e.start / quantum), max(round(e.end / quantum), round(e.start / quantum) + 1)
            cells = e.label + "=" * (last - first)
            for column in range(first, min(last, width)):
                row[column] = cells[column - first]
        rows.append(f"{name:>{name_width}} |{''.join(row[:width])}|")
    return "\n".join(rows)
