"""Measuring this machine for the simulator: gloo's all-reduce and send/recv links, Python's per-message
cost, matmul FLOP/s and memory bandwidth alone and on ranks sharing the cores, a crowded Python ring.
What runs on the ranks is in ``calibration_blocks``; the harness every measuring cell shares is in
``timing_harness``.

``calibrate()`` returns the laptop preset (``course_lib.sim.laptop_preset`` of what it measured) so a
chapter can predict an all-reduce or a training step with the simulator and then measure the real thing
on the same machine, timed the same way. The model of the measurements lives in
``course_lib.sim.cluster.laptop`` (plain Python); only the measuring is here.
"""

from __future__ import annotations

import os
import statistics

from course_lib.sim import HardwarePreset, Timeline, collective_time
from course_lib.sim.cluster.hardware import GLOO_SEGMENT_BYTES  # 1 MiB, gloo's kMaxSegmentSize
from course_lib.sim.cluster.laptop import (
    Calibration,
    fit_cores,
    fit_crowded_release,
    fit_crowded_step,
    fit_error,
    fit_link,
    fit_message_overhead,
    laptop_preset,
)

from ..launch.runner import run_ranks
from .calibration_blocks import CROWDED_FACTOR, CROWDED_STEPS, RANKS_AT_ONCE_SHARE, _crowded_ring, _measure
from .timing_harness import REPETITIONS

__all__ = ["GLOO_SEGMENT_BYTES", "GLOO_SEGMENTS_IN_FLIGHT", "LINK_SIZES", "RANKS_AT_ONCE_SHARE", "calibrate",
           "calibration_from", "fit_beta", "measure", "predict_all_reduce"]

# The all-reduce and send/recv sizes calibrate() fits: the range the course's cells predict (bytes).
LINK_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24)
# It keeps two segments in flight (gloo/allreduce.cc), so one's latency can pass while the other
# travels, but only if the ranks really run at once: when ranks take turns on a core, the latency is
# time spent waiting for the core, which no segment in flight hides. Ranks that each get at least
# RANKS_AT_ONCE_SHARE of the wall clock on a CPU while all spin together count as running at once.
# calibrate() reads the segments in flight off the all-reduce's own fit; the share is measured and
# reported beside it (and the constant kept for the chapters that print it).
GLOO_SEGMENTS_IN_FLIGHT = 2


def fit_beta(sizes, seconds, alpha: float) -> float:
    """Least-squares slope of t = alpha + n * beta with alpha already known (seconds per byte).

    Unweighted, so the large messages that dominate a big all-reduce's time set the slope.
    """
    if len(sizes) != len(seconds) or not sizes:
        raise ValueError("need (size, time) pairs of equal length to fit beta")
    beta = sum(n * (t - alpha) for n, t in zip(sizes, seconds, strict=True)) / sum(n * n for n in sizes)
    return max(beta, 1e-15)


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 8e9


def _lanes_timeline(lanes: list[list[float]], kind: str, meta: dict | None = None) -> Timeline:
    """Durations recorded on each process as a timeline: one lane per process, its spans back to back."""
    timeline = Timeline([f"process {i}" for i in range(len(lanes))], title="recorded at calibration")
    for lane, durations in enumerate(lanes):
        clock = 0.0
        for seconds in durations:
            timeline.add(lane, clock, clock + seconds, kind, "block", meta)
            clock += seconds
    return timeline


def _segmented_model(world_size: int, in_flight: int):
    def model(link, nbytes):
        return collective_time("all_reduce", nbytes, world_size, link, "ring",
                               segment_bytes=GLOO_SEGMENT_BYTES, in_flight=in_flight)
    return model


def calibration_from(data: dict, world_size: int, segments_in_flight: int | None = None) -> Calibration:
    """The ``Calibration`` (course_lib.sim's model of this machine) fitted to ``measure()``'s figures:
    gloo's all-reduce link fitted on its own all-reduce (segmented ring, as gloo runs it), the Python
    send/recv link on the ping-pong, the per-message cost and the cores shared read off the recorded
    blocks (``fit_message_overhead``, ``fit_cores``)."""
    share, sizes = data["cpu_share"], data["sizes"]
    fits = {}
    for in_flight in (1, GLOO_SEGMENTS_IN_FLIGHT) if segments_in_flight is None else (segments_in_flight,):
        model = _segmented_model(world_size, in_flight)
        link = fit_link(sizes, data["all_reduce"], model)
        fits[in_flight] = (fit_error(sizes, data["all_reduce"], model, link), link)
    # Whether the segments' latencies overlap is read off the all-reduce itself (the model that fits it
    # better); the CPU share the ranks got while spinning says why, and is kept beside it.
    in_flight = min(fits, key=lambda k: fits[k][0])
    collective = fits[in_flight][1]
    point_to_point = fit_link(sizes, data["ping_pong"], lambda link, n: link.transfer_time(n))
    messages = _lanes_timeline([data["message_blocks"]], "comm", {"messages": data["messages_per_block"]})
    alone = _lanes_timeline([data["compute_alone"]], "compute")
    together = _lanes_timeline(data["compute_together"], "compute")
    flops_alone = data["block_flops"] / statistics.median(data["compute_alone"])
    cores = fit_cores(alone, together)
    crowded = {}
    if data.get("crowded_blocks"):   # measurements recorded before the crowded ring was measured have none
        blocks = _lanes_timeline([data["crowded_blocks"]], "comm", {"steps": data["crowded_steps"]})
        crowded = {"crowded_ranks": data["crowded_ranks"], "crowded_step": fit_crowded_step(blocks)}
        if data.get("crowded_dropped_blocks"):   # nor, before it was measured, the handles dropped
            dropped = _lanes_timeline([data["crowded_dropped_blocks"]], "comm",
                                      {"steps": data["crowded_steps"]})
            crowded["crowded_release"] = fit_crowded_release(blocks, dropped)
    bandwidth = {}
    if "stream_alone" in data:   # measurements recorded before memory was measured have none
        bandwidth_alone = data["block_bytes"] / statistics.median(data["stream_alone"])
        channels = fit_cores(_lanes_timeline([data["stream_alone"]], "compute"),
                             _lanes_timeline(data["stream_together"], "compute"))
        bandwidth = {"bandwidth_alone": bandwidth_alone,
                     "bandwidth_together": bandwidth_alone * channels / world_size}
    return Calibration(world_size=world_size, flops_alone=flops_alone,
                       flops_together=flops_alone * cores / world_size, collective=collective,
                       point_to_point=point_to_point, message_overhead=fit_message_overhead(messages),
                       segments_in_flight=in_flight, memory_bytes=_physical_memory(), cpu_share=share,
                       notes={"extra": f"each rank on a CPU {share:.0%} of the time while all spun"},
                       **crowded, **bandwidth)


def calibrate(world_size: int = 2, sizes=LINK_SIZES, repetitions: int = REPETITIONS, timeout: float = 120,
              measurements: dict | None = None, segments_in_flight: int | None = None) -> HardwarePreset:
    """Measure this machine with ``world_size`` gloo ranks and return it as a simulator preset: the
    laptop preset, ``course_lib.sim.laptop_preset(calibration)``, its ``calibration`` attribute the
    measured ``Calibration`` (call ``laptop_preset(preset.calibration, ranks)`` for another count).

    One harness measures here and in every measuring cell (``measure_all_reduce``,
    ``measure_ddp_step``, ...): the median over ``repetitions`` of the slowest rank's seconds, blocks
    of back-to-back calls moving about ``BLOCK_BYTES``, one warm-up run of each block, sizes timed
    round-robin so a burst of other load hits all alike. What is measured:

    - gloo's all-reduce at ``sizes``, fitted (least squares of the log ratio) to the ring gloo runs:
      segments of at most ``GLOO_SEGMENT_BYTES``, one or two in flight, whichever fits better (two
      only help when the ranks really run at once). Re-measured by ``measure_all_reduce`` in the same
      harness, it comes out near 1 unless the machine changed between the two. The share of the wall
      clock each rank got on a CPU while all spun together is kept in the source line, as the reason.
    - a Python ``dist.send``/``dist.recv`` ping-pong at the same sizes: gloo's point-to-point link
      as a Python loop sees it, its latency apart from the collective's (which runs in C++).
    - ``MESSAGES_PER_BLOCK`` tiny isend/irecv pairs issued at once: the per-message cost of Python.
    - a block of float32 256x256 matmuls (one thread per rank) on one process alone and on all ranks
      at once: one process's FLOP/s and how many cores the ranks really share.
    - a block of float32 adds over 32 MiB arrays, alone and on all ranks at once: the memory bandwidth
      one process streams and how it is shared (what an optimizer update or a gradient copy runs at).
    - a ring of 4-byte Python irecv/isend steps (chapter 02's ring step) on ``CROWDED_FACTOR`` x
      ``world_size`` ranks, in blocks of ``CROWDED_STEPS``: what one step of a Python ring costs when the
      ranks outnumber the cores (the median block per step, ``fit_crowded_step``), and what a step costs
      more when it drops its finished handles before the next posts, as a ring function does when it
      returns (``fit_crowded_release``).

    ``measurements`` (a dict from ``measure``) skips the measuring. ``segments_in_flight`` (1 or 2)
    fits the all-reduce with that model of gloo's ring instead of the better-fitting one: the model
    you will predict with (chapter 02 predicts with two, as gloo keeps them).
    """
    if world_size < 2:
        raise ValueError("calibrate needs at least 2 ranks to measure a link; use world_size=2 or more")
    data = measurements or measure(world_size, sizes, repetitions, timeout)
    return laptop_preset(calibration_from(data, world_size, segments_in_flight))


def predict_all_reduce(preset: HardwarePreset, nbytes: float, world_size: int) -> float:
    """Seconds of one gloo all_reduce of ``nbytes`` predicted from a ``calibrate()`` preset: a ring in
    segments of ``GLOO_SEGMENT_BYTES`` with the preset's ``segments_in_flight``, as gloo runs it. The
    same ``preset.ring_options`` the simulator's steps and clusters use on that preset (one model)."""
    options = preset.ring_options("all_reduce", "ring")
    if not options:
        raise ValueError(f"preset {preset.name!r} has no segmented ring (segment_bytes=None): predict gloo's "
                         f"all-reduce from the preset calibrate() returns")
    return collective_time("all_reduce", nbytes, world_size, preset.intra_node, "ring", **options)


def measure(world_size: int = 2, sizes=LINK_SIZES, repetitions: int = REPETITIONS,
            timeout: float = 120) -> dict:
    """The raw measurements ``calibrate`` fits (rank 0's view; every time is the slowest rank's
    median per call): seconds per all-reduce and per one-way send/recv for each size, seconds of a
    block of ``messages_per_block`` Python messages, and seconds of the matmul block alone and on each
    rank together."""
    sizes = tuple(int(n) for n in sizes)
    if len(sizes) < 2 or min(sizes) < 4:
        raise ValueError("sizes must list two or more message sizes in bytes, each at least 4")
    rank_zero = run_ranks(_measure, world_size, sizes, repetitions, timeout=timeout)[0]
    crowded = CROWDED_FACTOR * world_size
    ring = run_ranks(_crowded_ring, crowded, repetitions, timeout=timeout)[0]
    return {"sizes": sizes, **rank_zero, "crowded_ranks": crowded, "crowded_blocks": ring["kept"],
            "crowded_dropped_blocks": ring["dropped"], "crowded_steps": CROWDED_STEPS}
