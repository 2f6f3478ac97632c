"""What every strategy example shares: arguments, the whole-dataset loss, and the SUMMARY line.

Every MLP example trains the same 6->4->2 MLP on the same batches with the same SGD, so their
``final_loss`` (mean MSE over all 1024 samples after training) agree across strategies and launchers.
"""

from __future__ import annotations

import json
import math

import torch
import torch.distributed as dist
from torch import nn

from course_lib.models import BATCH_SIZE, RandomTensorDataset
from course_lib.real import current_device

SUMMARY_PREFIX = "SUMMARY "


def positive_int(value, name: str) -> int:
    """Extra arguments arrive as strings from the command line and as numbers from run_ranks."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if number < 1:
        raise ValueError(f"{name} must be at least 1, got {number}")
    return number


def require_divisible(parts: int, total: int = BATCH_SIZE, what: str = "the batch of 32 samples",
                      unit: str = "ranks"):
    if total % parts:
        raise ValueError(f"{what} cannot be split evenly over {parts} {unit}: "
                         f"use a number of {unit} that divides {total} (1, 2, 4, 8, ...)")


@torch.no_grad()
def dataset_loss(forward, device: torch.device) -> float:
    """Mean squared error of ``forward`` over the whole course dataset (one big batch)."""
    data = RandomTensorDataset()
    return nn.functional.mse_loss(forward(data.inputs.to(device)), data.targets.to(device)).item()


def significant(value: float | None, digits: int = 7) -> float | None:
    """Rounded so that the same run on two launchers prints the same text."""
    if value is None or value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def finish(strategy: str, steps: int, final_loss: float | None, source_rank: int = 0, **extra) -> dict:
    """Share ``source_rank``'s summary with every rank; rank 0 prints ``SUMMARY {json}``; return it."""
    summary = {"strategy": strategy, "world_size": dist.get_world_size(), "backend": dist.get_backend(),
               "device": current_device().type, "steps": steps, "final_loss": significant(final_loss),
               **extra}
    box = [summary if dist.get_rank() == source_rank else None]
    dist.broadcast_object_list(box, src=source_rank)
    summary = box[0]
    if dist.get_rank() == 0:
        print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    return summary


def mlp_stage(model: nn.Module, stage: int, stages: int) -> nn.Module:
    """The part of the 6->4->2 MLP that ``stage`` of ``stages`` (1 or 2) holds: layer 1, or layer 2."""
    if stages == 1:
        return model
    return [nn.Sequential(model.hidden_layer, model.activation), model.output_layer][stage]


def gather_trained_mlp(model: nn.Module, rank: int, stages: int) -> None:
    """Copy stage 0's trained layer into the last stage's copy of the MLP, which then measures the loss."""
    if stages == 1:
        return
    for tensor in model.hidden_layer.parameters():
        if rank == 0:
            dist.send(tensor.detach(), stages - 1)
        else:
            received = torch.empty_like(tensor)
            dist.recv(received, 0)
            tensor.data.copy_(received)


def parse_summary(output: str) -> dict:
    """The summary dict from an example's printed output (exactly one SUMMARY line expected)."""
    lines = [line.split(SUMMARY_PREFIX, 1)[1] for line in output.splitlines() if SUMMARY_PREFIX in line]
    if len(lines) != 1:
        raise ValueError(f"expected exactly one SUMMARY line, found {len(lines)}")
    return json.loads(lines[0])
