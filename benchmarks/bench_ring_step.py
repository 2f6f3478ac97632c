"""Benchmark: what one step of a Python ring costs when each rank computes between posting its transfer and
waiting for it, as chapter 10's ring attention does (issue 39).

Each rank posts ``isend`` to its right and ``irecv`` from its left, multiplies a block of 256 x 256 matrices,
then waits for both; 16 steps timed together (the slowest rank, median of 9 after a warm-up). The block is
also timed alone on one process, one thread. Prints, per block, message size and rank count, the step time,
the step as a multiple of the block alone, and what is left once the block's share of the cores is taken
off (``step - block x ranks / cores``): the step's own cost, which the transfer's overlap does not hide.
A goal-free measurement for the prediction of ``course_lib.real.predict.predictions.predict_ring_attention``.

Usage: python benchmarks/bench_ring_step.py [--products 0 4 16] [--bytes 4 524288] [--ranks 2 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from course_lib.real import run_ranks  # noqa: E402

STEPS, REPETITIONS = 16, 9


def products(count: int):
    """A block of work: ``count`` products of two 256 x 256 matrices."""
    matrix = torch.randn(256, 256)

    def run():
        for _ in range(count):
            matrix @ matrix

    return run


def block_alone(count: int) -> float:
    torch.set_num_threads(1)
    block = products(count)
    block()
    seconds = []
    for _ in range(REPETITIONS):
        start = time.perf_counter()
        block()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def ring_steps(rank, world_size, nbytes, count):
    """Seconds of one ring step: STEPS steps timed together, the slowest rank's, median of REPETITIONS."""
    block, held = products(count), torch.zeros(max(1, nbytes // 4))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    block()
    seconds = []
    for repetition in range(REPETITIONS + 1):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(STEPS):
            arriving = torch.empty_like(held)
            requests = [dist.isend(held, right), dist.irecv(arriving, left)]
            block()
            for request in requests:
                request.wait()
            held = arriving
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if repetition:                                   # the first is the warm-up
            seconds.append(elapsed.item() / STEPS)
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, nargs="+", default=[0, 4, 16])
    parser.add_argument("--bytes", type=int, nargs="+", default=[4, 524288])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    options = parser.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores usable, load average {os.getloadavg()[0]:.1f} at start")
    for count in options.products:
        alone = block_alone(count) if count else 0.0
        for nbytes in options.bytes:
            for ranks in options.ranks:
                step = run_ranks(ring_steps, ranks, nbytes, count, timeout=300)[0]
                multiple = f"{step / alone:5.2f}x the block" if alone else "no block"
                left = step - alone * max(1.0, ranks / cores)
                print(f"block {alone * 1e3:5.2f} ms alone, {nbytes:7d} B a pass, {ranks} ranks: step "
                      f"{step * 1e3:6.2f} ms ({multiple}); the step's own cost {left * 1e3:5.2f} ms")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
