"""Measuring this machine for the simulator: gloo's all-reduce and send/recv links, Python's per-message
cost, matmul FLOP/s alone and on ranks sharing the cores; and the one harness every measuring cell uses.

``calibrate()`` returns the laptop preset (``course_lib.sim.laptop_preset`` of what it measured) so a
chapter can predict an all-reduce or a training step with the simulator and then measure the real thing
on the same machine, timed the same way. The model of the measurements lives in
``course_lib.sim.cluster.laptop`` (plain Python); only the measuring is here.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

from course_lib.sim import HardwarePreset, Timeline, collective_time
from course_lib.sim.cluster.laptop import (
    Calibration,
    fit_cores,
    fit_error,
    fit_link,
    fit_message_overhead,
    laptop_preset,
)

from .runner import run_ranks
from .timing_harness import (
    REPETITIONS,
    _all_reduce_block,
    _repeated,
    back_to_back,
    interleaved_medians,
    interleaved_times,
    per_call_medians,
)

# The all-reduce and send/recv sizes calibrate() fits: the range the course's cells predict (bytes).
LINK_SIZES = (1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24)
# Python-level messages issued back to back per timed block (the per-message cost).
MESSAGES_PER_BLOCK = 32
# The compute block: float32 256x256 matmuls, 64 of them (about 10 ms on one core): long beside the
# scheduler's time slice, so on a shared machine it measures the share of a core a rank really gets.
MATMUL_SIZE, MATMULS_PER_TIMING = 256, 64
# The memory block: float32 c = a + b over arrays of 2**23 floats (32 MiB each, far beyond any cache),
# twice: what a rank's optimizer update and gradient copies stream, about 10 ms on one core.
STREAM_FLOATS, STREAMS_PER_TIMING = 1 << 23, 2
# A ring of tiny Python send/recv messages on CROWDED_FACTOR x the calibrated ranks: what one step of a
# Python ring costs when the ranks outnumber the cores. It is not the ping-pong's latency times the
# crowding: on the course's 2-core virtual machine 4 such ranks took 1.5 to 3 ms a step while 4 ranks held
# on one core took 0.2 ms (a rank woken on another virtual CPU waits for it to be scheduled), so it is
# measured, not derived. Steps per timed block:
CROWDED_FACTOR, CROWDED_STEPS = 2, 8
# gloo's ring all-reduce cuts every chunk into segments of at most 1 MiB (kMaxSegmentSize in
# gloo/allreduce.h), at least two per chunk.
GLOO_SEGMENT_BYTES = 1 << 20
# It keeps two segments in flight (gloo/allreduce.cc), so one's latency can pass while the other
# travels, but only if the ranks really run at once: when ranks take turns on a core, the latency is
# time spent waiting for the core, which no segment in flight hides. Ranks that each get at least
# RANKS_AT_ONCE_SHARE of the wall clock on a CPU while all spin together count as running at once.
# calibrate() reads the segments in flight off the all-reduce's own fit; the share is measured and
# reported beside it (and the constant kept for the chapters that print it).
GLOO_SEGMENTS_IN_FLIGHT = 2
RANKS_AT_ONCE_SHARE, CPU_SHARE_SPIN_SECONDS = 0.75, 0.02


def _ping_pong(rank: int, nbytes: int):
    """Half a round trip between ranks 0 and 1 (times 2 is what gets timed); the other ranks wait."""
    buffer = torch.zeros(max(1, nbytes // 4))

    def round_trip():
        if rank == 0:
            dist.send(buffer, 1)
            dist.recv(buffer, 1)
        elif rank == 1:
            dist.recv(buffer, 0)
            dist.send(buffer, 0)

    return round_trip


def _message_block(rank: int, world_size: int):
    """``MESSAGES_PER_BLOCK`` 4-byte messages to the right neighbour and as many from the left, every
    isend/irecv issued from Python at once and then waited: what a message costs beyond its latency."""
    outgoing, incoming = torch.zeros(MESSAGES_PER_BLOCK, 1), torch.zeros(MESSAGES_PER_BLOCK, 1)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def block():
        works = []
        for piece in range(MESSAGES_PER_BLOCK):
            works += [dist.irecv(incoming[piece], left), dist.isend(outgoing[piece], right)]
        for work in works:
            work.wait()

    return block


def _alone_and_together(rank: int, world_size: int, repetitions: int,
                        block) -> tuple[list[float], list[list[float]]]:
    """Seconds of ``block`` on rank 0 alone (the other ranks wait at a barrier), then on every rank at
    once: (rank 0's alone, each rank's together), ``repetitions`` of each after a warm-up."""
    block()
    alone = []
    for _ in range(repetitions):
        dist.barrier()
        if rank == 0:
            start = time.perf_counter()
            block()
            alone.append(time.perf_counter() - start)
        dist.barrier()
    together = []
    for _ in range(repetitions):
        dist.barrier()
        start = time.perf_counter()
        block()
        together.append(time.perf_counter() - start)
    lanes = [None] * world_size
    dist.all_gather_object(lanes, together)
    return alone, lanes


def _measure(rank: int, world_size: int, sizes, repetitions: int) -> dict:
    all_reduce = per_call_medians([_all_reduce_block(n) for n in sizes], repetitions)
    ping_pong = per_call_medians([back_to_back(_ping_pong(rank, n), n) for n in sizes], repetitions)
    message_block = interleaved_medians([_message_block(rank, world_size)], repetitions)[0]
    alone, together = _alone_and_together(rank, world_size, repetitions, _matmuls())
    stream_alone, stream_together = _alone_and_together(rank, world_size, repetitions, _streams())
    return {"stream_alone": stream_alone, "stream_together": stream_together,
            "block_bytes": 3 * 4 * STREAM_FLOATS * STREAMS_PER_TIMING,
            "all_reduce": all_reduce, "ping_pong": [t / 2 for t in ping_pong],
            "message_blocks": [message_block], "messages_per_block": MESSAGES_PER_BLOCK,
            "compute_alone": alone, "compute_together": together,
            "block_flops": 2 * MATMUL_SIZE**3 * MATMULS_PER_TIMING, "cpu_share": _cpu_share(repetitions)}


def _crowded_ring(rank: int, world_size: int, repetitions: int) -> float:
    """Mean seconds of one step of a Python ring of 4-byte messages (each rank sends to its right
    neighbour and receives from its left, even ranks sending first), the slowest rank's."""
    message = torch.zeros(1)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def steps():
        for _ in range(CROWDED_STEPS):
            if rank % 2 == 0:
                dist.send(message, right)
                dist.recv(message, left)
            else:
                dist.recv(message, left)
                dist.send(message, right)

    # the mean, not the median: a step here takes 0.1 ms or 4 ms depending on where the scheduler puts the
    # ranks, and a training epoch pays the steps' sum
    return interleaved_times([steps], repetitions, summary=statistics.mean)[0] / CROWDED_STEPS


def _cpu_share(repetitions: int) -> float:
    """Median over ``repetitions`` of the smallest share of the wall clock that a rank spent on a CPU
    while all ranks spun at once for ``CPU_SHARE_SPIN_SECONDS``: about 1 when every rank has a
    hardware thread of its own, 1/2 when two ranks take turns on one."""
    shares = []
    for _ in range(repetitions):
        dist.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - wall < CPU_SHARE_SPIN_SECONDS:
            pass
        share = torch.tensor([(time.process_time() - cpu) / (time.perf_counter() - wall)])
        dist.all_reduce(share, op=dist.ReduceOp.MIN)
        shares.append(share.item())
    return statistics.median(shares)


def _matmuls():
    """A few float32 matmuls back to back: long enough that the skew of the barrier before each
    timing is small beside them."""
    x, y = torch.randn(MATMUL_SIZE, MATMUL_SIZE), torch.randn(MATMUL_SIZE, MATMUL_SIZE)
    return _repeated(lambda: x @ y, MATMULS_PER_TIMING)


def _streams():
    """``STREAMS_PER_TIMING`` float32 adds c = a + b over arrays far larger than the caches: 3 x 4 bytes
    per float each (two read, one written), what memory-bound updates and copies move."""
    a, b, c = torch.ones(STREAM_FLOATS), torch.ones(STREAM_FLOATS), torch.empty(STREAM_FLOATS)
    return _repeated(lambda: torch.add(a, b, out=c), STREAMS_PER_TIMING)


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
                       crowded_ranks=data.get("crowded_ranks"), crowded_step=data.get("crowded_step"),
                       **bandwidth)


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
    - a ring of 4-byte Python send/recv messages on ``CROWDED_FACTOR`` x ``world_size`` ranks: what one
      step of a Python ring costs when the ranks outnumber the cores.

    ``measurements`` (a dict from ``measure``) skips the measuring. ``segments_in_flight`` (1 or 2)
    fits the all-reduce with that model of gloo's ring instead of the better-fitting one: the model
    you will predict with (chapter 02's formula sends one segment at a time).
    """
    if world_size < 2:
        raise ValueError("calibrate needs at least 2 ranks to measure a link; use world_size=2 or more")
    data = measurements or measure(world_size, sizes, repetitions, timeout)
    return laptop_preset(calibration_from(data, world_size, segments_in_flight))


def predict_all_reduce(preset: HardwarePreset, nbytes: float, world_size: int) -> float:
    """Seconds of one gloo all_reduce of ``nbytes`` predicted from a ``calibrate()`` preset: a ring in
    segments of ``GLOO_SEGMENT_BYTES`` with the preset's ``segments_in_flight``, as gloo runs it."""
    return collective_time("all_reduce", nbytes, world_size, preset.intra_node, "ring",
                           segment_bytes=GLOO_SEGMENT_BYTES, in_flight=preset.segments_in_flight)


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
    crowded_step = run_ranks(_crowded_ring, crowded, repetitions, timeout=timeout)[0]
    return {"sizes": sizes, **rank_zero, "crowded_ranks": crowded, "crowded_step": crowded_step}
