"""PyTorch's own equivalents of the chapters' pieces, for any piece a student has not (yet) answered.

Tensor parallel: DTensor's ``parallelize_module``; pipeline: ``torch.distributed.pipelining``'s 1F1B;
data parallel: ``torch.nn.parallel.DistributedDataParallel``. Each is bound to one process group.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch import nn

# Imported here, in the parent, so that the 8 forked ranks inherit them instead of importing them 8 times.
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def tensor_parallel(group) -> dict:
    """ColumnParallelLinear / RowParallelLinear built from DTensor's ColwiseParallel / RowwiseParallel."""
    mesh = DeviceMesh.from_group(group, "cpu")

    def column(linear):
        return parallelize_module(copy.deepcopy(linear), mesh, ColwiseParallel())

    def row(linear):
        return parallelize_module(copy.deepcopy(linear), mesh, RowwiseParallel())

    return {"ColumnParallelLinear": column, "RowParallelLinear": row}


def pipeline(group) -> dict:
    """one_f_one_b and run_stage with run_stage's signature, played by torch.distributed.pipelining."""
    ranks = dist.get_process_group_ranks(group)
    stage_index, stages = ranks.index(dist.get_rank()), len(ranks)
    schedules = {}

    def one_f_one_b(stages, microbatches):
        return [[("F", m) for m in range(microbatches)] + [("B", m) for m in range(microbatches)]
                for _ in range(stages)]   # torch's schedule decides the real order; only the count is used

    def run_stage(module, ops, input_shape, inputs=None, targets=None, loss_fn=None):
        microbatches = len({m for _, m in ops})
        key = (id(module), microbatches)
        if key not in schedules:   # built once per module: building it exchanges shapes between stages
            stage = PipelineStage(module, stage_index, stages, torch.device("cpu"), group=group)
            # torch scales the gradients by 1/microbatches itself (scale_grads=True), as run_stage's loss does
            schedules[key] = Schedule1F1B(stage, microbatches, loss_fn=loss_fn, scale_grads=True)
        schedule = schedules[key]
        if stage_index == 0:
            schedule.step(torch.cat(inputs))
            return None
        if stage_index < stages - 1:
            schedule.step()
            return None
        losses = []
        schedule.step(target=torch.cat(targets), losses=losses)
        return float(sum(loss.item() for loss in losses)) / microbatches

    return {"one_f_one_b": one_f_one_b, "run_stage": run_stage}


def data_parallel(group) -> dict:
    """DDP: torch's DistributedDataParallel on ``group`` (it reduces in the backward: nothing to finish)."""

    class DDP(nn.parallel.DistributedDataParallel):
        def __init__(self, module, bucket_size_mb=25.0):
            super().__init__(module, process_group=group, bucket_cap_mb=bucket_size_mb)

        def finish_gradient_synchronization(self):
            pass

    return {"DDP": DDP}


STAND_INS = {"tensor_parallel": tensor_parallel, "pipeline": pipeline, "data_parallel": data_parallel}
