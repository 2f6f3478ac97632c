"""Strategy 4: tensor parallelism (Megatron style) with DTensor's ``parallelize_module``.

q, k, v and the feed-forward's first layer are split by columns, the attention output and the second
layer by rows, so each block needs one all-reduce forward and one backward. Works on gloo/CPU and NCCL.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from course_lib.examples._block import (
    GLOBAL_BATCH,
    STEPS,
    agreement,
    block_loss,
    local_parameter_count,
    reference_loss,
    train_block,
)
from course_lib.examples._common import finish, positive_int, significant
from course_lib.models import BLOCK_HEADS, make_sequence_batches, make_transformer_block
from course_lib.real import current_device

TENSOR_PARALLEL_PLAN = {
    "attention.q": ColwiseParallel(), "attention.k": ColwiseParallel(), "attention.v": ColwiseParallel(),
    "attention.out": RowwiseParallel(),
    "feed_forward.up": ColwiseParallel(), "feed_forward.down": RowwiseParallel(),
}


def main(rank: int, world_size: int, steps=STEPS) -> dict:
    steps = positive_int(steps, "steps")
    if BLOCK_HEADS % world_size:
        raise ValueError(f"tensor parallelism splits the {BLOCK_HEADS} attention heads over the ranks: "
                         f"use a world size that divides {BLOCK_HEADS}, not {world_size}")
    device = current_device()
    mesh = init_device_mesh(device.type, (world_size,))
    model = parallelize_module(make_transformer_block(seed=0).to(device), mesh, TENSOR_PARALLEL_PLAN)
    local_params = local_parameter_count(model)  # counted while sharded, before any forward
    batches = make_sequence_batches(steps, batch_size=GLOBAL_BATCH)
    train_block(model, batches, device=device)  # every rank sees the whole batch, holds 1/W of the weights
    final_loss = block_loss(model, batches, device)
    extra = agreement(final_loss, reference_loss(steps)) if rank == 0 else {}
    dist.barrier()
    return finish("tensor_parallel", steps, final_loss, implementation="torch DTensor parallelize_module",
                  parameters_per_rank=local_params, **{k: significant(v) if isinstance(v, float) else v
                                                       for k, v in extra.items()})
