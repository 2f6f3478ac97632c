"""Running and judging chapter 06's exercise: the student's shards and parallel layers on real ranks.

Ranks only run the student's code on inputs rebuilt from a seed and record traffic; the judging side
compares with the unsharded nn.Linear, MLP and transformer block (and their activations), computed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.grading.checks.ch06_tensor_parallel.judge import (
    COLUMN_LAYERS,
    ROW_LAYERS,
    LayerCase,
    backpropagate,
    build_full,
    case_tensors,
)
from course_lib.real import record_traffic

NAMES = ("shard_columns", "shard_rows", "ColumnParallelLinear", "RowParallelLinear")


def _sharded(case: LayerCase, full: nn.Module, column_cls, row_cls) -> nn.Module:
    """The case's model with the student's layers in place of the Linear layers the plan splits."""
    if case.kind == "column":
        return column_cls(full)
    if case.kind == "row":
        return row_cls(full)
    for parent in ([full] if case.kind == "mlp" else [full.attention, full.feed_forward]):
        for name, child in list(parent.named_children()):
            if name in COLUMN_LAYERS:
                setattr(parent, name, column_cls(child))
            elif name in ROW_LAYERS:
                setattr(parent, name, row_cls(child))
    return full


@dataclass(frozen=True)
class LayerOutcome:
    """One rank's case: its output, its input's gradient, each parameter's gradient ({name: tensor or
    None}) and its forward's and backward's calls (op, nbytes)."""

    out: torch.Tensor
    input_grad: torch.Tensor
    grads: dict
    forward: list
    backward: list


def _run_layer_cases(rank, world_size, students, cases, seed):
    """Rank side: build, forward and backward each case with the student's layers; record the traffic."""
    column_cls, row_cls = (students[name].resolve() if name in students else None for name in NAMES[2:])
    outcomes = []
    for index, case in enumerate(cases):
        case_seed = seed + 101 * index
        x, upstream = case_tensors(case, case_seed)
        if case.kind == "row":  # a row-parallel layer gets this rank's slice of the input features
            x = torch.tensor_split(x, world_size, dim=-1)[rank].clone()
        if case.kind == "column":
            upstream = torch.tensor_split(upstream, world_size, dim=-1)[rank]
        x.requires_grad_(True)
        model = _sharded(case, build_full(case, case_seed), column_cls, row_cls)
        with record_traffic() as forward_log:
            out = model(x)
        with record_traffic() as backward_log:
            backpropagate(out, upstream)
        grads = {name: (None if p.grad is None else p.grad.detach().clone())
                 for name, p in model.named_parameters()}
        outcomes.append({"out": out.detach().clone(), "input_grad": x.grad.detach().clone(), "grads": grads,
                         "forward": [(e.op, int(e.nbytes)) for e in forward_log.events],
                         "backward": [(e.op, int(e.nbytes)) for e in backward_log.events]})
    return outcomes


def run_layers(students: dict, world_size: int, cases, seed: int, timeout: float) -> RankRun:
    """Run the cases on ``world_size`` real ranks; a failure or hang is recorded, never raised."""
    cases = list(cases)
    text = FailureText(
        cases[0].describe(world_size),
        hung=(f"the {cases[0].kind} case did not finish on {{world_size}} ranks within {{timeout:g}} s "
              "(a deadlock: do all ranks call the same collectives in the same order?)"),
        forbidden="{subject}: your code made a forbidden call: {summary}",
        not_written="{subject}: your code not written yet (it raises NotImplementedError)",
        raised="{subject}: your code raised: {summary}",
        crashed="running on {world_size} ranks failed: {reason}",
        frames=_student_frames)
    return run_answer(_run_layer_cases, world_size, students, cases, seed, record=LayerOutcome, text=text,
                      timeout=timeout, cases=cases, seed=seed)


def _student_frames(remote_traceback: str) -> str:
    return frames_after(remote_traceback, __file__)


