"""Benchmark: chapter 07's reference ZeRO-1 ShardedOptimizer against unsharded AdamW and torch's own ZeRO-1.

A model of about 10 M parameters trains on 2 and 4 CPU ranks with DDP-style averaged gradients; the
reference optimizer is taken from the solution notebook's solution cell at run time. Prints, per world
size, each rank's optimizer-state bytes as a ratio of unsharded AdamW's (goal: about 1/N) and the median
step time as a ratio of torch's ZeroRedundancyOptimizer's (same load for both: they alternate).
Usage: python benchmarks/bench_zero.py [--ranks 2 4] [--steps 6]
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
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402

from course_lib.dist import run_ranks  # noqa: E402
from course_lib.grading import fixtures  # noqa: E402
from course_lib.grading.optimizer_checks import state_bytes  # noqa: E402
from course_lib.grading.student_function import StudentFunction  # noqa: E402

SOLUTION = ROOT / "solutions" / "07_zero_fsdp" / "07_zero_fsdp.ipynb"
WIDTH, DEPTH = 1024, 10            # 10 x (1024 x 1024 + 1024) = 10.5 M parameters
ZERO_1 = "torch ZeroRedundancyOptimizer"


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(DEPTH)))


def one_step(model, optimizer, world_size) -> float:
    start = time.perf_counter()
    optimizer.zero_grad()
    model(torch.randn(8, WIDTH)).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size
    optimizer.step()
    return time.perf_counter() - start


def race(rank, world_size, reference, steps):
    """Per optimizer: this rank's step times (first step dropped) and its optimizer-state bytes."""
    sharded_class = reference.resolve()
    builders = {"reference": lambda m: sharded_class(m.parameters(), torch.optim.AdamW, lr=1e-4),
                ZERO_1: lambda m: ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW,
                                                          lr=1e-4),
                "unsharded AdamW": lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4)}
    contestants = {}
    for name, build in builders.items():
        model = make_model()
        contestants[name] = (model, build(model))
    times = {name: [] for name in contestants}
    for _ in range(steps + 1):
        for name, (model, optimizer) in contestants.items():
            dist.barrier()
            times[name].append(one_step(model, optimizer, world_size))
    memory = {name: state_bytes(optimizer, model) for name, (model, optimizer) in contestants.items()}
    return {name: seconds[1:] for name, seconds in times.items()}, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=6)
    options = parser.parse_args()
    import torch._dynamo  # noqa: F401 - the first optimizer step imports it: once here, not per rank

    sources = fixtures.solution_sources(nbformat.read(SOLUTION, as_version=4))
    reference = StudentFunction("ShardedOptimizer", sources=[sources["ShardedOptimizer"]])
    params = sum(p.numel() for p in make_model().parameters())
    print(f"model: {params / 1e6:.1f} M parameters; timings are medians on a shared machine")
    for world_size in options.ranks:
        per_rank = run_ranks(race, world_size, reference, options.steps, timeout=600)
        slowest = {name: statistics.median(max(step) for step in zip(*(r[0][name] for r in per_rank),
                                                                       strict=True))
                   for name in per_rank[0][0]}
        unsharded = per_rank[0][1]["unsharded AdamW"]
        state = [r[1]["reference"] for r in per_rank]
        print(f"{world_size} ranks: reference ZeRO-1 state per rank / unsharded AdamW's = "
              f"{', '.join(f'{b / unsharded:.3f}' for b in state)} (1/N = {1 / world_size:.3f}); "
              f"step time / ZeroRedundancyOptimizer's = "
              f"{slowest['reference'] / slowest[ZERO_1]:.2f} "
              f"({slowest['reference'] * 1e3:.0f} ms vs {slowest[ZERO_1] * 1e3:.0f} ms; "
              f"unsharded AdamW {slowest['unsharded AdamW'] * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
