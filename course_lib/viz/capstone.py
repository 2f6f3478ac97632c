"""The capstone's recorded traffic: every rank's calls on a time axis, coloured by the mesh dimension used.

Input: the "traffic" lists that course_lib.capstone.run_capstone returns per rank (dimension, op, bytes,
start, end); pieces played by PyTorch's stand-ins send from C++ and are not recorded.
"""

from __future__ import annotations

from typing import NamedTuple

import matplotlib.pyplot as plt

from .style import time_unit

DIMENSION_COLORS = {"tp": "#DD8452", "dp": "#55A868", "pp": "#8172B2"}


class Call(NamedTuple):
    """One recorded call, as the ranks send it back (plain tuples)."""

    dimension: str
    op: str
    nbytes: int
    start: float
    end: float


def plot_capstone_traffic(ranks: list, ax=None, title: str = "recorded traffic by mesh dimension"):
    """One row per rank, one bar per call, coloured by dimension; the legend gives each one's total bytes."""
    ax = ax or plt.subplots(figsize=(11, 3.5))[1]
    calls = [[Call(*e) for e in r["traffic"]] for r in ranks]
    events = [call for rank in calls for call in rank]
    if not events:
        ax.text(0.5, 0.5, "no traffic recorded (every piece was a PyTorch stand-in)", ha="center",
                transform=ax.transAxes)
        return ax
    origin = min(e.start for e in events)
    scale, unit = time_unit(max(e.end for e in events) - origin)
    for row, rank in enumerate(calls):
        for call in rank:
            ax.barh(row, max(call.end - call.start, 1e-6) * scale, left=(call.start - origin) * scale,
                    height=0.7, color=DIMENSION_COLORS.get(call.dimension, "grey"))
    totals = {d: sum(e.nbytes for e in events if e.dimension == d) for d in DIMENSION_COLORS}
    for dimension, color in DIMENSION_COLORS.items():
        ax.barh(0, 0, color=color, label=f"{dimension}: {totals[dimension] / 1e3:.1f} kB in all")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return ax
