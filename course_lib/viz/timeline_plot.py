"""Draw a simulator Timeline: one lane per rank, compute / communication / idle in distinct colours.

Beyond ``max_rows`` lanes, ranks with identical lanes (or the same group label) share one row;
``plot_timelines`` draws several timelines (a measured run and its simulation) on one time axis.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from course_lib.sim import join_timelines

from .style import COLORS, time_unit


def _rows(timeline, max_rows: int):
    """[(label, lane events)] — one per lane, or one per group of identical lanes when there are many."""
    lanes, names = timeline.lanes, timeline.lane_names
    if len(lanes) <= max_rows:
        return [(names[i], lanes[i]) for i in range(len(lanes))], 0
    groups: dict = {}
    for i, lane in enumerate(lanes):
        key = timeline.lane_groups[i] if timeline.lane_groups else id(lane)
        groups.setdefault(key, []).append(i)
    rows = []
    for members in groups.values():
        head = timeline.lane_groups[members[0]] if timeline.lane_groups else names[members[0]]
        count = f"{len(members)} ranks" if len(members) > 1 else names[members[0]]
        rows.append((f"{head} ({count})" if len(members) > 1 else head, lanes[members[0]]))
    if len(rows) <= max_rows:
        return rows, 0
    # Still too many: an evenly spaced sample that keeps the first and the last row.
    picks = sorted({round(i * (len(rows) - 1) / (max_rows - 1)) for i in range(max_rows)})
    return [rows[i] for i in picks], len(rows) - len(picks)


def _color(event) -> str:
    if event.kind == "compute" and event.meta:
        phase = event.meta.get("phase")
        if phase in ("F", "B"):
            return COLORS["forward" if phase == "F" else "backward"]
    return COLORS[event.kind]


def plot_timeline(timeline, ax=None, max_rows: int = 32, title: str | None = None,
                  labels: bool | None = None):
    """Draw ``timeline`` (a course_lib.sim Timeline) and return the matplotlib Axes.

    Compute fills the upper part of a row, communication the lower part, idle time is grey.
    ``labels``: write event labels inside wide enough bars (default: when few events are shown).
    """
    rows, hidden = _rows(timeline, max_rows)
    makespan = timeline.makespan or 1.0
    scale, unit = time_unit(makespan)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(rows)))
    shown = sum(len(lane) for _, lane in rows)
    if labels is None:
        labels = sum(e.kind == "compute" for _, lane in rows for e in lane) <= 120
    # Only communication on the timeline (a collective on its own): it gets the whole row.
    comm_only = all(e.kind != "compute" for _, lane in rows for e in lane)
    edge = dict(linewidth=0.4, edgecolor="white") if shown <= 400 else dict(linewidth=0)
    chars_per_second = ax.figure.get_figwidth() * 0.8 * 72 / (7 * 0.6) / (makespan * scale)
    for y, (_, lane) in enumerate(rows):
        ax.broken_barh([(0, makespan * scale)], (y - 0.4, 0.8), color=COLORS["idle"], zorder=0)
        by_color: dict = {}
        for e in lane:
            box = (y - 0.4, 0.8) if comm_only else (y - 0.4, 0.5) if e.kind != "comm" else (y + 0.12, 0.28)
            by_color.setdefault((_color(e), box), []).append((e.start * scale, e.seconds * scale))
        for (color, box), spans in by_color.items():
            ax.broken_barh(spans, box, color=color, zorder=1, **edge)
        if labels:
            for e in lane:
                width = e.seconds * scale
                fits = int(width * chars_per_second)
                if fits < 3:
                    continue
                text = e.label if len(e.label) <= fits else e.label[:fits - 1] + "…"
                ybox = y if comm_only else y - 0.15 if e.kind != "comm" else y + 0.26
                ax.text(e.start * scale + width / 2, ybox, text, ha="center", va="center", fontsize=7,
                        color="black" if e.kind == "comm" else "white", clip_on=True)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, makespan * scale)
    ax.set_xlabel(f"time ({unit})")
    note = f"  ({len(rows)} of {len(rows) + hidden} rows shown, evenly spaced)" if hidden else ""
    ax.set_title((title or timeline.title or "timeline") + note)
    handles = [Patch(color=COLORS[k], label=k) for k in ("compute", "comm", "idle")]
    if any(e.meta and e.meta.get("phase") in ("F", "B") for _, lane in rows for e in lane[:50]):
        handles = [Patch(color=COLORS["forward"], label="forward"),
                   Patch(color=COLORS["backward"], label="backward")] + handles[1:]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_timelines(parts: dict, ax=None, title: str | None = None, **options):
    """Several timelines on one time axis (a real run and its simulation, say): ``parts`` maps a name to a
    Timeline; they are joined by ``course_lib.sim.join_timelines`` and drawn by ``plot_timeline``."""
    joined = join_timelines(parts, title or "")
    return plot_timeline(joined, ax=ax, title=title, **options)
