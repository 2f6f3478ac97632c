"""Colours and unit formatting shared by every course drawing.

Compute is blue (forward lighter, backward darker), communication orange, idle light grey.
"""

from __future__ import annotations

COLORS = {
    "compute": "#4C72B0",
    "forward": "#7BA7DB",
    "backward": "#2F5597",
    "comm": "#DD8452",
    "idle": "#E6E6E6",
}
MEMORY_COLORS = {
    "parameters": "#4C72B0",
    "gradients": "#55A868",
    "optimizer_states": "#C44E52",
    "activations": "#8172B2",
    "buffers": "#CCB974",
}


def time_unit(seconds: float) -> tuple[float, str]:
    """(scale, name) so that seconds * scale reads well: s, ms or µs."""
    if seconds >= 1:
        return 1.0, "s"
    if seconds >= 1e-3:
        return 1e3, "ms"
    return 1e6, "µs"
