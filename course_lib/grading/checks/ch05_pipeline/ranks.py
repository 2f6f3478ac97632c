"""Checks of chapter 05's second exercise: one pipeline stage run for real, from an op list, on gloo ranks.

Each rank runs the student's function on its stage of a seeded layer stack while its traffic is recorded;
the judging side recomputes single-process gradients itself and compares gradients and messages.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import failures, run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with, frames_after
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.judge import (
    FORBIDDEN_REASON,
    MICRO_BATCH,
    MISMATCHED_OPS,
    StageOutcome,
    StageRun,
    batch,
    gradient_problems,
    mismatch_problems,
    traffic_problems,
)
from course_lib.grading.checks.ch05_pipeline.visible import PIPELINING
from course_lib.models import STACK_WIDTH, make_layer_stack, split_into_stages
from course_lib.real import record_traffic
from course_lib.sim import pipeline_schedule

REFUSAL = Refusal("run_stage", modules=PIPELINING,
                  why="the exercise is to run the stage's forwards, backwards and messages yourself")
VISIBLE_TIMEOUT_S = 6


def warm_autograd() -> None:
    """A first backward with an explicit gradient imports sympy (seconds); do it once before forking."""
    x = torch.ones(2, requires_grad=True)
    (x * 2).backward(torch.ones(2))


def course_ops(kind: str, stages: int, microbatches: int) -> list:
    """The course's op lists as ("F"|"B", m) pairs: the part-2 input, whoever wrote part 1."""
    return [[op[:2] for op in stage] for stage in pipeline_schedule(kind, stages, microbatches).ops]


def _run_stage(rank, world_size, student, ops, seed, microbatches):
    """Rank side: this rank's stage of the model, the student's step on it, its gradients and traffic."""
    function = student.resolve()
    module = split_into_stages(make_layer_stack(seed), world_size)[rank]
    inputs, targets = batch(seed, microbatches)
    first, last = rank == 0, rank == world_size - 1
    with record_traffic(forbid=("collectives",), reason=FORBIDDEN_REASON) as log:
        loss = function(module, list(ops[rank]), (MICRO_BATCH, STACK_WIDTH),
                        inputs=list(inputs.chunk(microbatches)) if first else None,
                        targets=list(targets.chunk(microbatches)) if last else None,
                        loss_fn=nn.functional.mse_loss if last else None)
    return {"loss": float(loss) if last and isinstance(loss, (int, float, torch.Tensor)) else None,
            "grads": [None if p.grad is None else p.grad.clone() for p in module.parameters()],
            "events": [[str(e.op), e.peer, int(e.nbytes)] for e in log.events]}


def _failure_text(where: str) -> FailureText:
    return FailureText(
        where,
        hung=("{subject} did not finish within {timeout:g} s, so the test stopped it (a deadlock: two stages "
              "each waiting for the other)."),
        forbidden="{subject} used a collective, which this exercise forbids: {summary}",
        not_written="{subject} is not written yet (it raises NotImplementedError): {summary}",
        raised="{subject} raised: {summary}",
        crashed="running {subject} failed: {reason}",
        frames=lambda remote_traceback: frames_after(remote_traceback, __file__))


def run_student(student, kind: str, stages: int, microbatches: int, seed: int, timeout: float,
                ops=None) -> StageRun:
    """The student's stage on ``stages`` real ranks with ``kind``'s op lists (or ``ops``); never raises."""
    warm_autograd()
    ops = ops or course_ops(kind, stages, microbatches)
    where = f"{student.name} on {stages} stages, {microbatches} micro-batches, {kind} op lists"
    run = run_answer(_run_stage, stages, student, ops, seed, microbatches, record=StageOutcome,
                     text=_failure_text(where), timeout=timeout, seed=seed, one_per_rank=True)
    return StageRun(**vars(run), kind=kind, microbatches=microbatches, ops=ops)


def run_mismatched(student, seed: int, timeout: float) -> StageRun:
    """The student's stages given op lists that disagree (stage 0 waits on micro-batch 0, stage 1 on 1)."""
    return run_student(student, "mismatched", 2, 2, seed, timeout, ops=MISMATCHED_OPS)


def _visible(run_stage, kind: str, stages: int = 3, microbatches: int = 4) -> StageRun:
    student = as_student_function(run_stage, "run_stage", refusal=REFUSAL)
    return run_student(student, kind, stages, microbatches, seed=5, timeout=VISIBLE_TIMEOUT_S)


def check_run_stage_gradients(run_stage, kind: str = "1f1b", stages: int = 3, microbatches: int = 4) -> None:
    """Visible test: a step with ``kind``'s op lists gives single-process gradients and loss."""
    run = _visible(run_stage, kind, stages, microbatches)
    fail_with(gradient_problems(run), f"run_stage with {kind} op lists does not train like one process")
    print(f"run_stage: {kind} op lists on {stages} ranks, {microbatches} micro-batches: loss and every "
          "gradient equal single-process training")


def check_run_stage_traffic(run_stage, stages: int = 3, microbatches: int = 4) -> None:
    """Visible test: exactly one message per op and neighbour, sent in op order."""
    run = _visible(run_stage, "1f1b", stages, microbatches)
    fail_with(traffic_problems(run), "run_stage's messages are not the pipeline's")
    print(f"run_stage: on {stages} ranks each stage sent one {MICRO_BATCH}x{STACK_WIDTH} tensor per op to "
          "its neighbour, in op order, and nothing else")


def check_run_stage_mismatch(run_stage, timeout: float = 3) -> None:
    """Visible test: op lists that disagree stop with an error (here after a short timeout)."""
    student = as_student_function(run_stage, "run_stage", refusal=REFUSAL)
    completed = run_student(student, "gpipe", 2, 2, seed=5, timeout=VISIBLE_TIMEOUT_S)
    mismatched = run_mismatched(student, 5, timeout) if completed.completed else completed
    fail_with(mismatch_problems(completed, mismatched), "run_stage does not follow its op list")
    print("run_stage: stages given op lists that disagree were stopped, not silently finished:\n  "
          + "\n  ".join(failures([mismatched])[0].splitlines()[:4]))
