"""The student's own machine as a cluster the simulator knows: the model of what ``calibrate()`` measured.

Measuring lives in ``course_lib.real.measure.calibration``; this module is plain Python (no torch) and holds
what the measurements mean:

- ``Calibration``: the measured numbers. gloo's all-reduce link (latency and bandwidth fitted on
  gloo's own collective, timed as every measuring cell times it), gloo's point-to-point link as a
  Python ``dist.send``/``dist.recv`` sees it (its latency apart from the collective's), the cost of
  one Python-level message issued back to back (``message_overhead``), one process's matmul
  FLOP/s alone and while ``world_size`` processes multiply at once (how many cores the ranks share),
  and one process's streaming memory bandwidth alone and while all stream at once.
- ``compute_slowdown`` (and ``stream_slowdown`` for memory): how much slower each rank computes
  (streams) when ``ranks`` processes run at once: the measured factor at the calibrated rank count,
  ``ranks / cores`` beyond it (cores measured, not assumed).
- ``shared_core_finish_times``: when ranks that compute at once outnumber the cores, when each finishes:
  every rank computing gets an equal share of the cores, so one with less work finishes first and hands
  the rest a larger share (processor sharing; ``compute_slowdown`` is its case of equal work).
- ``laptop_preset(calibration, ranks)``: the calibrated machine as a ``HardwarePreset`` for ``ranks``
  processes, the laptop preset the simulator runs predictions on.
- ``fit_cores``, ``fit_message_overhead``, ``fit_crowded_step`` and ``fit_crowded_release``: the model
  parts read off recorded timelines (one lane per process, compute or comm spans), which is how
  ``calibrate()`` computes them and how the unit tests hold them without a clock.
- ``fit_line`` and ``fed_back_link``: chapter 09's bus-bandwidth fit (Theil-Sen: time against size) and
  the link that makes the simulator's 2-rank ring pass through it (latency intercept/2, bandwidth 1/slope).
- ``lane_breakdown`` and ``prediction_line`` (from ``prediction_report``, re-exported here): the one line
  every predict-then-measure cell prints, and the per-lane split (compute, waiting, transfer) of a
  recorded timeline it shows when the ratio falls outside ``WITHIN``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ..network.links import Link
from ..timeline import Timeline
from .hardware import GLOO_SEGMENT_BYTES, HardwarePreset
from .prediction_report import (
    WITHIN,
    breakdown_lines,
    lane_breakdown,
    misses_sentence,
    prediction_line,
    within,
)
from .shared_cores import shared_core_finish_times

__all__ = ["Calibration", "WITHIN", "breakdown_lines", "compute_slowdown", "fed_back_link", "fit_cores",
           "fit_crowded_release", "fit_crowded_step", "fit_error", "fit_line", "fit_link",
           "fit_message_overhead", "lane_breakdown", "laptop_preset", "misses_sentence", "prediction_line",
           "python_all_reduce_time", "python_hop_time", "python_message_time", "python_release_time",
           "shared_core_finish_times", "stream_slowdown", "within"]

@dataclass(frozen=True)
class Calibration:
    """What ``course_lib.real.calibrate()`` measured on this machine, as plain numbers."""

    world_size: int               # ranks that ran at once while measuring
    flops_alone: float            # one process's float32 matmul FLOP/s with the machine otherwise idle
    flops_together: float         # one process's FLOP/s while world_size processes multiply at once
    collective: Link              # gloo's all-reduce, fitted on gloo's own collective (segmented ring)
    point_to_point: Link          # a Python dist.send/recv: its latency holds one message's overhead
    message_overhead: float       # seconds one Python-level isend/irecv costs, issued back to back
    segments_in_flight: int = 1   # gloo keeps 2 in flight when the ranks really run at once
    memory_bytes: float = 8e9     # the machine's memory
    cpu_share: float = 1.0        # smallest share of the wall clock a rank spent on a CPU, all spinning
    notes: dict = field(default_factory=dict, compare=False)   # the raw figures, for the source line
    # Bytes/s one process streams through memory (a float32 add over arrays far larger than the caches)
    # alone, and while world_size processes stream at once; None where not measured.
    bandwidth_alone: float | None = None
    bandwidth_together: float | None = None
    # Seconds of one step of a Python ring of tiny messages (irecv from the left, isend to the right, wait
    # for both) on crowded_ranks processes, more than the cores: what a waiting rank costs when the ranks
    # take turns (fit_crowded_step: the median block per step); None where not measured.
    crowded_ranks: int | None = None
    crowded_step: float | None = None
    # Seconds a step of that ring costs more when it drops its finished handles before the next step
    # posts (as a ring function does when it returns): fit_crowded_release; None where not measured.
    crowded_release: float | None = None

    @property
    def cores(self) -> float:
        """Cores the ranks effectively share: world_size x (FLOP/s together / FLOP/s alone), at most
        world_size (2 ranks on 2 free cores: about 2; 4 ranks on 2 cores: about 2; less under load)."""
        return min(float(self.world_size), self.world_size * self.flops_together / self.flops_alone)


def compute_slowdown(calibration: Calibration, ranks: int) -> float:
    """How many times longer a block of compute takes on each of ``ranks`` processes running at once
    than on one process alone: the measured factor at the calibrated rank count, ``ranks / cores``
    for more ranks than that, 1 for one rank."""
    if ranks <= 1:
        return 1.0
    if ranks == calibration.world_size:
        return max(1.0, calibration.flops_alone / calibration.flops_together)
    return max(1.0, ranks / calibration.cores)


def stream_slowdown(calibration: Calibration, ranks: int) -> float:
    """``compute_slowdown`` for memory traffic: how many times longer streaming the same bytes takes on
    each of ``ranks`` processes at once than on one alone (the memory channels shared, as measured)."""
    alone, together = calibration.bandwidth_alone, calibration.bandwidth_together
    if alone is None or together is None:
        raise ValueError("this calibration has no memory bandwidth measured: run calibrate() again")
    if ranks <= 1:
        return 1.0
    measured = max(1.0, alone / together)
    if ranks == calibration.world_size:
        return measured
    return max(1.0, ranks * measured / calibration.world_size)


def laptop_preset(calibration: Calibration, ranks: int | None = None) -> HardwarePreset:
    """The calibrated machine as a simulator preset for ``ranks`` processes (the calibrated count
    unless given): each rank's FLOP/s slowed by ``compute_slowdown``, the links gloo's collective link
    (inside the machine and between its "nodes" alike), run as gloo's segmented ring."""
    ranks = calibration.world_size if ranks is None else int(ranks)
    slowdown = compute_slowdown(calibration, ranks)
    link, p2p = calibration.collective, calibration.point_to_point
    source = (f"measured with {calibration.world_size} gloo ranks: all-reduce alpha={link.latency:.3g} s, "
              f"{link.bandwidth / 1e9:.3g} GB/s ({calibration.segments_in_flight} segment(s) in flight); "
              f"Python send/recv alpha={p2p.latency:.3g} s, {p2p.bandwidth / 1e9:.3g} GB/s, "
              f"{calibration.message_overhead * 1e6:.3g} us per message; matmul "
              f"{calibration.flops_alone / 1e9:.3g} GFLOP/s alone, {calibration.cores:.2g} cores shared, "
              f"so {slowdown:.2f}x slower on each of {ranks} ranks")
    bandwidth = None
    if calibration.bandwidth_alone is not None and calibration.bandwidth_together is not None:
        bandwidth = calibration.bandwidth_alone / stream_slowdown(calibration, ranks)
        source += (f"; memory {calibration.bandwidth_alone / 1e9:.3g} GB/s streamed alone, "
                   f"{bandwidth / 1e9:.3g} each")
    if calibration.notes.get("extra"):
        source += "; " + calibration.notes["extra"]
    return HardwarePreset(name=f"this machine ({ranks} gloo ranks)", flops=calibration.flops_alone / slowdown,
                          memory_bytes=calibration.memory_bytes / max(1, ranks), intra_node=link,
                          inter_node=link, source=source, segments_in_flight=calibration.segments_in_flight,
                          segment_bytes=GLOO_SEGMENT_BYTES,   # the ring calibrate() fitted, gloo's
                          memory_bandwidth=bandwidth, calibration=calibration)


def python_message_time(calibration: Calibration, nbytes: float) -> float:
    """Seconds one Python-level ``dist.send`` of ``nbytes`` takes to arrive (point-to-point link)."""
    return calibration.point_to_point.transfer_time(nbytes)


def python_all_reduce_time(calibration: Calibration, nbytes: float, ranks: int,
                           algorithm: str = "ring") -> float:
    """Seconds of an all-reduce written in Python from blocking ``dist.send``/``dist.recv`` (chapters
    02 and 03) on ``ranks`` processes of this machine.

    ``ring``: 2(N-1) steps, each waiting for a message of nbytes/N from the left neighbour: every step
    pays the point-to-point latency. ``parameter_server``: rank 0 receives N-1 full messages and sends
    N-1 back; while every rank has a core the senders all send at once, so after the first message of
    each phase has paid its latency the others are already there and cost rank 0 one Python-level
    message each (the per-message cost) plus their bytes. Once the ranks outnumber the cores the
    senders do not all run at once: each of rank 0's 2(N-1) messages waits for its peer to be scheduled,
    a hop like a ring step's (chapter 03's recorded epochs on 4 workers and 2 cores: its all-reduces
    through rank 0 took as long as the ring's). Each wait for a message is ``python_hop_time``: when the
    ranks outnumber the cores, the measured step of a crowded ring.

    The ring is written as chapter 02 asks: ``ring_reduce_scatter`` and ``ring_all_gather``, two functions
    that each return after their N-1 steps, dropping their last step's irecv/isend handles before the
    next phase posts. Each of those 2 returns costs ``python_release_time`` (measured; nothing while every
    rank has a core). Through rank 0 blocks in ``send``/``recv`` and holds no handle.
    """
    n = int(ranks)
    if n <= 1:
        return 0.0
    link, hop = calibration.point_to_point, python_hop_time(calibration, n)
    if algorithm == "ring":
        return 2 * (n - 1) * (hop + nbytes / n / link.bandwidth) + 2 * python_release_time(calibration, n)
    if algorithm == "parameter_server":
        if _crowded(calibration, n):
            return 2 * (n - 1) * (hop + nbytes / link.bandwidth)
        queued = (n - 2) * calibration.message_overhead
        return 2 * (hop + queued + (n - 1) * nbytes / link.bandwidth)
    raise ValueError(f"algorithm must be 'ring' or 'parameter_server', got {algorithm!r}")


def _crowded(calibration: Calibration, ranks: int) -> bool:
    """Whether ``ranks`` processes outnumber the measured cores (a fractional count, hence the half)."""
    return ranks > calibration.cores + 0.5


def python_hop_time(calibration: Calibration, ranks: int) -> float:
    """Seconds a rank waits for a tiny Python message from a neighbour that sends it at once, on ``ranks``
    processes of this machine: the point-to-point latency while every rank has a core; once the ranks
    outnumber the cores, the measured step of the crowded ring (``crowded_step``, in proportion to the
    ranks), or without that measurement the latency stretched like compute (``compute_slowdown``)."""
    latency = calibration.point_to_point.latency
    if not _crowded(calibration, ranks):
        return latency
    if calibration.crowded_step is None:
        return latency * compute_slowdown(calibration, ranks)
    return max(latency, calibration.crowded_step * ranks / calibration.crowded_ranks)


def python_release_time(calibration: Calibration, ranks: int) -> float:
    """Seconds a Python ring step costs more, on ``ranks`` processes of this machine, when it drops its
    finished irecv/isend handles before the next step posts its messages: nothing while every rank has a
    core (or where not measured); once the ranks outnumber the cores, the measured ``crowded_release``
    in proportion to the ranks, as ``python_hop_time`` scales the step."""
    if not _crowded(calibration, ranks) or calibration.crowded_release is None:
        return 0.0
    return calibration.crowded_release * ranks / calibration.crowded_ranks


# -- fitting the model's parts from recorded timelines ---------------------------------------------

def _durations(timeline: Timeline, kind: str, lane: int | None = None) -> list[float]:
    return [e.end - e.start for e in timeline.events(lane) if e.kind == kind]


def fit_cores(alone: Timeline, together: Timeline) -> float:
    """Cores the ranks share, from the same compute block timed on one process (``alone``, one lane)
    and on every lane of ``together`` at once: lanes x median alone / median of the slowest lane's
    medians, at most the number of lanes."""
    lanes = len(together.lanes)
    one = statistics.median(_durations(alone, "compute"))
    slowest = max(statistics.median(_durations(together, "compute", lane)) for lane in range(lanes))
    return min(float(lanes), lanes * one / slowest)


def fit_message_overhead(timeline: Timeline) -> float:
    """Seconds per Python-level message: each ``comm`` span is a block of messages issued back to back
    (its ``meta["messages"]`` says how many), so the median of span / messages over the spans."""
    per_message = [(e.end - e.start) / (e.meta or {}).get("messages", 1)
                   for e in timeline.events() if e.kind == "comm"]
    if not per_message:
        raise ValueError("fit_message_overhead needs comm spans (blocks of messages) on the timeline")
    return statistics.median(per_message)


def fit_crowded_step(timeline: Timeline) -> float:
    """Seconds per step of a crowded Python ring: each ``comm`` span is a timed block of ring steps (its
    ``meta["steps"]`` says how many), the slowest rank's; the median block per step. The median, as for
    every other calibrated quantity: single steps take 0.1 ms or 10 ms depending on where the scheduler
    puts the ranks, but a block as long as an epoch's ring steps averages that inside the block, and the
    median over blocks is then what chapter 03's median epoch pays."""
    per_step = [(e.end - e.start) / (e.meta or {}).get("steps", 1)
                for e in timeline.events() if e.kind == "comm"]
    if not per_step:
        raise ValueError("fit_crowded_step needs comm spans (blocks of ring steps) on the timeline")
    return statistics.median(per_step)


def fit_crowded_release(kept: Timeline, dropped: Timeline) -> float:
    """Seconds a crowded ring's step costs more when each step drops its finished irecv/isend handles
    before the next posts (``dropped``) than when they live on until then (``kept``): both timelines of
    blocks of ring steps as ``fit_crowded_step`` reads them, the difference of their medians per step
    (never below 0)."""
    return max(0.0, fit_crowded_step(dropped) - fit_crowded_step(kept))


def fit_error(sizes, seconds, model, link: Link) -> float:
    """Sum of squared log(measured / predicted) over the sizes: 0 for a perfect fit."""
    return sum(math.log(t / model(link, n)) ** 2 for n, t in zip(sizes, seconds, strict=True))


def fit_link(sizes, seconds, model) -> Link:
    """The Link(latency, bandwidth) whose ``model(link, nbytes)`` comes closest to the measured
    ``seconds`` in ratio (least squares of log(measured / predicted)), so that the quantity fitted
    re-measured comes out near 1 at every size: a search over log-spaced latencies and bandwidths,
    refined three times around the best."""
    sizes, seconds = list(sizes), list(seconds)
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("fit_link needs two or more (size, seconds) pairs of equal length")

    def error(log_a, log_b):
        return fit_error(sizes, seconds, model, Link(latency=math.exp(log_a), bandwidth=math.exp(log_b)))

    centre_a, centre_b = math.log(min(seconds) / 4), math.log(max(sizes) / max(seconds))
    width = math.log(1e3)
    for _ in range(4):
        grid = [(centre_a + width * (i / 10 - 1), centre_b + width * (j / 10 - 1))
                for i in range(21) for j in range(21)]
        centre_a, centre_b = min(grid, key=lambda p: error(*p))
        width /= 8
    return Link(latency=math.exp(centre_a), bandwidth=math.exp(centre_b))


def fit_line(sizes, seconds) -> tuple[float, float]:
    """(intercept, slope) of time against size, fitted robustly (Theil-Sen): the slope is the median of
    the slopes between every pair of points, the intercept the median of what each point leaves over,
    so one point slowed by someone else's work cannot move the line."""
    points = list(zip(sizes, seconds, strict=True))
    if len(points) < 2:
        raise ValueError("fit_line needs two or more (size, seconds) pairs")
    slope = statistics.median((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points)
                              for x2, y2 in points[i + 1:] if x2 != x1)
    return statistics.median(y - slope * x for x, y in points), slope


def fed_back_link(intercept: float, slope: float) -> Link:
    """The link whose 2-rank ring all-reduce, 2 latency + S / bandwidth, is the fitted line (chapter 09):
    latency intercept / 2 (at least 1 us: a noisy fit can put the intercept below 0), bandwidth 1 / slope."""
    return Link(latency=max(intercept / 2, 1e-6), bandwidth=1 / slope)
