"""The ring all-reduce step by step: which chunk each rank sends, and what each rank holds after each step.

``ring_schedule`` replays the simulator's ring (reduce-scatter leaves chunk r complete on rank r);
``draw_ring_step`` draws one step and ``ring_widget`` plays them with a Play button and a slider.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

from course_lib.sim import Link, ring_timeline


@dataclass(frozen=True)
class RingStep:
    """The state after one step: ``holdings[rank][chunk]`` = the ranks whose data that copy sums."""

    phase: str                                   # "start", "reduce-scatter" or "all-gather"
    index: int                                   # step number inside its phase, from 1
    sends: tuple[tuple[int, int, int], ...]      # (from rank, to rank, chunk)
    holdings: tuple[tuple[frozenset, ...], ...]

    def title(self, world_size: int) -> str:
        if self.phase == "start":
            return "start: every rank holds only its own data in every chunk"
        verb = "adds it to its own copy" if self.phase == "reduce-scatter" else "overwrites its copy"
        return (f"{self.phase} step {self.index} of {world_size - 1}: each rank sends one chunk to its "
                f"right neighbour, which {verb}")


def ring_schedule(world_size: int) -> list[RingStep]:
    """The start state then the 2(N-1) steps of the simulator's ring all-reduce on ``world_size`` ranks.

    The drawing holds no schedule of its own: it replays the transfers of ``sim.ring_timeline`` (which
    chunk each rank sent in each round) and works out what every rank holds after each round. The
    simulator knows the algorithm chapter 02's exercise asks for; the exercise's refusal keeps an answer
    from running it (docs/grading.md, threat model).
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a whole number >= 1, got {world_size!r}")
    n = world_size
    holdings = [[frozenset({rank}) for _ in range(n)] for rank in range(n)]
    steps = [RingStep("start", 0, (), tuple(tuple(row) for row in holdings))]
    for round_index, transfers in enumerate(_rounds(n)):
        phase = transfers[0]["phase"]
        updated = [list(row) for row in holdings]
        for send in transfers:
            incoming = holdings[send["src"]][send["chunk"]]   # what the sender held before this round
            mine = holdings[send["dst"]][send["chunk"]]
            updated[send["dst"]][send["chunk"]] = mine | incoming if phase == "reduce-scatter" else incoming
        holdings = updated
        index = round_index + 1 if phase == "reduce-scatter" else round_index + 2 - n
        sends = tuple((s["src"], s["dst"], s["chunk"]) for s in transfers)
        steps.append(RingStep(phase, index, sends, tuple(tuple(row) for row in holdings)))
    return steps


def _rounds(world_size: int) -> list[list[dict]]:
    """The simulator's ring all-reduce, round by round: each round's transfers (phase, src, dst, chunk)."""
    if world_size == 1:
        return []
    timeline = ring_timeline("all_reduce", world_size, float(world_size), Link(latency=0.0, bandwidth=1.0))
    by_step: dict[int, list[dict]] = {}
    for event in timeline.events():
        by_step.setdefault(event.meta["step"], []).append(event.meta)
    return [sorted(by_step[step], key=lambda meta: meta["src"]) for step in sorted(by_step)]


def _rank_position(rank: int, world_size: int) -> tuple[float, float]:
    angle = math.pi / 2 - 2 * math.pi * rank / world_size  # rank 0 at the top, clockwise
    return math.cos(angle), math.sin(angle)


def draw_ring_step(step: RingStep, ax=None):
    """Ranks on a circle, each with its N chunks shaded by how many ranks' data they sum; returns the axes."""
    n = len(step.holdings)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 6.5))
    cmap = plt.get_cmap("Greens")
    cell = 0.8 / max(n, 2)
    for rank, chunks in enumerate(step.holdings):
        x, y = _rank_position(rank, n)
        left = x - cell * n / 2
        ax.text(x, y + 0.17, f"rank {rank}", ha="center", va="bottom", fontsize=9, weight="bold")
        for chunk, sources in enumerate(chunks):
            done = len(sources) / n
            ax.add_patch(Rectangle((left + chunk * cell, y - 0.07), cell, 0.2, fc=cmap(0.15 + 0.8 * done),
                                   ec="black", lw=1.8 if done == 1 else 0.5))
            ax.text(left + (chunk + 0.5) * cell, y + 0.03, f"{len(sources)}", ha="center", va="center",
                    fontsize=10, color="white" if done > 0.6 else "black")
            ax.text(left + (chunk + 0.5) * cell, y - 0.12, f"c{chunk}", ha="center", va="top", fontsize=7)
    for sender, receiver, chunk in step.sends:
        (x0, y0), (x1, y1) = _rank_position(sender, n), _rank_position(receiver, n)
        ax.add_patch(FancyArrowPatch((0.62 * x0, 0.62 * y0), (0.62 * x1, 0.62 * y1),
                                     connectionstyle="arc3,rad=-0.25", arrowstyle="-|>", mutation_scale=14,
                                     color="tab:orange", lw=1.5))
        mx, my = 0.5 * (x0 + x1) / 2, 0.5 * (y0 + y1) / 2
        ax.text(mx, my, f"c{chunk}", ha="center", va="center", fontsize=10, color="tab:orange")
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.35, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    caption = textwrap.fill(step.title(n), 60) + "\n(the number in chunk c = how many ranks' data it sums)"
    ax.set_title(caption, fontsize=9)
    return ax


def ring_step_png(step: RingStep) -> bytes:
    """One step drawn as PNG bytes (what the widget shows)."""
    fig, ax = plt.subplots(figsize=(6.5, 6.5))
    draw_ring_step(step, ax)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def ring_widget(world_size: int = 4, interval_ms: int = 1200):
    """A Play button and a slider stepping through the ring all-reduce; the picture follows the slider."""
    import ipywidgets as widgets

    steps = ring_schedule(world_size)
    play = widgets.Play(value=0, min=0, max=len(steps) - 1, interval=interval_ms, description="play")
    slider = widgets.IntSlider(value=0, min=0, max=len(steps) - 1, description="step")
    widgets.jslink((play, "value"), (slider, "value"))
    pictures: dict[int, bytes] = {}  # each step is drawn once, the first time it is shown
    image = widgets.Image(format="png")

    def show(change=None):
        if slider.value not in pictures:
            pictures[slider.value] = ring_step_png(steps[slider.value])
        image.value = pictures[slider.value]

    slider.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([play, slider]), image])


def draw_lanes(timeline, ax=None, unit: str = "ms", last: float | None = None):
    """One bar per event and lane of a sim ``Timeline``: sends orange, receives blue, idle grey.

    ``last`` (seconds) cuts the drawing there, to look at the first steps of a long run.
    """
    scale = {"s": 1.0, "ms": 1e3, "µs": 1e6}[unit]
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.5 * len(timeline.lane_names) + 1))
    for event in timeline.events():
        if last is not None and event.start >= last:
            continue
        end = event.end if last is None else min(event.end, last)
        receiving = event.label.startswith(("recv", "irecv"))
        sending = event.label.startswith(("send", "isend"))
        colour = "0.88" if event.kind == "idle" else ("tab:blue" if receiving else "tab:orange")
        # a send and a receive overlap in time: the send sits in the lane's upper half, the receive below
        offset, height = (-0.16, 0.3) if sending else (0.16, 0.3) if receiving else (0.0, 0.6)
        ax.barh(event.lane + offset, (end - event.start) * scale, left=event.start * scale, color=colour,
                height=height)
    ax.set_yticks(range(len(timeline.lane_names)), timeline.lane_names)
    ax.invert_yaxis()
    ax.set_xlabel(f"{unit} (orange: sending, blue: receiving, grey: waiting)")
    ax.set_title(timeline.title, fontsize=10)
    return ax
