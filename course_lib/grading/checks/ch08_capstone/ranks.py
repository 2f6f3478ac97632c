"""What runs on the ranks for chapter 08's capstone checks: the student's stage built on each rank of a
tensor-parallel group, reported as the weights each linear layer holds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.capstone.run import Pieces
from course_lib.capstone.standins import tensor_parallel
from course_lib.models import make_transformer_block


def _linear_weights(module) -> int:
    """Elements of the matrix parameters a rank holds (its shard of a DTensor), norms left out."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in module.parameters()
               if p.dim() == 2)


@dataclass(frozen=True)
class StageOutcome:
    """One rank's stage: what building or running it raised (as text), or the matrix weights it holds
    against the unsharded blocks', and how far its output and input gradient are from theirs."""

    raised: str | None = None
    held: int = 0
    whole: int = 0
    output: float = 0.0
    input_grad: float = 0.0


def stage_side(rank, world_size, build_stage, layers, seed):
    """Rank side: the student's stage against the unsharded blocks, on one input, forward and backward."""
    build_stage = build_stage.resolve()
    blocks = [make_transformer_block(seed=seed + i) for i in range(layers)]
    whole = torch.nn.Sequential(*copy.deepcopy(blocks))
    x = torch.randn(2, 8, blocks[0].attention.q.in_features, generator=torch.Generator().manual_seed(seed))
    x_whole, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = whole(x_whole)
    expected.square().sum().backward()
    pieces = Pieces(0, 1, {"tensor_parallel": tensor_parallel(dist.group.WORLD)}, {})
    try:
        stage = build_stage(blocks, pieces)
        out = stage(x_mine)
        out.square().sum().backward()
    except Exception as error:   # noqa: BLE001 - reported as the student's error
        return {"raised": f"{type(error).__name__}: {error}"[:400]}
    with torch.no_grad():
        gaps = {"output": float((out - expected).abs().max()),
                "input_grad": float((x_mine.grad - x_whole.grad).abs().max())}
    return {"held": _linear_weights(stage), "whole": _linear_weights(whole), **gaps}
