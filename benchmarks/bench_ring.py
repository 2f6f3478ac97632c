"""Benchmark: the chapter-02 reference ring all-reduce against gloo's own all_reduce, bus bandwidth at 16 MB.

Runs both on the same 4 CPU ranks in alternating blocks of back-to-back calls (as nccl-tests times
them), so that both see the same load; a block's time is its slowest rank's. Prints medians and the
ratio (goal: ring >= 0.8x gloo). Usage: python benchmarks/bench_ring.py [--megabytes 16] [--ranks 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.notebook_cells import sources_by_id  # noqa: E402
from course_lib.real import run_ranks  # noqa: E402
from course_lib.sim import bus_bandwidth  # noqa: E402

SOLUTION = ROOT / "solutions" / "02_collectives" / "02_collectives.ipynb"


def race(rank, world_size, ring, nbytes, blocks, calls_per_block):
    """Per block, this rank's seconds per call for the ring and for gloo, alternating blocks.

    As nccl-tests does, a block times back-to-back calls and divides; the first pair of blocks warms up.
    """
    ring_all_reduce = ring.resolve()
    tensor = torch.randn(nbytes // 4)
    times = {"ring": [], "gloo": []}
    for _ in range(blocks + 1):
        for name, all_reduce in (("ring", ring_all_reduce), ("gloo", dist.all_reduce)):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls_per_block):
                all_reduce(tensor)
                tensor /= world_size  # keeps the values finite; a few microseconds against milliseconds
            dist.barrier()
            times[name].append((time.perf_counter() - start) / calls_per_block)
    return {name: seconds[1:] for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=16)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=9)
    parser.add_argument("--calls", type=int, default=5, help="back-to-back calls per timed block")
    options = parser.parse_args()
    nbytes = int(options.megabytes * 2**20) // 4 * 4
    cells = ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce")
    ring = StudentFunction("ring_all_reduce", sources=sources_by_id(SOLUTION, cells))
    per_rank = run_ranks(race, options.ranks, ring, nbytes, options.blocks, options.calls, timeout=600)
    slowest = {name: [max(times) for times in zip(*(r[name] for r in per_rank), strict=True)]
               for name in ("ring", "gloo")}
    medians = {name: statistics.median(times) for name, times in slowest.items()}
    busbw = {name: bus_bandwidth("all_reduce", nbytes, t, options.ranks) for name, t in medians.items()}
    # Each ring block next to the gloo block right after it: both saw about the same load from other work.
    paired = statistics.median(g / r for g, r in zip(slowest["gloo"], slowest["ring"], strict=True))
    print(f"all_reduce of {nbytes / 2**20:g} MB on {options.ranks} gloo CPU ranks, "
          f"median of {options.blocks} alternating blocks of {options.calls} back-to-back calls "
          "(slowest rank)")
    for name in ("ring", "gloo"):
        print(f"  {name:>4}: {medians[name] * 1e3:8.2f} ms   busbw {busbw[name] / 1e9:6.3f} GB/s")
    print(f"ring / gloo bus bandwidth ratio: {busbw['ring'] / busbw['gloo']:.2f} (ratio of medians), "
          f"{paired:.2f} (median of adjacent-block ratios)  goal >= 0.8")


if __name__ == "__main__":
    main()
