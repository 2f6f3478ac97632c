"""Draw where a DP x TP x PP x CP layout puts each rank: one row per node, colour = pipeline stage.

Each square is labelled with its (dp, tp, cp) indices, so which dimension stays inside a node is visible.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from course_lib.sim.job.layout import DEFAULT_PLACEMENT, check_degrees, check_placement, coordinates


def plot_placement(nodes: int, gpus_per_node: int, dp: int = 1, tp: int = 1, pp: int = 1, cp: int = 1,
                   placement=DEFAULT_PLACEMENT, ax=None, max_nodes: int = 8):
    """Ranks as squares, nodes as rows (the first ``max_nodes``), coloured by pipeline stage."""
    degrees = {"dp": dp, "tp": tp, "pp": pp, "cp": cp}
    check_degrees(nodes * gpus_per_node, degrees)
    placement = check_placement(placement)
    shown = min(nodes, max_nodes)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12, 1 + 0.9 * gpus_per_node), 0.6 + 0.7 * shown))
    cmap = plt.get_cmap("tab20" if pp > 10 else "tab10")
    for node in range(shown):
        for g in range(gpus_per_node):
            rank = node * gpus_per_node + g
            c = coordinates(rank, degrees, placement)
            ax.add_patch(plt.Rectangle((g, node), 0.92, 0.85, color=cmap(c["pp"] % cmap.N)))
            parts = [f"r{rank}"] + [f"{d}{c[d]}" for d in ("dp", "tp", "cp") if degrees[d] > 1]
            ax.text(g + 0.46, node + 0.43, "\n".join(parts), ha="center", va="center", fontsize=6)
    ax.set_xlim(0, gpus_per_node)
    ax.set_ylim(shown, 0)
    ax.set_yticks([n + 0.43 for n in range(shown)], [f"node {n}" for n in range(shown)])
    ax.set_xticks([])
    more = f" (first {shown} of {nodes} nodes)" if nodes > shown else ""
    ax.set_title(f"placement, innermost first: {' > '.join(placement)}; colour = pipeline stage{more}",
                 fontsize=9)
    ax.figure.tight_layout()
    return ax
