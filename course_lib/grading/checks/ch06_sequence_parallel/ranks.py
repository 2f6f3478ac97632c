"""Running chapter 06's block and sequence-parallel parts on real ranks: the student's code on inputs
rebuilt from a seed, outputs, gradients, shard shapes and traffic recorded (judge.py judges them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.grading.checks.ch06_sequence_parallel.judge import (
    PartCase,
    backpropagate,
    build_full,
    case_tensors,
    linear_of,
    my_tokens,
)
from course_lib.real import record_traffic

NAMES = ("parallelize_block", "SequenceParallelMLP")


@dataclass(frozen=True)
class PartOutcome:
    """One rank's case: its forward's and backward's calls (op, nbytes), its output, its input's gradient,
    each parameter's gradient ({name: tensor or None}), each Linear's weight shape ({short name: shape})
    and, for sequence parallel, the calls of its gradient synchronisation (None for the block)."""

    forward: list
    backward: list
    out: torch.Tensor
    input_grad: torch.Tensor | None
    grads: dict
    shapes: dict
    synchronization: list | None = None


def _events(log) -> list:
    return [(e.op, int(e.nbytes)) for e in log.events]


def _run_part_cases(rank, world_size, students, cases, seed):
    """Rank side: build, forward, backward (and, for sequence parallel, synchronise) each case."""
    outcomes = []
    for index, case in enumerate(cases):
        case_seed = seed + 101 * index
        x, upstream = case_tensors(case, case_seed)
        full = build_full(case, case_seed)
        if case.kind == "sp":
            x, upstream = my_tokens(x, rank, world_size).clone(), my_tokens(upstream, rank, world_size)
            model = students["SequenceParallelMLP"].resolve()(full.norm, full.up, full.down)
        else:
            model = students["parallelize_block"].resolve()(full)
            model = full if model is None else model          # a block changed in place counts too
        x.requires_grad_(True)
        with record_traffic() as forward_log:
            out = model(x)
        with record_traffic() as backward_log:
            backpropagate(out, upstream)
        outcome = {"forward": _events(forward_log), "backward": _events(backward_log)}
        if case.kind == "sp":
            with record_traffic() as sync_log:
                model.finish_gradient_synchronization()
            outcome["synchronization"] = _events(sync_log)
        named = dict(model.named_parameters())
        outcome |= {"out": out.detach().clone(), "input_grad": None if x.grad is None else x.grad.clone(),
                    "grads": {n: (None if p.grad is None else p.grad.detach().clone())
                              for n, p in named.items()},
                    "shapes": {linear_of(n): tuple(p.shape) for n, p in named.items()
                               if n.endswith(".weight") and linear_of(n)}}
        outcomes.append(outcome)
    return outcomes


def run_parts(students: dict, world_size: int, cases, seed: int, timeout: float) -> RankRun:
    """Run the cases on ``world_size`` real ranks; a failure or hang is recorded, never raised."""
    cases: list[PartCase] = list(cases)
    text = FailureText(
        cases[0].describe(world_size),
        hung=(f"the {cases[0].kind} case did not finish on {{world_size}} ranks within {{timeout:g}} s "
              "(a deadlock: do all ranks call the same collectives in the same order?)"),
        forbidden="{subject}: your code made a forbidden call: {summary}",
        not_written="{subject}: your code not written yet (it raises NotImplementedError)",
        raised="{subject}: your code raised: {summary}",
        crashed="running on {world_size} ranks failed: {reason}",
        frames=lambda remote: frames_after(remote, __file__))
    return run_answer(_run_part_cases, world_size, students, cases, seed, record=PartOutcome, text=text,
                      timeout=timeout, cases=cases, seed=seed)


