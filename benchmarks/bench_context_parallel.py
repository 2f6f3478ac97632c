"""Benchmark: the chapter-10 reference ring attention against all-gather attention and torch's own ring.

On the same CPU ranks, in alternating blocks of back-to-back calls (each block timed by its slowest
rank), for one attention over the whole sequence split contiguously: the reference ``ring_attention``
(from the solution notebook), the all-gather method (K and V gathered, then one attention kernel call),
and torch's ``_templated_ring_attention`` with the CPU flash kernel (rotate "allgather", its default).
Also one process computing the whole attention with one thread, as each rank has. The same for forward
and backward together: the reference ``ring_attention`` then ``ring_attention_backward`` (given each row's
log-sum-exp, which the forward computes anyway, made once outside the timing), against the all-gather
method under autograd with its dK/dV summed back to their owners (a reduce-scatter, or an all-reduce where
gloo has none). Prints medians and ratios (goals: the ring within 2x of the all-gather method on the same
ranks, forward alone and forward+backward).
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

from course_lib.grading.attempt.student_function import StudentFunction  # noqa: E402
from course_lib.notebook_cells import SOLUTION_MARKERS, sources_by_id  # noqa: E402
from course_lib.real import run_ranks, shard_sequence  # noqa: E402
from course_lib.real.pytorch.torch_context_parallel import _cp_modules  # noqa: E402

SOLUTION = ROOT / "solutions" / "10_context_parallel" / "10_context_parallel.ipynb"
TORCH_RING = "torch's ring"
RING_BOTH, GATHER_BOTH = "ring fwd+bwd (ref.)", "all-gather fwd+bwd"


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


def all_gather_forward_backward(q, k, v, grad_out, causal=False):
    """The all-gather method's forward and backward: autograd through the gathered K and V, then each
    block's dK and dV summed back to its owner."""
    world_size, rank, chunk = dist.get_world_size(), dist.get_rank(), q.shape[2]
    gathered = []
    for x in (k, v):
        parts = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(parts, x.contiguous())
        gathered.append(torch.cat(parts, 2).requires_grad_())
    query = q.detach().requires_grad_()
    mask = None
    if causal:
        query_at = torch.arange(rank * chunk, (rank + 1) * chunk)
        mask = torch.arange(world_size * chunk)[None, :] <= query_at[:, None]
    F.scaled_dot_product_attention(query, *gathered, attn_mask=mask).backward(grad_out)
    grads = []
    for whole in gathered:
        total = whole.grad.contiguous()
        dist.all_reduce(total)                      # gloo has no reduce-scatter: sum, keep this rank's block
        grads.append(total[:, :, rank * chunk:(rank + 1) * chunk])
    return query.grad, *grads


def torch_ring(q, k, v, causal=False):
    cp = _cp_modules()
    cp._cp_options.enable_load_balance = False          # contiguous chunks, as the others get
    attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    return cp._templated_ring_attention(dist.group.WORLD, 2, attention, q, k, v, is_causal=causal)[0]


def race(rank, world_size, ring, backward, whole, causal, blocks, calls):
    """Per method, this rank's seconds per call in each timed block (the first block warms up)."""
    forward, ring_backward = ring.resolve(), backward.resolve()
    q, k, v, grad_out = (shard_sequence(x, world_size, rank) for x in whole)
    scores = q @ whole[1].transpose(-1, -2) / q.shape[-1] ** 0.5       # this rank's rows only
    if causal:
        query_at = torch.arange(rank * q.shape[2], (rank + 1) * q.shape[2])
        scores.masked_fill_(torch.arange(scores.shape[-1])[None, :] > query_at[:, None], float("-inf"))
    lse = torch.logsumexp(scores, -1)
    del scores

    def ring_forward_backward(q, k, v, causal=False):
        out = forward(q, k, v, causal=causal)
        return ring_backward(q, k, v, out, lse, grad_out, causal=causal)

    methods = {"ring (reference)": forward, "all-gather": all_gather_attention, TORCH_RING: torch_ring,
               RING_BOTH: ring_forward_backward,
               GATHER_BOTH: lambda q, k, v, causal=False: all_gather_forward_backward(q, k, v, grad_out,
                                                                                      causal)}
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
            F.scaled_dot_product_attention(*whole[:3], is_causal=causal)
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
    whole = [torch.randn(1, options.heads, options.tokens, options.head_dim) for _ in range(4)]
    cells = sources_by_id(SOLUTION, ("zigzag_positions", "ring_attention", "ring_attention_backward"))
    sources = [SOLUTION_MARKERS.sub("", source) for source in cells]
    ring = StudentFunction("ring_attention", sources=sources)
    backward = StudentFunction("ring_attention_backward", sources=sources)
    _cp_modules()   # torch's DTensor modules, imported once before the ranks fork
    per_rank = run_ranks(race, options.ranks, ring, backward, whole, options.causal, options.blocks,
                         options.calls, timeout=1200)
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
    print(f"ring fwd+bwd / all-gather fwd+bwd: {medians[RING_BOTH] / medians[GATHER_BOTH]:.2f}x "
          "(goal: within 2x)")


if __name__ == "__main__":
    main()
