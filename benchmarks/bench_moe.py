"""Benchmark: the chapter-11 reference expert-parallel MoE layer against a dense MLP of the same active FLOPs.

On the same CPU ranks, alternating blocks: the reference ``expert_parallel_forward`` (taken from the
solution notebook: counts, dispatch, experts, combine, and the reverse in the backward) with E experts of
width F and top-k routing, against each rank running a dense MLP of width k*F on its own tokens (the same
FLOPs per token, no communication). A block's time is its slowest rank's; prints the medians and the
ratio, which is what routing and the four all-to-alls cost. Usage: python benchmarks/bench_moe.py
[--ranks 4] [--tokens 512] [--hidden 256] [--width 512] [--experts 8] [--k 2]
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
from torch import nn  # noqa: E402

from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.models import FeedForward  # noqa: E402
from course_lib.notebook_cells import sources_by_id  # noqa: E402
from course_lib.real import run_ranks  # noqa: E402

SOLUTION = ROOT / "solutions" / "11_expert_parallel" / "11_expert_parallel.ipynb"


def race(rank, world_size, reference, options, blocks):
    """Per block, this rank's seconds for one forward + backward of each layer (the first block warms up)."""
    expert_parallel_forward = reference.resolve()
    torch.manual_seed(0)
    experts = [FeedForward(options.hidden, options.width) for _ in range(options.experts)]
    per_rank = options.experts // world_size
    mine = nn.ModuleList(experts[rank * per_rank:(rank + 1) * per_rank])
    dense = FeedForward(options.hidden, options.k * options.width)       # the same FLOPs per token
    generator = torch.Generator().manual_seed(rank)
    tokens = torch.randn(options.tokens, options.hidden, generator=generator)
    logits = torch.randn(options.tokens, options.experts, generator=generator)
    layers = {"expert parallel": lambda x: expert_parallel_forward(x, logits.clone().requires_grad_(), mine,
                                                                   options.k),
              "dense MLP": dense}
    times = {name: [] for name in layers}
    for _ in range(blocks + 1):
        for name, layer in layers.items():
            dist.barrier()
            start = time.perf_counter()
            layer(tokens.clone().requires_grad_()).sum().backward()
            dist.barrier()
            times[name].append(time.perf_counter() - start)
    return {name: seconds[1:] for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("ranks", 4), ("tokens", 512), ("hidden", 256), ("width", 512), ("experts", 8),
                          ("k", 2), ("blocks", 9)):
        parser.add_argument(f"--{name}", type=int, default=default)
    options = parser.parse_args()
    if options.experts % options.ranks:
        raise SystemExit(f"--experts ({options.experts}) must be a multiple of --ranks ({options.ranks})")
    reference = StudentFunction("expert_parallel_forward",
                                sources=sources_by_id(SOLUTION, ("AllToAll", "expert_parallel_forward")))
    per_rank = run_ranks(race, options.ranks, reference, options, options.blocks, timeout=600)
    slowest = {name: [max(rank[name][b] for rank in per_rank) for b in range(options.blocks)]
               for name in per_rank[0]}
    medians = {name: statistics.median(seconds) for name, seconds in slowest.items()}
    for name, seconds in medians.items():
        print(f"{name:16s} forward + backward: {seconds * 1e3:7.1f} ms (median of {options.blocks} blocks)")
    ratio = medians["expert parallel"] / medians["dense MLP"]
    print(f"expert parallel / dense MLP of the same active FLOPs: {ratio:.2f}x ({options.ranks} ranks, "
          f"{options.tokens} tokens each, h={options.hidden}, {options.experts} experts of width "
          f"{options.width}, k={options.k})")


if __name__ == "__main__":
    main()
