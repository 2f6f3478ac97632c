"""What calibrate() times on its ranks: a ping-pong, blocks of Python messages, a matmul block and a
memory-streaming block alone and on every rank at once, the CPU share while all spin, and a crowded ring.

Each function runs inside the ranks (``run_ranks``); ``course_lib.real.measure.calibration`` fits what
they return.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .timing_harness import (
    _all_reduce_block,
    _repeated,
    back_to_back,
    interleaved_medians,
    interleaved_times,
    per_call_medians,
    repetitions_here,
)

# Python-level messages issued back to back per timed block (the per-message cost).
MESSAGES_PER_BLOCK = 32
# The compute block: float32 256x256 matmuls, 64 of them (about 10 ms on one core): long beside the
# scheduler's time slice, so on a shared machine it measures the share of a core a rank really gets.
MATMUL_SIZE, MATMULS_PER_TIMING = 256, 64
# The memory block: float32 c = a + b over arrays of 2**23 floats (32 MiB each, far beyond any cache),
# twice: what a rank's optimizer update and gradient copies stream, about 10 ms on one core.
STREAM_FLOATS, STREAMS_PER_TIMING = 1 << 23, 2
# A ring of tiny Python messages on CROWDED_FACTOR x the calibrated ranks: what one step of a Python ring
# costs when the ranks outnumber the cores. It is not the ping-pong's latency times the crowding: on the
# course's 2-core virtual machine 4 such ranks took 0.1 to 13 ms a step, step by step, while 4 ranks held
# on one core took 0.2 ms (a rank woken on another virtual CPU waits for it to be scheduled), so it is
# measured, not derived. Each step is the one the course's ring runs (chapter 02's ring_reduce_scatter and
# ring_all_gather): irecv from the left, isend to the right, wait for both, one message latency a step.
# A timed block holds as many steps as chapter 03's ring makes in an epoch of 256 samples on 4 workers
# (8 all-reduces of 2(4-1) steps), so its median is taken over the same stretch of scheduling as the
# epoch's it predicts:
CROWDED_FACTOR, CROWDED_STEPS = 2, 48
# A rank that gets at least this share of the wall clock on a CPU while all spin together runs at once
# with the others; the share is measured over CPU_SHARE_SPIN_SECONDS of spinning. The threshold is the
# course's assumption, not a measured or published figure: a rank with a core to itself gets a share near
# 1, two ranks on one core about 0.5 each, and 0.75 is the midpoint between the two.
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
    repetitions = repetitions_here(repetitions)
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


def _crowded_ring(rank: int, world_size: int, repetitions: int) -> dict[str, list[float]]:
    """Seconds of each timed block of ``CROWDED_STEPS`` steps of a Python ring of 4-byte messages (each
    rank posts an irecv from its left neighbour and an isend to its right, then waits for both: chapter
    02's ring step), the slowest rank's, ``repetitions`` blocks after a warm-up, two ways:

    - ``kept``: each step's handles live until the next step has posted its messages (a loop reassigning
      them), what a ring pays step after step;
    - ``dropped``: each step drops its finished handles before the next posts (what a function returning
      after its steps does, chapter 02's ``ring_reduce_scatter`` and ``ring_all_gather``). On ranks that
      outnumber the cores that costs more than the step itself: 4 ranks on the course's 2-core machine
      took 0.6 ms a step kept and 2.3 ms dropped."""
    outgoing, incoming = torch.zeros(1), torch.zeros(1)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def steps(drop_handles: bool):
        def block():
            for _ in range(CROWDED_STEPS):
                receiving = dist.irecv(incoming, left)
                sending = dist.isend(outgoing, right)
                receiving.wait()
                sending.wait()
                if drop_handles:
                    del receiving, sending      # released now, before the next step posts
        return block

    # every block, not a summary: calibration_from records them as a timeline and fit_crowded_step takes
    # the median per step, the statistic every other calibrated quantity and chapter 03's epochs use
    kept, dropped = interleaved_times([steps(drop_handles=False), steps(drop_handles=True)], repetitions,
                                      summary=list)
    return {"kept": kept, "dropped": dropped}


def _cpu_share(repetitions: int) -> float:
    """Median over ``repetitions`` of the smallest share of the wall clock that a rank spent on a CPU
    while all ranks spun at once for ``CPU_SHARE_SPIN_SECONDS``: about 1 when every rank has a
    hardware thread of its own, 1/2 when two ranks take turns on one."""
    repetitions = repetitions_here(repetitions)
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
