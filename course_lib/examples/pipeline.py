"""Strategy 3: pipeline parallelism with torch.distributed.pipelining (GPipe schedule), 2 stages.

Each batch of 32 is cut into micro-batches that flow through the stages back to back, so both stages
work at once. The per-micro-batch losses are averaged, so the model follows the single-device run.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from course_lib.examples._common import (
    dataset_loss,
    finish,
    gather_trained_mlp,
    mlp_stage,
    positive_int,
    require_divisible,
)
from course_lib.models import LEARNING_RATE, make_dataloader, make_mlp
from course_lib.real import current_device

MICROBATCHES = 4


def main(rank: int, world_size: int, epochs=1, microbatches=MICROBATCHES) -> dict:
    epochs, microbatches = positive_int(epochs, "epochs"), positive_int(microbatches, "microbatches")
    require_divisible(microbatches, unit="micro-batches")
    stages, device, steps, final_loss = min(world_size, 2), current_device(), 0, None
    if rank < stages:
        model = make_mlp(seed=0).to(device)
        part = mlp_stage(model, rank, stages)
        group = dist.new_group(list(range(stages))) if stages < world_size else None
        stage = PipelineStage(part, rank, stages, device, group=group)
        # MSELoss's mean per micro-batch, averaged over equal micro-batches, is the batch's mean.
        schedule = ScheduleGPipe(stage, n_microbatches=microbatches, loss_fn=nn.MSELoss())
        optimizer = torch.optim.SGD(part.parameters(), lr=LEARNING_RATE)
        for _ in range(epochs):
            for inputs, targets in make_dataloader():
                optimizer.zero_grad(set_to_none=True)
                if stages == 1:
                    schedule.step(inputs.to(device), target=targets.to(device))
                elif rank == 0:
                    schedule.step(inputs.to(device))
                else:
                    schedule.step(target=targets.to(device))
                optimizer.step()
                steps += 1
        gather_trained_mlp(model, rank, stages)
        if rank == stages - 1:
            final_loss = dataset_loss(model, device)
    else:
        dist.new_group(list(range(stages)))  # every rank must take part in creating a group
    dist.barrier()
    return finish("pipeline", steps, final_loss, source_rank=stages - 1, stages=stages,
                  microbatches=microbatches, idle_ranks=world_size - stages,
                  implementation="torch.distributed.pipelining.ScheduleGPipe")
