"""Benchmark: what a Python ring step costs when it drops its finished ``irecv``/``isend`` handles before the
next step posts, against one that keeps them until then, and what else a ring step might pay (issue 39).

Every variant runs 48 ring steps of one message to the right and one from the left (the slowest rank,
median of 9 after a warm-up, per step):

- ``kept``: a loop reassigning its handles (each released after the next step posted), as
  ``calibrate()``'s crowded ring;
- ``dropped``: the same with ``del`` after the waits, each released before the next step posts;
- ``phases``: steps in a function that returns after N-1 of them, as chapter 02's ``ring_reduce_scatter``
  and ``ring_all_gather``: one drop per N-1 steps;
- ``views + add``: ``kept`` with the reference ring's per-step work (chunk views, the inbox slice, the add);
- ``40 B``: ``kept`` with the reference ring's message size for chapter 03's gradients on 4 ranks;
- ``your ring``: chapter 02's reference ``ring_all_reduce`` (solutions/), 2(N-1) steps a call.

Prints each variant's step, its multiple of ``kept``, and ``dropped - kept``: what ``calibrate()`` fits as
the release (``fit_crowded_release``). A goal-free measurement for ``python_release_time``.

Usage: python benchmarks/bench_ring_handles.py [--ranks 2 3 4]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from course_lib.grading.attempt.student_function import STUDENT_PRELUDE  # noqa: E402
from course_lib.notebook_cells import sources_by_id  # noqa: E402
from course_lib.real import run_ranks  # noqa: E402
from course_lib.real.measure.timing_harness import interleaved_times  # noqa: E402

SOLUTION = ROOT / "solutions" / "02_collectives" / "02_collectives.ipynb"
STEPS, REPETITIONS = 48, 9
VARIANTS = ("kept", "dropped", "phases", "views + add", "40 B", "your ring")


def reference_ring():
    namespace: dict = {}
    cells = sources_by_id(SOLUTION, ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"))
    exec(compile(STUDENT_PRELUDE + "\n\n".join(cells), str(SOLUTION), "exec"), namespace)
    return namespace["ring_all_reduce"]


def variants(rank: int, world_size: int, ring) -> list:
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    tiny, inbox_tiny = torch.zeros(1), torch.zeros(1)
    ten, inbox_ten = torch.zeros(10), torch.zeros(10)
    flat = torch.zeros(38)
    chunks = torch.tensor_split(flat, world_size)
    inbox = torch.empty_like(chunks[0])

    def steps(outgoing, incoming, drop=False, count=STEPS):
        for _ in range(count):
            receiving, sending = dist.irecv(incoming, left), dist.isend(outgoing, right)
            receiving.wait()
            sending.wait()
            if drop:
                del receiving, sending

    def phases():
        for _ in range(STEPS // (world_size - 1)):
            steps(tiny, inbox_tiny, count=world_size - 1)     # the handles go when the call returns

    def views_and_add():
        for step in range(STEPS):
            accumulating = chunks[(rank - step - 2) % world_size]
            incoming = inbox[: accumulating.numel()]
            receiving = dist.irecv(incoming, left)
            sending = dist.isend(chunks[(rank - step - 1) % world_size], right)
            receiving.wait()
            accumulating += incoming
            sending.wait()

    def rings():
        for _ in range(STEPS // (2 * (world_size - 1))):
            ring(flat)

    return [lambda: steps(tiny, inbox_tiny), lambda: steps(tiny, inbox_tiny, drop=True), phases,
            views_and_add, lambda: steps(ten, inbox_ten), rings]


def per_step(rank: int, world_size: int, ring) -> list[float]:
    return [t / STEPS for t in interleaved_times(variants(rank, world_size, ring), REPETITIONS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    options = parser.parse_args()
    if any(ranks < 2 for ranks in options.ranks):
        parser.error("a ring needs at least 2 ranks")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores usable, load average {os.getloadavg()[0]:.1f} at start")
    ring = reference_ring()
    for ranks in options.ranks:
        seconds = dict(zip(VARIANTS, run_ranks(per_step, ranks, ring, timeout=300)[0], strict=True))
        kept = seconds["kept"]
        print(f"{ranks} ranks, per step: " + ", ".join(
            f"{name} {value * 1e3:.2f} ms ({value / kept:.2f}x)" for name, value in seconds.items())
              + f"; dropped - kept {(seconds['dropped'] - kept) * 1e3:.2f} ms")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
