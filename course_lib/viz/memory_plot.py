"""Stacked bars of memory per device: parameters, gradients, optimizer states, activations, buffers.

Takes MemoryBreakdowns (one per stage or per configuration), a StepReport, or a dict label -> breakdown.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from .style import MEMORY_COLORS

GB = 1e9


def _normalise(breakdowns, labels):
    if hasattr(breakdowns, "memory_per_stage"):       # a StepReport
        breakdowns = breakdowns.memory_per_stage
    if isinstance(breakdowns, dict):
        labels = labels or list(breakdowns)
        breakdowns = list(breakdowns.values())
    breakdowns = list(breakdowns)
    labels = labels or [f"stage {i}" for i in range(len(breakdowns))]
    if len(labels) != len(breakdowns):
        raise ValueError(f"{len(labels)} labels for {len(breakdowns)} bars; give one label per bar")
    return breakdowns, labels


def plot_memory(breakdowns, labels=None, capacity: float | None = None, ax=None, title: str | None = None):
    """Stacked bars in GB, a dashed line at the device capacity, over-capacity bars outlined in red."""
    breakdowns, labels = _normalise(breakdowns, labels)
    if capacity is None:
        capacity = next((b.capacity for b in breakdowns if b.capacity), None)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 3 + 0.8 * len(breakdowns)), 3.5))
    x = range(len(breakdowns))
    bottom = [0.0] * len(breakdowns)
    for category, color in MEMORY_COLORS.items():
        heights = [b.as_dict()[category] / GB for b in breakdowns]
        if any(heights):
            ax.bar(x, heights, bottom=bottom, color=color, label=category.replace("_", " "))
            bottom = [a + b for a, b in zip(bottom, heights, strict=True)]
    if capacity:
        ax.axhline(capacity / GB, color="black", linestyle="--", linewidth=1, label="device memory")
        for i, total in enumerate(bottom):
            if total > capacity / GB:
                ax.bar(i, total, fill=False, edgecolor="red", linewidth=2)
    ax.set_xticks(list(x), labels, rotation=0 if len(labels) < 8 else 60)
    ax.set_ylabel("memory per device (GB)")
    ax.set_title(title or "memory per device")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.figure.tight_layout()
    return ax
