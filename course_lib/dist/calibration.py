"""Measuring this machine for the simulator: gloo link latency/bandwidth, local reduction, matmul FLOP/s.

``calibrate()`` returns a ``course_lib.sim.HardwarePreset`` so the orientation chapter can predict an
all-reduce or a DDP step with the simulator and then measure the real thing on the same machine.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist

from course_lib.sim import HardwarePreset, Link, collective_time

from .runner import run_ranks

# Latency from a small message timed many times; bandwidth from 256 KiB .. 32 MiB, the chunk sizes
# (S/n) of the all-reduces the course predicts (1 MB to 64 MB on 2 to 4 ranks).
LATENCY_PROBE_BYTES, LATENCY_REPETITIONS = 4 << 10, 31
LINK_SIZES = (1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 25)
MATMUL_SIZE, MATMULS_PER_TIMING = 256, 8
# gloo's ring all-reduce cuts every chunk into segments of at most 1 MiB (kMaxSegmentSize in
# gloo/allreduce.h), at least two per chunk.
GLOO_SEGMENT_BYTES = 1 << 20
# It keeps two segments in flight (gloo/allreduce.cc), so one's latency can pass while the other
# travels, but only if the ranks really run at once: when ranks take turns on a core, the latency is
# time spent waiting for the core, which no segment in flight hides. Ranks that each get at least
# RANKS_AT_ONCE_SHARE of the wall clock on a CPU while all spin together count as running at once.
GLOO_SEGMENTS_IN_FLIGHT = 2
RANKS_AT_ONCE_SHARE, CPU_SHARE_SPIN_SECONDS = 0.75, 0.02


def _slowest_rank_seconds(operation) -> float:
    """Seconds of one ``operation`` started together on all ranks, as the slowest rank saw it."""
    dist.barrier()
    start = time.perf_counter()
    operation()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def interleaved_times(operations: list, repetitions: int, summary=statistics.median) -> list[float]:
    """``summary`` (the median unless told) of each operation's seconds, timed round-robin (one of
    each per round, after a warm-up): on a shared machine a burst of someone else's load then hits
    every size alike, not one size."""
    for operation in operations:
        operation()
    rounds = [[_slowest_rank_seconds(operation) for operation in operations] for _ in range(repetitions)]
    return [summary(column) for column in zip(*rounds, strict=True)]


def interleaved_medians(operations: list, repetitions: int) -> list[float]:
    """Median seconds of each operation, timed round-robin (see ``interleaved_times``)."""
    return interleaved_times(operations, repetitions)


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


def _ring_steps(rank: int, world_size: int, nbytes: int, pieces: int = 2):
    """2(n-1) ring steps back to back, as in one ring all-reduce: every rank sends ``nbytes`` to its
    right neighbour while receiving as much from its left, then goes on to the next step at once.

    Each step's chunk travels in ``pieces`` messages, all in flight at once. gloo's ring keeps two
    segments in flight (segments of at most 1 MiB, cut in C++); from Python every extra message
    costs tens of microseconds that gloo does not pay, so two halves stand in for its segments when
    measuring bandwidth, and one message per step when measuring latency.
    """
    elements = max(1, nbytes // 4 // pieces)
    outgoing, incoming = torch.zeros(pieces, elements), torch.zeros(pieces, elements)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def steps():
        for _ in range(2 * (world_size - 1)):
            works = []
            for piece in range(pieces):
                works += [dist.irecv(incoming[piece], left), dist.isend(outgoing[piece], right)]
            for work in works:
                work.wait()

    return steps


def _measure(rank: int, world_size: int, sizes, repetitions: int) -> dict:
    probe = LATENCY_PROBE_BYTES
    steps = 2 * (world_size - 1)
    latency = interleaved_times([_ring_steps(rank, world_size, probe, pieces=1), _ping_pong(rank, probe)],
                                LATENCY_REPETITIONS, summary=min)
    links = interleaved_medians([_ring_steps(rank, world_size, n) for n in sizes]
                                + [_ping_pong(rank, n) for n in sizes], repetitions)
    largest = max(sizes)
    a, b = torch.zeros(largest // 4), torch.ones(largest // 4)
    reduce_s, matmul_s = interleaved_medians([lambda: a.add_(b), _matmuls()], repetitions)
    return {"ring": [t / steps for t in links[:len(sizes)]], "ping_pong": [t / 2 for t in links[len(sizes):]],
            "ring_latency": latency[0] / steps, "ping_pong_latency": latency[1] / 2,
            "reduce": reduce_s / largest, "flops": 2 * MATMUL_SIZE**3 * MATMULS_PER_TIMING / matmul_s,
            "cpu_share": _cpu_share(repetitions)}


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


def _repeated(operation, times: int):
    """One call that runs ``operation`` ``times`` times in a row."""
    def run():
        for _ in range(times):
            operation()

    return run


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


def calibrate(world_size: int = 2, sizes=LINK_SIZES, repetitions: int = 5, timeout: float = 120,
              measurements: dict | None = None) -> HardwarePreset:
    """Measure this machine with ``world_size`` gloo ranks and return it as a simulator preset.

    Predict gloo's all-reduce with it as gloo runs one, a ring whose chunks are cut into segments
    with two in flight: ``predict_all_reduce(preset, nbytes, world_size)``, which is
    ``collective_time("all_reduce", nbytes, world_size, preset.intra_node,
    segment_bytes=GLOO_SEGMENT_BYTES, in_flight=preset.segments_in_flight)``.

    What is measured, and why: a quiet two-rank ping-pong overstates what each rank gets when N
    processes share a few cores and all talk at once. So the link is timed as a ring all-reduce loads
    it: 2(n-1) ring steps back to back, every rank sending to its right neighbour while receiving
    from its left, with two messages in flight as in gloo's ring (back to back, because one step
    alone mostly measures how long the ranks take to be scheduled again after a barrier).
    Latency (alpha) is the fastest per-step time of single 4 KiB messages: noise on a shared machine
    only ever adds time, and a segment's latency is what gloo pays in C++ without Python's
    per-message overhead. 1/bandwidth is the least-squares slope over ``sizes`` with that alpha
    fixed. The local additions are not added to the link: gloo adds one segment while the next is
    in flight. The link depends on how many ranks share the cores: calibrate with the world size
    you will predict for. FLOP/s is one rank's float32 256x256 matmuls (one thread per rank, as in
    run_ranks) while all ranks multiply together. Whether the ranks run at once is measured too: all
    spin together and each reports the share of the wall clock it spent on a CPU. Only if every rank
    gets at least ``RANKS_AT_ONCE_SHARE`` can a segment's latency pass while another is in flight, so
    only then is the preset's ``segments_in_flight`` gloo's 2 rather than 1 (4 ranks on 2 cores get
    about half). Sizes are timed round-robin so a burst of other
    load hits all sizes alike. The ping-pong fit and the addition rate are kept in the preset's
    ``source`` for comparison. ``measurements`` (a dict from ``measure``) skips the measuring.
    """
    if world_size < 2:
        raise ValueError("calibrate needs at least 2 ranks to measure a link; use world_size=2 or more")
    data = measurements or measure(world_size, sizes, repetitions, timeout)
    alpha, ping_alpha = data["ring_latency"], data["ping_pong_latency"]
    beta = fit_beta(data["sizes"], data["ring"], alpha)
    ping_beta = fit_beta(data["sizes"], data["ping_pong"], ping_alpha)
    link = Link(latency=alpha, bandwidth=1.0 / beta)
    share = data["cpu_share"]
    in_flight = GLOO_SEGMENTS_IN_FLIGHT if share >= RANKS_AT_ONCE_SHARE else 1
    source = (f"measured with {world_size} gloo ranks on loopback, as a ring all-reduce loads the link: "
              f"alpha={alpha:.3g} s, {1 / beta / 1e9:.3g} GB/s; a quiet ping-pong gives "
              f"alpha={ping_alpha:.3g} s, {1 / ping_beta / 1e9:.3g} GB/s; local addition "
              f"{1 / data['reduce'] / 1e9:.3g} GB/s; matmul {data['flops'] / 1e9:.3g} GFLOP/s per rank; "
              f"each rank on a CPU {share:.0%} of the time, so {in_flight} segment(s) in flight")
    return HardwarePreset(name=f"this machine ({world_size} gloo ranks)", flops=data["flops"],
                          memory_bytes=_physical_memory() / world_size, intra_node=link, inter_node=link,
                          source=source, segments_in_flight=in_flight)


def predict_all_reduce(preset: HardwarePreset, nbytes: float, world_size: int) -> float:
    """Seconds of one gloo all_reduce of ``nbytes`` predicted from a ``calibrate()`` preset: a ring in
    segments of ``GLOO_SEGMENT_BYTES`` with the preset's ``segments_in_flight``, as gloo runs it."""
    return collective_time("all_reduce", nbytes, world_size, preset.intra_node, "ring",
                           segment_bytes=GLOO_SEGMENT_BYTES, in_flight=preset.segments_in_flight)


def measure(world_size: int = 2, sizes=LINK_SIZES, repetitions: int = 5, timeout: float = 120) -> dict:
    """The raw measurements ``calibrate`` fits (slowest rank's medians): seconds per ring step and per
    one-way ping-pong for each size and for the small latency probe, seconds per byte of a local
    add, and matmul FLOP/s."""
    sizes = tuple(int(n) for n in sizes)
    if not sizes or min(sizes) < 4:
        raise ValueError("sizes must list message sizes in bytes, each at least 4")
    rank_zero = run_ranks(_measure, world_size, sizes, repetitions, timeout=timeout)[0]
    return {"sizes": sizes, **rank_zero}


def back_to_back(operation, nbytes: int, block_bytes: int = 16 << 20, max_calls: int = 32):
    """``operation`` repeated back to back until about ``block_bytes`` have been moved (at most
    ``max_calls`` times), as one timed block, with the number of calls: as nccl-tests do, so the skew of
    the barrier that starts each timing is spread over many calls instead of landing on one small one."""
    calls = min(max_calls, max(1, block_bytes // max(1, nbytes)))
    return _repeated(operation, calls), calls


def _all_reduce_block(nbytes: int, all_reduce=None):
    # zeros: a contestant that sums in place keeps them zeros, however many calls a block makes
    tensor = torch.zeros(max(1, nbytes // 4))
    all_reduce = all_reduce or dist.all_reduce
    return back_to_back(lambda: all_reduce(tensor), nbytes)


def per_call_medians(blocks: list, repetitions: int) -> list[float]:
    """Median seconds of one call in each ``back_to_back`` block, the blocks timed round-robin."""
    medians = interleaved_medians([block for block, _ in blocks], repetitions)
    return [seconds / calls for seconds, (_, calls) in zip(medians, blocks, strict=True)]


def _all_reduce_times(rank: int, world_size: int, sizes, repetitions: int, all_reduce=None) -> list[float]:
    return per_call_medians([_all_reduce_block(nbytes, all_reduce) for nbytes in sizes], repetitions)


def measure_all_reduce(world_size: int, sizes, repetitions: int = 5, timeout: float = 120,
                       all_reduce=None) -> list[float]:
    """Median seconds of one real all-reduce of each size in bytes (float32, slowest rank), timed in
    blocks of back-to-back calls (see ``back_to_back``). ``all_reduce(tensor)`` (run inside each rank,
    summing in place) is gloo's ``dist.all_reduce`` unless given: pass your own to race it."""
    if all_reduce is not None and not callable(all_reduce):
        raise ValueError(f"all_reduce must be a function all_reduce(tensor), got {all_reduce!r}")
    return run_ranks(_all_reduce_times, world_size, tuple(sizes), repetitions, all_reduce,
                     timeout=timeout)[0]
