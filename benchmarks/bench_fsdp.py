"""Benchmark: chapter 07's reference FSDP against PyTorch's FSDP2 ``fully_shard``, and its ZeRO-1 optimizer.

A model of about 10 M parameters (10 blocks of Linear(1024, 1024) + tanh, one unit each) trains with SGD
on 2 and 4 CPU ranks, wrapped by the reference FSDP (taken from the solution notebook's solution cell at
run time) and by fully_shard, alternating steps so that both see the same load. Prints the median step
time of the slowest rank and the peak memory one step holds (every tensor made during the step and still
alive, autograd's saved tensors included: LiveTensorBytes, measured at every layer's forward and backward)
as ratios of fully_shard's: goals time <= 1.5x, memory <= 1.2x.
Then the reference ZeRO-1 ShardedOptimizer's optimizer state per rank against unsharded AdamW's.
Usage: python benchmarks/bench_fsdp.py [--ranks 2 4] [--steps 5]
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
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.grading.autograder import fixtures  # noqa: E402
from course_lib.grading.checks.ch07_optimizer.visible import state_bytes  # noqa: E402
from course_lib.grading.checks.ch07_zero.probes import LiveTensorBytes, measure_at_every_layer  # noqa: E402
from course_lib.real import run_ranks  # noqa: E402

SOLUTION = ROOT / "solutions" / "07_zero_fsdp" / "07_zero_fsdp.ipynb"
WIDTH, BLOCKS, ROWS = 1024, 10, 16          # 10 x (1024 x 1024 + 1024) = 10.5 M parameters


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(BLOCKS)))


def torch_fsdp2(world_size: int) -> nn.Module:
    model, mesh = make_model(), init_device_mesh("cpu", (world_size,))
    for block in model:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def step(model, optimizer, rows, finish) -> float:
    dist.barrier()
    start = time.perf_counter()
    optimizer.zero_grad()
    model(torch.randn(ROWS, WIDTH)[rows]).pow(2).mean().backward()
    finish()
    optimizer.step()
    return time.perf_counter() - start


def peak_live_bytes(model, optimizer, rows, finish) -> int:
    """One more step with every Linear's forward and backward measuring the tensors the step holds."""
    probe = LiveTensorBytes()
    measure_at_every_layer([m for m in model.modules() if isinstance(m, nn.Linear)], probe)
    with probe:
        step(model, optimizer, rows, finish)
    return max(probe.peaks().values())


def race(rank, world_size, reference, steps):
    fsdp_class = reference.resolve()
    yours = fsdp_class(make_model())
    contestants = {"reference FSDP": (yours, yours.finish_gradient_synchronization),
                   "fully_shard": (torch_fsdp2(world_size), lambda: None)}
    optimizers = {name: torch.optim.SGD(model.parameters(), lr=1e-3)
                  for name, (model, _) in contestants.items()}
    share = ROWS // world_size
    rows = slice(rank * share, (rank + 1) * share)
    times = {name: [] for name in contestants}
    for _ in range(steps + 1):
        for name, (model, finish) in contestants.items():
            times[name].append(step(model, optimizers[name], rows, finish))
    peaks = {name: peak_live_bytes(model, optimizers[name], rows, finish)
             for name, (model, finish) in contestants.items()}
    return {name: seconds[1:] for name, seconds in times.items()}, peaks


def zero_one_state(rank, world_size, reference):
    sharded_class = reference.resolve()
    results = {}
    for name in ("reference ShardedOptimizer", "unsharded AdamW"):
        model = make_model()
        optimizer = (sharded_class(model.parameters(), torch.optim.AdamW, lr=1e-4) if name.startswith("ref")
                     else torch.optim.AdamW(model.parameters(), lr=1e-4))
        step(model, optimizer, slice(None), lambda: None)
        results[name] = state_bytes(optimizer, model)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=5)
    options = parser.parse_args()
    import torch._dynamo  # noqa: F401 - the first optimizer step imports it: once here, not per rank

    cells = fixtures.solution_sources(nbformat.read(SOLUTION, as_version=4))
    fsdp = StudentFunction("FSDP", sources=["from torch import nn", cells["FSDP"]])
    optimizer = StudentFunction("ShardedOptimizer", sources=[cells["ShardedOptimizer"]])
    print(f"model: {sum(p.numel() for p in make_model().parameters()) / 1e6:.1f} M parameters; medians of "
          f"{options.steps} steps of the slowest rank, on a shared machine")
    for world_size in options.ranks:
        per_rank = run_ranks(race, world_size, fsdp, options.steps, timeout=600)
        slowest = {name: statistics.median(max(s) for s in zip(*(r[0][name] for r in per_rank),
                                                                strict=True)) for name in per_rank[0][0]}
        peak = {name: max(r[1][name] for r in per_rank) for name in per_rank[0][1]}
        print(f"{world_size} ranks: reference FSDP / fully_shard: step time "
              f"{slowest['reference FSDP'] / slowest['fully_shard']:.2f}x "
              f"({slowest['reference FSDP'] * 1e3:.0f} vs {slowest['fully_shard'] * 1e3:.0f} ms, "
              "goal <= 1.5x), "
              f"peak step memory {peak['reference FSDP'] / peak['fully_shard']:.2f}x "
              f"({peak['reference FSDP'] / 2**20:.1f} vs {peak['fully_shard'] / 2**20:.1f} MiB, "
              "goal <= 1.2x)")
        states = run_ranks(zero_one_state, world_size, optimizer, timeout=600)
        unsharded = states[0]["unsharded AdamW"]
        shares = ", ".join(f"{s['reference ShardedOptimizer'] / unsharded:.3f}" for s in states)
        print(f"{world_size} ranks: reference ZeRO-1 state per rank / unsharded AdamW's: {shares} "
              f"(1/N = {1 / world_size:.3f})")


if __name__ == "__main__":
    main()
