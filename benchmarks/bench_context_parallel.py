"""Benchmark: the chapter-10 reference ring attention against all-gather attention and torch's own ring.

On the same CPU ranks, in alternating blocks of back-to-back calls (each block timed by its slowest
rank), for one attention over the whole sequence split contiguously: the reference ``ring_attention``
(from the solution notebook), the all-gather method (K and V gathered, then one attention kernel call),
and torch's ``_templated_ring_attention`` with the CPU flash kernel (rotate "allgather", its default).
Also one process computing the whole attention with one thread, as each rank has. Prints medians and
ratios (goal: the ring within 2x of the all-gather method on the same ranks).
Usage: python benchmarks/bench_context_parallel.py [--ranks 4] [--tokens 4096] [--heads 8] [--causal]
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
import torch.nn.functional as F  # noqa: E402

from course_lib.dist import run_ranks, shard_sequence  # noqa: E402
from course_lib.dist.torch_context_parallel import _cp_modules  # noqa: E402
from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.notebook_cells import SOLUTION_MARKERS, sources_by_id  # noqa: E402

SOLUTION = ROOT / "solutions" / "10_context_parallel" / "10_context_parallel.ipynb"
TORCH_RING = "torch's ring"


def all_gather_attention(q, k, v, causal=False):
    world_size, rank, chunk = dist.get_world_size(), dist.get_rank(), q.shape[2]
    keys = [torch.empty_like(k) for _ in range(world_size)]
    values = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(keys, k)
    dist.all_gather(values, v)
    mask = None
    if causal:
        query_at = torch.arange(rank * chunk, (rank + 1) * chunk)
        mask = torch.arange(world_size * chunk)[None, :] <= query_at[:, None]
    return F.scaled_dot_product_attention(q, torch.cat(keys, 2), torch.cat(values, 2), attn_mask=mask)


def torch_ring(q, k, v, causal=False):
    cp = _cp_modules()
    cp._cp_options.enable_load_balance = False          # contiguous chunks, as the others get
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return cp._templated_ring_attention(dist.group.WORLD, 2, attention, q, k, v, is_causal=causal)[0]


def race(rank, world_size, ring, whole, causal, blocks, calls):
    """Per method, this rank's seconds per call in each timed block (the first block warms up)."""
    methods = {"ring (reference)": ring.resolve(), "all-gather": all_gather_attention, TORCH_RING: torch_ring}
    q, k, v = (shard_sequence(x, world_size, rank) for x in whole)
    times = {name: [] for name in methods}
    for _ in range(blocks + 1):
        for name, attention in methods.items():
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                attention(q, k, v, causal=causal)
            dist.barrier()
            times[name].append((time.perf_counter() - start) / calls)
    return {name: seconds[1:] for name, seconds in times.items()}


def one_process(whole, causal, blocks, calls) -> float:
    torch.set_num_threads(1)
    seconds = []
    for _ in range(blocks + 1):
        start = time.perf_counter()
        for _ in range(calls):
            F.scaled_dot_product_attention(*whole, is_causal=causal)
        seconds.append((time.perf_counter() - start) / calls)
    return statistics.median(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--calls", type=int, default=3, help="back-to-back calls per timed block")
    options = parser.parse_args()
    whole = [torch.randn(1, options.heads, options.tokens, options.head_dim) for _ in range(3)]
    cells = sources_by_id(SOLUTION, ("zigzag_positions", "ring_attention"))
    sources = [SOLUTION_MARKERS.sub("", source) for source in cells]
    ring = StudentFunction("ring_attention", sources=sources)
    _cp_modules()   # torch's DTensor modules, imported once before the ranks fork
    per_rank = run_ranks(race, options.ranks, ring, whole, options.causal, options.blocks, options.calls,
                         timeout=1200)
    alone = one_process(whole, options.causal, options.blocks, options.calls)
    medians = {name: statistics.median(max(rank[name][b] for rank in per_rank) for b in range(options.blocks))
               for name in per_rank[0]}
    shape = f"1 x {options.heads} heads x {options.tokens} tokens x {options.head_dim}, float32"
    print(f"attention over {shape}{', causal' if options.causal else ''}, {options.ranks} ranks")
    print(f"  one process, one thread: {alone * 1e3:8.1f} ms")
    for name, seconds in medians.items():
        print(f"  {name:20s}  {seconds * 1e3:8.1f} ms   {seconds / alone:5.2f}x one process")
    ring_time = medians["ring (reference)"]
    print(f"ring / all-gather: {ring_time / medians['all-gather']:.2f}x (goal: within 2x); "
          f"ring / torch's ring: {ring_time / medians[TORCH_RING]:.2f}x")


if __name__ == "__main__":
    main()
