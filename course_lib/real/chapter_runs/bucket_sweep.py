"""Timing a DDP wrapper (yours, from chapter 03) at several bucket sizes on real ranks: what its buckets
cost on top of the same training step without any communication.

Every step is timed round-robin over the sizes (``interleaved_times``), as the slowest rank saw it, and each
size's cost is the median over the rounds of its step minus the plain step of the same round: a burst of
other load on a shared machine then hits a size and its baseline alike.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from ..launch.runner import run_ranks
from ..measure.timing_harness import interleaved_times
from ..record.traffic_log import record_traffic
from .ddp_step import make_wide_mlp


def _step(model, wrapped, inputs, targets, backward_seconds=None):
    """One forward and backward (and the wrapper's gradient synchronisation, if it has one)."""
    def step():
        model.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(wrapped(inputs), targets)
        start = time.perf_counter()
        loss.backward()
        if backward_seconds is not None:
            backward_seconds.append(time.perf_counter() - start)
        if hasattr(wrapped, "finish_gradient_synchronization"):
            wrapped.finish_gradient_synchronization()
    return step


def _sweep_rank(rank, world_size, ddp_class, widths, batch, sizes_mb, steps):
    generator = torch.Generator().manual_seed(rank)
    inputs = torch.randn(batch, widths[0], generator=generator)
    targets = torch.randn(batch, widths[-1], generator=generator)
    plain, backward = make_wide_mlp(widths), []
    models = [make_wide_mlp(widths) for _ in sizes_mb]
    wrapped = [ddp_class(model, bucket_size_mb=mb) for model, mb in zip(models, sizes_mb, strict=True)]
    operations = [_step(plain, plain, inputs, targets, backward)]
    operations += [_step(m, w, inputs, targets) for m, w in zip(models, wrapped, strict=True)]
    plain_rounds, *ddp_rounds = interleaved_times(operations, steps, summary=list)
    paired = [[d - p for d, p in zip(rounds, plain_rounds, strict=True)] for rounds in ddp_rounds]
    buckets = []
    for operation in operations[1:]:
        with record_traffic() as log:
            operation()
        buckets.append([event.nbytes for event in log.events if event.op == "all_reduce"])
    return {"plain_step": statistics.median(plain_rounds), "backward": statistics.median(backward),
            "overheads": [statistics.median(rounds) for rounds in paired],
            "spreads": [_quartiles(rounds) for rounds in paired], "buckets": buckets}


def _quartiles(values: list[float]) -> tuple[float, float]:
    """(first, third) quartile: half of the rounds fall between them."""
    if len(values) < 2:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=4)
    return cuts[0], cuts[2]


def bucket_sweep(ddp_class, widths, batch: int, bucket_sizes_mb, world_size: int = 2, steps: int = 5,
                 timeout: float = 120) -> dict:
    """Train an MLP of ``widths`` (``batch`` samples per rank) on ``world_size`` gloo ranks, plain and
    wrapped in ``ddp_class(model, bucket_size_mb=...)`` for each size, and time one step of each.

    Returns rank 0's view: ``plain_step`` (median seconds of a step without communication, slowest
    rank), ``backward`` (median seconds of its backward alone) and, per size, ``overheads`` (median over
    rounds of the wrapped step minus the plain step), ``spreads`` (the first and third quartiles of that
    difference: how much the machine's noise moves it) and ``buckets`` (the bytes of each all-reduce
    one recorded step made)."""
    sizes = [float(mb) for mb in bucket_sizes_mb]
    if not sizes or min(sizes) <= 0:
        raise ValueError(f"bucket_sizes_mb must list bucket sizes in MiB, each > 0, got {bucket_sizes_mb!r}")
    if steps < 1 or batch < 1:
        raise ValueError(f"steps and batch must be at least 1, got steps={steps}, batch={batch}")
    return run_ranks(_sweep_rank, world_size, ddp_class, tuple(widths), batch, sizes, steps,
                     timeout=timeout)[0]
