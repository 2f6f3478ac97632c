"""Strategy 0: the whole MLP trained on one device, the reference every other strategy must match.

Rank 0 trains; any other ranks only wait and receive the summary, so the example runs in any world.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from course_lib.examples._common import dataset_loss, finish, positive_int
from course_lib.models import LEARNING_RATE, make_dataloader, make_mlp
from course_lib.real import current_device


def train_single_device(epochs: int = 1, device: torch.device | None = None) -> tuple[nn.Module, int]:
    """Plain training loop: the MLP, the course loader, SGD; returns the model and the steps taken."""
    device = device or torch.device("cpu")
    model = make_mlp(seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    steps = 0
    for _ in range(epochs):
        for inputs, targets in make_dataloader():
            loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
    return model, steps


def main(rank: int, world_size: int, epochs=1) -> dict:
    epochs = positive_int(epochs, "epochs")
    steps, final_loss = 0, None
    if rank == 0:
        device = current_device()
        model, steps = train_single_device(epochs, device)
        final_loss = dataset_loss(model, device)
    dist.barrier()
    return finish("single_device", steps, final_loss, idle_ranks=world_size - 1)
