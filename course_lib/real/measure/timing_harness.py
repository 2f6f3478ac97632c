"""The one timing harness of calibrate() and every measuring cell: the same statistic, block and warm-up.

Times operations started together on all ranks (the slowest rank's seconds, median of round-robin
repetitions after a warm-up), and gloo's all-reduce in blocks of back-to-back calls; calibration fits them.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from ..launch.runner import run_ranks
from ..plumbing.graded_run import graded_run

# One harness for calibrate() and every measuring cell (issue 39): the same statistic (the median of
# the slowest rank's seconds), the same block (back-to-back calls moving about BLOCK_BYTES, at most
# MAX_CALLS of them), the same warm-up (one untimed run of each block) and the same repetitions, so a
# quantity calibrate() fitted comes out near 1 when a cell measures it again.
REPETITIONS, BLOCK_BYTES, MAX_CALLS, WARM_UP = 9, 16 << 20, 32, 1
# In a graded run (graded_run.py) each block is timed at most GRADED_REPETITIONS times and moves at most
# GRADED_BLOCK_BYTES.
GRADED_REPETITIONS, GRADED_BLOCK_BYTES = 3, 2 << 20


def repetitions_here(repetitions: int) -> int:
    """``repetitions``, or at most GRADED_REPETITIONS in a graded run."""
    return min(repetitions, GRADED_REPETITIONS) if graded_run() else repetitions


def _slowest_rank_seconds(operation, own: list | None = None) -> float:
    """Seconds of one ``operation`` started together on all ranks, as the slowest rank saw it (this
    rank's own seconds appended to ``own`` if given)."""
    dist.barrier()
    start = time.perf_counter()
    operation()
    mine = time.perf_counter() - start
    if own is not None:
        own.append(mine)
    elapsed = torch.tensor([mine], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()


def _timed_rounds(operations: list, repetitions: int, own: list | None = None) -> list[list[float]]:
    """Each operation's seconds (the slowest rank's), timed round-robin: one of each per round, after
    WARM_UP untimed rounds, ``repetitions`` rounds (fewer in a graded run). ``own`` (a list per
    operation), when given, collects this rank's own seconds."""
    for _ in range(WARM_UP):
        for operation in operations:
            operation()
    return [[_slowest_rank_seconds(operation, None if own is None else own[i])
             for i, operation in enumerate(operations)] for _ in range(repetitions_here(repetitions))]


def interleaved_lanes(operations: list, repetitions: int) -> tuple[list[float], list[list[float]]]:
    """The harness's medians (slowest rank, as ``interleaved_medians``) and, per rank, each rank's own
    median of every operation (a list per rank, gathered on every rank): the lanes of a recorded run."""
    own = [[] for _ in operations]
    rounds = _timed_rounds(operations, repetitions, own)
    lanes = [None] * dist.get_world_size()
    dist.all_gather_object(lanes, [statistics.median(times) for times in own])
    return [statistics.median(column) for column in zip(*rounds, strict=True)], lanes


def interleaved_times(operations: list, repetitions: int, summary=statistics.median) -> list[float]:
    """``summary`` (the median unless told) of each operation's seconds, timed round-robin (one of
    each per round, after a warm-up): on a shared machine a burst of someone else's load then hits
    every size alike, not one size."""
    rounds = _timed_rounds(operations, repetitions)
    return [summary(column) for column in zip(*rounds, strict=True)]


def interleaved_medians(operations: list, repetitions: int) -> list[float]:
    """Median seconds of each operation, timed round-robin (see ``interleaved_times``)."""
    return interleaved_times(operations, repetitions)


def _repeated(operation, times: int):
    """One call that runs ``operation`` ``times`` times in a row."""
    def run():
        for _ in range(times):
            operation()

    return run


def back_to_back(operation, nbytes: int, block_bytes: int = BLOCK_BYTES, max_calls: int = MAX_CALLS):
    """``operation`` repeated back to back until about ``block_bytes`` have been moved (at most
    ``max_calls`` times), as one timed block, with the number of calls: as nccl-tests do, so the skew of
    the barrier that starts each timing is spread over many calls instead of landing on one small one."""
    if graded_run():
        block_bytes = min(block_bytes, GRADED_BLOCK_BYTES)
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


def measure_all_reduce(world_size: int, sizes, repetitions: int = REPETITIONS, timeout: float = 120,
                       all_reduce=None) -> list[float]:
    """Median seconds of one real all-reduce of each size in bytes (float32, slowest rank), timed in
    blocks of back-to-back calls (see ``back_to_back``). ``all_reduce(tensor)`` (run inside each rank,
    summing in place) is gloo's ``dist.all_reduce`` unless given: pass your own to race it."""
    if all_reduce is not None and not callable(all_reduce):
        raise ValueError(f"all_reduce must be a function all_reduce(tensor), got {all_reduce!r}")
    return run_ranks(_all_reduce_times, world_size, tuple(sizes), repetitions, all_reduce,
                     timeout=timeout)[0]
