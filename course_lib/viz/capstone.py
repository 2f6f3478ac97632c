"""The capstone's recorded traffic: every rank's calls on a time axis, coloured by the mesh dimension used.

Input: the "traffic" lists that course_lib.capstone.run_capstone returns per rank (dimension, op, bytes,
start, end); pieces played by PyTorch's stand-ins send from C++ and are not recorded.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from .style import time_unit

DIMENSION_COLORS = {"tp": "#DD8452", "dp": "#55A868", "pp": "#8172B2"}


def plot_capstone_traffic(ranks: list, ax=None, title: str = "recorded traffic by mesh dimension"):
    """One row per rank, one bar per call, coloured by dimension; the legend gives each one's total bytes."""
    ax = ax or plt.subplots(figsize=(11, 3.5))[1]
    events = [e for r in ranks for e in r["traffic"]]
    if not events:
        ax.text(0.5, 0.5, "no traffic recorded (every piece was a PyTorch stand-in)", ha="center",
                transform=ax.transAxes)
        return ax
    origin = min(e[3] for e in events)
    scale, unit = time_unit(max(e[4] for e in events) - origin)
    for row, rank in enumerate(ranks):
        for dimension, _, _, start, end in rank["traffic"]:
            ax.barh(row, max(end - start, 1e-6) * scale, left=(start - origin) * scale, height=0.7,
                    color=DIMENSION_COLORS.get(dimension, "grey"))
    totals = {d: sum(e[2] for e in events if e[0] == d) for d in DIMENSION_COLORS}
    for dimension, color in DIMENSION_COLORS.items():
        ax.barh(0, 0, color=color, label=f"{dimension}: {totals[dimension] / 1e3:.1f} kB in all")
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in range(len(ranks))])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    return ax
