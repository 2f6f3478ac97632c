"""Training the small transformer block, shared by the tensor-parallel and FSDP examples.

Both compare their sharded run with the same block trained on one device (the reference), step by step
on the same batches, so the summary says whether the sharded strategy agrees with plain PyTorch.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models import make_sequence_batches, make_transformer_block

STEPS, GLOBAL_BATCH, LEARNING_RATE = 8, 8, 0.05


def train_block(model: nn.Module, batches, rows: slice = slice(None), device=None) -> nn.Module:
    """SGD on ``batches`` (each rank may take only ``rows`` of every batch); returns the model."""
    device = device or torch.device("cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, foreach=False)
    for inputs, targets in batches:
        loss = nn.functional.mse_loss(model(inputs[rows].to(device)), targets[rows].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return model


@torch.no_grad()
def block_loss(model: nn.Module, batches, device=None) -> float:
    """Mean MSE over all ``batches`` (every rank must call it: sharded forwards communicate)."""
    device = device or torch.device("cpu")
    losses = [nn.functional.mse_loss(model(x.to(device)), y.to(device)).item() for x, y in batches]
    return sum(losses) / len(losses)


def reference_loss(steps: int = STEPS) -> float:
    """The loss after training the unsharded block on one CPU: what a sharded run should reproduce."""
    batches = make_sequence_batches(steps, batch_size=GLOBAL_BATCH)
    return block_loss(train_block(make_transformer_block(seed=0), batches), batches)


def local_parameter_count(model: nn.Module) -> int:
    """Parameter elements this rank stores (the local shard of a DTensor parameter)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in model.parameters())


def agreement(final_loss: float, reference: float) -> dict:
    return {"reference_loss": reference, "abs_diff_vs_reference": abs(final_loss - reference),
            "matches_reference": abs(final_loss - reference) <= 1e-5 * max(1.0, abs(reference))}
