"""Checks of chapter 07, part 3 (FSDP, ZeRO stage 3) against single-process training of the same model.

The ranks train with the student's FSDP (ch07_fsdp_ranks.py). Judged here: the values against one
process; the memory the process really holds at its peak (the activations the plain model holds, plus
the shards and their gradients, plus at most a few units gathered: holding the model's units gathered or
its gradients until the end fails); the traffic (per unit two all-gathers and one reduce-scatter, each
reduce-scatter started during the backward); mixed precision. torch's FSDP is refused (chapter 07's Refusal).
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import run_training_answer
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch07_fsdp.judge import (
    LOW_PRECISION_SHARE,
    memory_problems,
    precision_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch07_fsdp.ranks import FSDPCase, FSDPOutcome, fsdp_side, reference
from course_lib.grading.checks.ch07_zero.ranks import chapter_refusal

REFUSAL = chapter_refusal("your FSDP")
VISIBLE_TIMEOUT_S = 30

__all__ = ["REFUSAL", "FSDPCase", "check_fsdp_memory", "check_fsdp_mixed_precision", "check_fsdp_traffic",
           "check_fsdp_values", "memory_problems", "precision_problems", "reference", "run_fsdp",
           "traffic_problems", "value_problems"]


def run_fsdp(candidate, case: FSDPCase, world_size: int, timeout: float):
    student = as_student_function(candidate, "FSDP", refusal=REFUSAL)
    return run_training_answer(fsdp_side, world_size, student, case, record=FSDPOutcome, name="FSDP",
                               timeout=timeout, cases=(case,), one_per_rank=True)


VISIBLE = FSDPCase(tied=True)   # values, memory and traffic judge this one run
_LAST_VISIBLE: dict = {}   # the latest class's visible runs, shared by the checks that judge the same run


def _visible(FSDP, case, world_size):  # noqa: N803
    key = (id(FSDP), case, world_size)
    if key not in _LAST_VISIBLE:
        if any(other[0] != id(FSDP) for other in _LAST_VISIBLE):
            _LAST_VISIBLE.clear()
        run = run_fsdp(FSDP, case, world_size, VISIBLE_TIMEOUT_S)
        _LAST_VISIBLE[key] = (run, FSDP)   # holding the class keeps its id from being reused
    return _LAST_VISIBLE[key][0]


def check_fsdp_values(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: 3 SGD steps with your FSDP equal single-process training, on a model with a tied
    weight."""
    case = VISIBLE
    fail_with(value_problems(_visible(FSDP, case, world_size), case), "FSDP training differs")
    print(f"FSDP: {case.steps} SGD steps on {world_size} ranks equal single-process training, "
          f"the tied weight {case.tied_names} kept as one")


def check_fsdp_memory(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: at its peak the process holds no more than the plain model's activations, the
    shards and their gradients, and a few units."""
    run = _visible(FSDP, VISIBLE, world_size)
    fail_with(memory_problems(run, VISIBLE), "FSDP holds too much memory")
    extra = {phase: max(o.peak[phase] - o.baseline[phase] for o in run.records)
             for phase in ("forward", "backward")}
    unsharded = sum(p.numel() * 4 for p in VISIBLE.model().parameters())
    print(f"FSDP: at most {extra['forward']} bytes in the forward and {extra['backward']} in the backward "
          f"held beyond the plain model's activations (the whole model is {unsharded} bytes)")


def check_fsdp_traffic(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: per unit, all-gather before forward and before backward, one reduce-scatter."""
    fail_with(traffic_problems(_visible(FSDP, VISIBLE, world_size), VISIBLE),
              "FSDP's traffic is not ZeRO-3's")
    print(f"FSDP: 2 all-gathers and 1 reduce-scatter per unit, {VISIBLE.units + 1} units")


def check_fsdp_mixed_precision(FSDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: with compute_dtype=torch.bfloat16, bf16 traffic, float32 shards, values close."""
    case = FSDPCase(dtype="bfloat16")
    fail_with(precision_problems(_visible(FSDP, case, world_size), case), "FSDP's mixed precision is wrong")
    print(f"FSDP: bfloat16 compute and traffic, float32 master shards, values within "
          f"{LOW_PRECISION_SHARE:.0%} of how far training moved them")
