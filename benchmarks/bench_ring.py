"""Benchmark: the chapter-02 reference ring all-reduce against gloo's own all_reduce, bus bandwidth at 16 MB.

Runs both on the same 4 CPU ranks, alternating them call by call so that both see the same load; each
call's time is the slowest rank's, and the script prints medians and the ratio (goal: ring >= 0.8x gloo).
Usage: python benchmarks/bench_ring.py [--megabytes 16] [--ranks 4] [--repeats 21]
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

from autograde_tests.checks.ch02_ring import notebook_sources  # noqa: E402
from course_lib.dist import run_ranks  # noqa: E402
from course_lib.grading.student_function import StudentFunction  # noqa: E402
from course_lib.sim import bus_bandwidth  # noqa: E402

SOLUTION = ROOT / "solutions" / "02_collectives" / "02_collectives.ipynb"


def race(rank, world_size, ring, nbytes, repeats):
    """Per call, this rank's seconds for the ring and for gloo, alternating (the first pair warms up)."""
    ring_all_reduce = ring.resolve()
    tensor = torch.randn(nbytes // 4)
    times = {"ring": [], "gloo": []}
    for _ in range(repeats + 1):
        for name, all_reduce in (("ring", ring_all_reduce), ("gloo", dist.all_reduce)):
            dist.barrier()
            start = time.perf_counter()
            all_reduce(tensor)
            times[name].append(time.perf_counter() - start)
            tensor /= world_size
    return {name: seconds[1:] for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=16)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=21)
    options = parser.parse_args()
    nbytes = int(options.megabytes * 2**20) // 4 * 4
    ring = StudentFunction("ring_all_reduce", sources=notebook_sources(SOLUTION))
    per_rank = run_ranks(race, options.ranks, ring, nbytes, options.repeats, timeout=600)
    medians = {}
    for name in ("ring", "gloo"):
        slowest_rank = [max(times) for times in zip(*(r[name] for r in per_rank), strict=True)]
        medians[name] = statistics.median(slowest_rank)
    busbw = {name: bus_bandwidth("all_reduce", nbytes, t, options.ranks) for name, t in medians.items()}
    print(f"all_reduce of {nbytes / 2**20:g} MB on {options.ranks} gloo CPU ranks, "
          f"median of {options.repeats} alternating calls (slowest rank each)")
    for name in ("ring", "gloo"):
        print(f"  {name:>4}: {medians[name] * 1e3:8.2f} ms   busbw {busbw[name] / 1e9:6.3f} GB/s")
    print(f"ring / gloo bus bandwidth ratio: {busbw['ring'] / busbw['gloo']:.2f}  (goal >= 0.8)")


if __name__ == "__main__":
    main()
