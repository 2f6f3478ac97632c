"""Strategy 2: naive model parallelism, by hand with send/recv: layer 1 on rank 0, layer 2 on rank 1.

Activations go forward and their gradient comes back for every batch, one stage working at a time:
the idle time that pipelining removes. Ranks beyond the two stages idle; one rank does both layers.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from course_lib.examples._common import dataset_loss, finish, gather_trained_mlp, mlp_stage, positive_int
from course_lib.models import HIDDEN_UNITS, LEARNING_RATE, make_dataloader, make_mlp
from course_lib.real import current_device

FIRST, LAST = 0, 1


def _forward_backward(stage, rank, stages, inputs, targets, device):
    """One batch through the split model; returns the loss on the last stage, else None."""
    if stages == 1:
        loss = nn.functional.mse_loss(stage(inputs), targets)
        loss.backward()
        return loss
    if rank == FIRST:
        hidden = stage(inputs)
        dist.send(hidden.detach(), LAST)
        grad = torch.empty_like(hidden)
        dist.recv(grad, LAST)  # rank 0 waits here while rank 1 computes: the naive split's idle time
        hidden.backward(grad)
        return None
    hidden = torch.empty(len(targets), HIDDEN_UNITS, device=device)
    dist.recv(hidden, FIRST)
    hidden.requires_grad_(True)
    loss = nn.functional.mse_loss(stage(hidden), targets)
    loss.backward()
    dist.send(hidden.grad, FIRST)
    return loss


def main(rank: int, world_size: int, epochs=1) -> dict:
    epochs = positive_int(epochs, "epochs")
    stages, device, steps = min(world_size, 2), current_device(), 0
    final_loss = None
    if rank < stages:
        model = make_mlp(seed=0).to(device)
        stage = mlp_stage(model, rank, stages)
        optimizer = torch.optim.SGD(stage.parameters(), lr=LEARNING_RATE)
        for _ in range(epochs):
            for inputs, targets in make_dataloader():
                optimizer.zero_grad(set_to_none=True)
                _forward_backward(stage, rank, stages, inputs.to(device), targets.to(device), device)
                optimizer.step()
                steps += 1
        gather_trained_mlp(model, rank, stages)
        if rank == stages - 1:
            final_loss = dataset_loss(model, device)
    dist.barrier()
    return finish("naive_model_parallel", steps, final_loss, source_rank=stages - 1, stages=stages,
                  idle_ranks=world_size - stages, implementation="by hand: dist.send/dist.recv")
