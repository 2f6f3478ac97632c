"""Strategy 5: fully sharded data parallel (ZeRO-3) with FSDP2's ``fully_shard``.

Each rank stores 1/W of every parameter and takes 1/W of each batch; layers gather their weights just
in time and gradients are reduce-scattered, so the result equals one device training on the whole batch.
"""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from course_lib.examples._block import (
    GLOBAL_BATCH,
    STEPS,
    agreement,
    block_loss,
    local_parameter_count,
    reference_loss,
    train_block,
)
from course_lib.examples._common import finish, positive_int, require_divisible, significant
from course_lib.models import make_sequence_batches, make_transformer_block
from course_lib.real import current_device


def main(rank: int, world_size: int, steps=STEPS) -> dict:
    steps = positive_int(steps, "steps")
    require_divisible(world_size, GLOBAL_BATCH, f"the batch of {GLOBAL_BATCH} sequences")
    device = current_device()
    mesh = init_device_mesh(device.type, (world_size,))
    model = make_transformer_block(seed=0).to(device)
    for layer in (model.attention, model.feed_forward):
        fully_shard(layer, mesh=mesh)  # one all-gather unit per sub-layer, freed after use
    fully_shard(model, mesh=mesh)       # the norms left over form the root unit
    local_params = local_parameter_count(model)  # counted while sharded, before any forward
    batches = make_sequence_batches(steps, batch_size=GLOBAL_BATCH)
    share = GLOBAL_BATCH // world_size
    train_block(model, batches, rows=slice(rank * share, (rank + 1) * share), device=device)
    final_loss = block_loss(model, batches, device)
    extra = agreement(final_loss, reference_loss(steps)) if rank == 0 else {}
    dist.barrier()
    return finish("fsdp", steps, final_loss, implementation="torch FSDP2 fully_shard",
                  parameters_per_rank=local_params, **{k: significant(v) if isinstance(v, float) else v
                                                       for k, v in extra.items()})
