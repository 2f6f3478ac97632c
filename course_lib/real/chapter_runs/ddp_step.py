"""Timing real data-parallel training steps (torch DDP over gloo) to hold against the simulator's, and
recording when torch DDP all-reduces its buckets (``record_ddp_buckets``).

``measure_ddp_step`` trains an MLP of any widths on forked ranks and returns the median step time, the
real counterpart of ``course_lib.sim.simulate_training_step(MLPSpec(widths), cluster, dp=world_size)``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..launch.runner import run_ranks
from ..measure.timing_harness import interleaved_medians


def make_wide_mlp(widths, seed: int = 0) -> nn.Sequential:
    """Linear layers of the given widths with a ReLU between each two, weights drawn from ``seed``."""
    widths = tuple(int(w) for w in widths)
    if len(widths) < 2 or min(widths) < 1:
        raise ValueError(f"widths must list two or more positive layer widths, got {widths!r}")
    generator = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        linear = nn.Linear(fan_in, fan_out)
        with torch.no_grad():
            bound = fan_in ** -0.5   # nn.Linear's own initial range, drawn from our generator
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _recorded_all_reduce(state, bucket):
    """torch DDP's default bucket all-reduce (average), issued from Python so record_traffic sees it."""
    averaged = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(averaged, async_op=True).get_future().then(lambda done: done.value()[0])


def record_ddp_buckets(model: DistributedDataParallel) -> DistributedDataParallel:
    """Make ``model``'s bucket all-reduces visible to ``record_traffic`` (its C++ reducer's are not):
    each bucket is then averaged by a Python communication hook doing what DDP does by default."""
    model.register_comm_hook(None, _recorded_all_reduce)
    return model


def ddp_training(rank: int, world_size: int, widths, global_batch: int):
    """On one rank: torch DDP around an MLP of ``widths``, its SGD, this rank's share of a seeded batch, and
    one training step (forward, backward with DDP's bucketed all-reduces, update) as a function."""
    model = DistributedDataParallel(make_wide_mlp(widths))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    per_rank = global_batch // world_size
    inputs = torch.randn(per_rank, widths[0], generator=generator)
    targets = torch.randn(per_rank, widths[-1], generator=generator)

    def step():
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()           # DDP all-reduces gradient buckets while backward goes on
        optimizer.step()

    return model, optimizer, inputs, targets, step


def _ddp_step_seconds(rank: int, world_size: int, widths, global_batch: int, steps: int) -> float:
    *_, step = ddp_training(rank, world_size, widths, global_batch)

    # A warm-up step first (it allocates DDP's buckets), then the slowest rank's median step.
    return interleaved_medians([step], steps)[0]


def measure_ddp_step(world_size: int, widths, global_batch: int, steps: int = 7,
                     timeout: float = 120) -> float:
    """Median seconds of one real DDP training step (forward, backward with the gradient all-reduce,
    SGD update) of an MLP of ``widths`` on ``world_size`` gloo ranks, ``global_batch`` samples a step."""
    if global_batch % world_size:
        raise ValueError(f"global_batch={global_batch} cannot be split evenly over {world_size} ranks: "
                         "use a multiple of the world size")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return run_ranks(_ddp_step_seconds, world_size, tuple(widths), global_batch, steps, timeout=timeout)[0]
