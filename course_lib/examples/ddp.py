"""Strategy 1: distributed data parallel with torch's DistributedDataParallel.

Every rank holds the whole MLP and takes 32 / world_size samples of each batch of 32; DDP averages the
gradients, so the model follows exactly the single-device run (same final_loss up to rounding).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data.distributed import DistributedSampler

from course_lib.examples._common import dataset_loss, finish, positive_int, require_divisible
from course_lib.models import BATCH_SIZE, LEARNING_RATE, RandomTensorDataset, make_dataloader, make_mlp
from course_lib.real import current_device


def main(rank: int, world_size: int, epochs=1) -> dict:
    epochs = positive_int(epochs, "epochs")
    require_divisible(world_size)
    device = current_device()
    model = DistributedDataParallel(make_mlp(seed=0).to(device),
                                    device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    # Without shuffling, rank r takes samples r, r + W, r + 2W, ...: step k covers the global batch k.
    sampler = DistributedSampler(RandomTensorDataset(), num_replicas=world_size, rank=rank, shuffle=False)
    loader = make_dataloader(batch_size=BATCH_SIZE // world_size, sampler=sampler)
    steps = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            loss = nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces (averages) the gradients in buckets during backward
            optimizer.step()
            steps += 1
    final_loss = dataset_loss(model.module, device) if rank == 0 else None
    dist.barrier()
    return finish("ddp", steps, final_loss, implementation="torch.nn.parallel.DistributedDataParallel",
                  samples_per_rank_per_step=BATCH_SIZE // world_size)
