"""Before/after drawings of the six NCCL primitives: what each rank holds before and after the call.

Rank r's data is named by a letter (rank 0 holds a, rank 1 holds b, ...); a digit names one of the
N pieces of a buffer (a2 is piece 2 of rank 0's buffer) and a + b + ... is an element-wise sum.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

LETTERS = "abcdefghijklmnopqrstuvwxyz"
PRIMITIVES = ("scatter", "gather", "all_gather", "reduce", "all_reduce", "reduce_scatter")
ROOT = 0
DESCRIPTIONS = {
    "scatter": "the root's buffer is cut into N pieces; rank r receives piece r",
    "gather": "the root collects every rank's piece, in rank order",
    "all_gather": "every rank collects every rank's piece, in rank order",
    "reduce": "the root receives the element-wise sum of every rank's buffer",
    "all_reduce": "every rank receives the element-wise sum of every rank's buffer",
    "reduce_scatter": "the buffers are summed element-wise and rank r keeps piece r of the sum",
}


def _letter(rank: int) -> str:
    if rank >= 26:
        raise ValueError(f"the drawings name ranks by letters, so at most 26 ranks; got rank {rank}")
    return LETTERS[rank]


def _sum_label(world_size: int, piece: int | None = None) -> str:
    suffix = "" if piece is None else str(piece)
    if world_size <= 4:
        return "+".join(_letter(r) + suffix for r in range(world_size))
    return f"Σ{suffix}"


def collective_states(primitive: str, world_size: int = 4) -> tuple[list[list[str]], list[list[str]]]:
    """(before, after): for each rank, the labels of the blocks it holds (an empty list: nothing)."""
    if primitive not in PRIMITIVES:
        raise ValueError(f"unknown primitive {primitive!r}; choose one of {', '.join(PRIMITIVES)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= 26:
        raise ValueError(f"world_size must be a whole number from 1 to 26, got {world_size!r}")
    n, ranks = world_size, range(world_size)
    pieces_of = [[f"{_letter(r)}{i}" for i in range(n)] for r in ranks]
    whole = [[_letter(r)] for r in ranks]
    if primitive == "scatter":
        before = [pieces_of[ROOT] if r == ROOT else [] for r in ranks]
        after = [[pieces_of[ROOT][r]] for r in ranks]
    elif primitive == "gather":
        before = whole
        after = [[_letter(s) for s in ranks] if r == ROOT else whole[r] for r in ranks]
    elif primitive == "all_gather":
        before = whole
        after = [[_letter(s) for s in ranks] for _ in ranks]
    elif primitive == "reduce":
        before = whole
        after = [[_sum_label(n)] if r == ROOT else whole[r] for r in ranks]
    elif primitive == "all_reduce":
        before = whole
        after = [[_sum_label(n)] for _ in ranks]
    else:  # reduce_scatter
        before = pieces_of
        after = [[_sum_label(n, r)] for r in ranks]
    return before, after


def _colour(label: str):
    """One colour per rank's own data; a sum of several ranks' data is drawn dark grey."""
    if "+" in label or label.startswith("Σ"):
        return "0.3"
    return plt.get_cmap("tab10")(LETTERS.index(label[0]) % 10)


def _draw_ranks(ax, holdings: list[list[str]], title: str, block: float) -> None:
    """One row per rank; each block is ``block`` units wide (a whole buffer spans N pieces)."""
    width = len(holdings)
    for rank, blocks in enumerate(holdings):
        y = len(holdings) - 1 - rank
        ax.text(-0.3, y + 0.4, f"rank {rank}", ha="right", va="center", fontsize=9)
        ax.add_patch(Rectangle((0, y + 0.05), width, 0.7, fill=False, ec="0.8", lw=0.8, ls="--"))
        for slot, label in enumerate(blocks):
            ax.add_patch(Rectangle((slot * block, y + 0.05), block, 0.7, fc=_colour(label), ec="white",
                                   alpha=0.85))
            ax.text((slot + 0.5) * block, y + 0.4, label, ha="center", va="center", color="white",
                    fontsize=10 if len(label) * 7 < 40 * block else 7)
    ax.set_xlim(-1.6, width + 0.1)
    ax.set_ylim(-0.1, len(holdings))
    ax.set_title(title, fontsize=9)
    ax.axis("off")


def draw_collective(primitive: str, world_size: int = 4, axes=None):
    """Draw one primitive as two panels, before and after; returns the figure."""
    before, after = collective_states(primitive, world_size)
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(9, 0.45 * world_size + 0.8))
    fig = axes[0].figure
    block = world_size if primitive in ("reduce", "all_reduce") else 1
    _draw_ranks(axes[0], before, f"{primitive}: before", block)
    _draw_ranks(axes[1], after, f"after: {DESCRIPTIONS[primitive]}", block)
    return fig


def draw_all_collectives(world_size: int = 4):
    """The six primitives, one row each (before | after); returns the figure."""
    fig, grid = plt.subplots(len(PRIMITIVES), 2, figsize=(11, len(PRIMITIVES) * (0.45 * world_size + 0.9)))
    for row, primitive in zip(grid, PRIMITIVES, strict=True):
        draw_collective(primitive, world_size, axes=row)
    fig.tight_layout()
    return fig
