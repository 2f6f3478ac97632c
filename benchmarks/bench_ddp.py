"""Benchmark: chapter 03's reference DDP (the solution notebook's cell) against torch's DDP, step time.

Trains the course MLP and a ~10 M-parameter MLP on 2 and 4 gloo CPU ranks, alternating blocks of steps
of the two wrappers so both see the same load; a block's time is its slowest rank's. Prints median step
times and the ratio reference / torch (goal: <= 1.3x). Usage: python benchmarks/bench_ddp.py [--blocks 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402, F401 - DDP's constructor imports it: once here, not in every rank
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.notebook_cells import SOLUTION_MARKERS  # noqa: E402
from course_lib.real import make_wide_mlp, run_ranks  # noqa: E402

SOLUTION = ROOT / "solutions" / "03_data_parallel" / "03_data_parallel.ipynb"
MODELS = {"course MLP 6-4-2": ((6, 4, 2), 32), "wide MLP": ((1024, 2048, 2048, 1536, 512), 64)}  # 10.2 M


def reference_ddp() -> StudentFunction:
    """The DDP class of the solution notebook's exercise cell, resolved inside each rank."""
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    [source] = [SOLUTION_MARKERS.sub("", c.source) for c in cells
                if (c.metadata.get("nbgrader") or {}).get("grade_id") == "ddp"]
    return StudentFunction("DDP", sources=[source])


def race(rank, world_size, ddp_class, widths, global_batch, blocks, steps_per_block):
    """Per block, this rank's seconds per training step with each wrapper, blocks alternating."""
    wrappers = {"reference": ddp_class.resolve(), "torch": DistributedDataParallel}
    generator = torch.Generator().manual_seed(rank)
    inputs = torch.randn(global_batch // world_size, widths[0], generator=generator)
    targets = torch.randn(global_batch // world_size, widths[-1], generator=generator)
    trainers = {}
    for name, wrapper in wrappers.items():
        model = wrapper(make_wide_mlp(widths))
        trainers[name] = (model, torch.optim.SGD(model.parameters(), lr=1e-3))
    times = {name: [] for name in wrappers}
    for _ in range(blocks + 1):                   # the first block of each warms up and is dropped
        for name, (model, optimizer) in trainers.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(steps_per_block):
                optimizer.zero_grad(set_to_none=True)
                nn.functional.mse_loss(model(inputs), targets).backward()
                if hasattr(model, "finish_gradient_synchronization"):
                    model.finish_gradient_synchronization()
                optimizer.step()
            dist.barrier()
            times[name].append((time.perf_counter() - start) / steps_per_block)
    return {name: seconds[1:] for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="training steps per timed block")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    options = parser.parse_args()
    ddp_class = reference_ddp()
    print(f"reference DDP (solution cell) vs torch DDP, gloo CPU ranks, median of {options.blocks} "
          f"alternating blocks of {options.steps} steps (slowest rank)")
    for label, (widths, global_batch) in MODELS.items():
        params = sum(a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True))
        for ranks in options.ranks:
            per_rank = run_ranks(race, ranks, ddp_class, widths, global_batch, options.blocks, options.steps,
                                 timeout=600)
            slowest = {name: [max(t) for t in zip(*(r[name] for r in per_rank), strict=True)]
                       for name in ("reference", "torch")}
            medians = {name: statistics.median(t) for name, t in slowest.items()}
            ratio = medians["reference"] / medians["torch"]
            pairs = zip(slowest["reference"], slowest["torch"], strict=True)
            paired = statistics.median(reference / torch_time for reference, torch_time in pairs)
            print(f"  {label} ({params:,} parameters), {ranks} ranks: reference "
                  f"{medians['reference'] * 1e3:7.2f} ms, torch {medians['torch'] * 1e3:7.2f} ms per step; "
                  f"reference / torch {ratio:.2f} (adjacent blocks: median ratio {paired:.2f})  goal <= 1.3")

if __name__ == "__main__":
    main()
