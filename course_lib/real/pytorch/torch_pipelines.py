"""PyTorch's own zero-bubble pipeline schedules (torch.distributed.pipelining, torch 2.13), run and read.

``run_torch_schedule`` runs one training step of ``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``
or ``ScheduleDualPipeV`` on gloo ranks (two stages per rank) and compares every gradient with one process.
``torch_schedule`` reads the same schedule's per-rank actions without running it (torch's private
``_schedule_visualizer.get_schedule_ops``) as a course_lib.sim Schedule, for the simulator to play.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.models import make_layer_stack, split_into_stages
from course_lib.sim import Schedule

from ..launch.runner import run_ranks

# name -> where a rank's two stages sit: "loop" (rank r holds r and r+p) or "v" (r and 2p-1-r)
PLACEMENTS = {"InterleavedZeroBubble": "loop", "ZBVZeroBubble": "v", "DualPipeV": "v"}
# torch's computation types (schedules.py: _ComputationType) in the simulator's words: I, the input
# gradient, is "B" with its "W" split off; a full backward is a "B" without one.
_PHASES = {"FORWARD": "F", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W", "FULL_BACKWARD": "B"}
ROWS_PER_MICROBATCH = 3


def _placement(name: str) -> str:
    if name not in PLACEMENTS:
        raise ValueError(f"unknown zero-bubble schedule {name!r}; use one of {', '.join(PLACEMENTS)}")
    return PLACEMENTS[name]


def torch_schedule(name: str, stages: int, microbatches: int) -> Schedule:
    """PyTorch's ``name`` schedule on ``stages`` ranks (two chunks each) as a simulator Schedule.

    A fused OVERLAP_F_B action (DualPipeV) becomes its forward then its backward: on CPU torch runs the
    pair one after the other too (schedules.py, _PipelineScheduleRuntime without a custom function)."""
    from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops

    placement = _placement(name)
    lanes = []
    for actions in get_schedule_ops(name, stages, microbatches):
        lane = []
        for action in (a for a in actions if a is not None):
            for part in action.sub_actions or (action,):
                j = part.stage_index
                chunk = (0 if j < stages else 1) if placement == "v" else j // stages
                lane.append((_PHASES[part.computation_type.name], part.microbatch_index, chunk))
        lanes.append(lane)
    return Schedule(name, stages, microbatches, 2, lanes, placement=placement)


def _batch(seed: int, microbatches: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    size = (microbatches * ROWS_PER_MICROBATCH, width)
    return torch.randn(size, generator=generator), torch.randn(size, generator=generator)


def _torch_step(rank, world_size, name, microbatches, seed):
    """Rank side: this rank's two stages of the layer stack, one step of torch's schedule, their grads."""
    from torch.distributed.pipelining import PipelineStage, schedules
    from torch.distributed.pipelining._utils import generate_rank_to_stage_mapping

    count = 2 * world_size
    parts = split_into_stages(make_layer_stack(seed, layers=count), count)
    mine = generate_rank_to_stage_mapping(world_size, count, _placement(name))[rank]
    stages = [PipelineStage(parts[j], j, count, torch.device("cpu")) for j in mine]
    schedule = schedules.get_schedule_class(name)(stages, n_microbatches=microbatches,
                                                   loss_fn=nn.functional.mse_loss)
    inputs, targets = _batch(seed, microbatches, parts[0][0][0].in_features)
    losses: list = []
    schedule.step(inputs, target=targets, losses=losses)   # every rank gets the batch; each uses its part
    return {"losses": [loss.item() for loss in losses],
            "grads": {j: [p.grad.clone() for p in parts[j].parameters()] for j in mine}}


def run_torch_schedule(name: str, world_size: int, microbatches: int, seed: int = 0,
                       timeout: float = 60) -> dict:
    """One step of torch's ``name`` on ``world_size`` gloo ranks: the step's loss (the mean of the micro-batch
    losses), one process's loss on the whole batch, and the largest gradient difference between them."""
    _placement(name)
    per_rank = run_ranks(_torch_step, world_size, name, microbatches, seed, timeout=timeout)
    model = make_layer_stack(seed, layers=2 * world_size)
    inputs, targets = _batch(seed, microbatches, model[0][0].in_features)
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    parts = split_into_stages(model, 2 * world_size)
    largest = max((mine - p.grad).abs().max().item() for result in per_rank
                  for j, grads in result["grads"].items()
                  for mine, p in zip(grads, parts[j].parameters(), strict=True))
    losses = [x for result in per_rank for x in result["losses"]]
    return {"loss": sum(losses) / len(losses), "one_process_loss": loss.item(), "largest_difference": largest}
