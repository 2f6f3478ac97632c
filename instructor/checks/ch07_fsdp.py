"""Hidden checks of chapter 07, part 3 (instructor-only): the student's FSDP (ZeRO stage 3) on 2 and 4 ranks.

Models are drawn from a seed taken at grading time (named in every failure message): block width and
count vary, so unit sizes rarely divide by the world size; every model has a tied weight. Each rank trains
its rows for 3 SGD steps; the judge trains the unwrapped model on one process and compares. The values,
memory and traffic checks judge the same runs (one per world size), run once per answer.

  grade_id                          points  hidden check
  test_fsdp_values                     4    check_fsdp_values_hidden(FSDP)
  test_fsdp_memory                     2    check_fsdp_memory_hidden(FSDP)
  test_fsdp_traffic                    2    check_fsdp_traffic_hidden(FSDP)
  test_fsdp_mixed_precision            2    check_fsdp_mixed_precision_hidden(FSDP)

values: on models with a tied weight (one Linear of a middle unit holds another's weight), the modules
holding it see the same values in every forward, and gather_full_params() equals single-process float32
training within 1e-5 (the tied weight once, under its first name). memory: the tensor bytes the process
really holds (every storage made since the FSDP was built and still alive, autograd's saved tensors and
gradients included), measured at every layer's forward and backward and at the end of the forward, exceed
the plain model's activations by at most the shards, their gradients and 3 x the largest unit. traffic:
per unit one all-gather before forward, one before backward and one reduce-scatter, each of the unit's
padded flat buffer, every reduce-scatter started during the backward (at most one unit gathered ahead of
the reductions), nothing else. torch's FSDP and ZeroRedundancyOptimizer, and course_lib, are refused.
mixed precision (on models without a tie): with compute_dtype=torch.bfloat16, parameters gathered in
bf16, float32 shards and gradients, values within 10% of how far training moved them.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch07_fsdp.visible import (
    REFUSAL,
    FSDPCase,
    memory_problems,
    precision_problems,
    run_fsdp,
    traffic_problems,
    value_problems,
)

from ._seeds import fresh_seed
from .ch07_zero import checked_runs

WORLD_SIZES = (4, 2)
TIMEOUT_S = 40
POINTS = {"test_fsdp_values": 4, "test_fsdp_memory": 2, "test_fsdp_traffic": 2,
          "test_fsdp_mixed_precision": 2}


# The values, memory and traffic checks judge the same runs (one per world size, on one model with a tied
# weight, from one seed): each submission's FSDP trains 2 times for them instead of 6. Keyed by the code
# graded (a kernel's class, or the judge's sources), so a changed answer trains afresh.
_RUNS: dict = {}


def _identity(FSDP) -> tuple:  # noqa: N803
    sources = getattr(FSDP, "sources", None)
    if sources:
        return ("sources", tuple(sources), getattr(FSDP, "prelude", ""))
    return ("class", id(FSDP))


def _shared_runs(FSDP):  # noqa: N803
    """The runs (each of one case) and the seed, run once for the three checks that judge them."""
    key = _identity(FSDP)
    if key not in _RUNS:
        _RUNS.clear()
        seed = fresh_seed()
        rng = random.Random(seed)

        def run_one(world_size: int):
            case = FSDPCase(width=rng.randint(9, 23), units=rng.randint(5, 8), seed=seed % 10_000, tied=True)
            return run_fsdp(FSDP, case, world_size, TIMEOUT_S)

        # holding FSDP keeps its id from being reused
        _RUNS[key] = (runs_until_failure(run_one, WORLD_SIZES), seed, FSDP)
    runs, seed, _ = _RUNS[key]
    return runs, seed


def _judged(FSDP, judge, what: str) -> None:  # noqa: N803
    runs, seed = _shared_runs(FSDP)
    problems = [p for run in runs for p in judge(run, run.cases[0])]
    fail_with([f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], what)


def check_fsdp_values_hidden(FSDP) -> None:  # noqa: N803
    _judged(FSDP, value_problems, "FSDP training differs from single-process training")


def check_fsdp_memory_hidden(FSDP) -> None:  # noqa: N803
    _judged(FSDP, memory_problems, "FSDP holds too much memory")


def check_fsdp_traffic_hidden(FSDP) -> None:  # noqa: N803
    _judged(FSDP, traffic_problems, "FSDP's traffic is not ZeRO-3's")


def check_fsdp_mixed_precision_hidden(FSDP) -> None:  # noqa: N803
    def case_for(rng, seed):
        # untied: the tie is the values check's to judge, and one mistake costs one cell
        return FSDPCase(width=rng.randint(9, 23), units=rng.randint(5, 8), dtype="bfloat16",
                        seed=seed % 10_000, tied=False)

    checked_runs(FSDP, lambda *a: run_fsdp(*a, TIMEOUT_S), WORLD_SIZES, case_for, precision_problems,
                 "FSDP's mixed precision is wrong")


EXERCISE = Exercise(
    "ch07_fsdp", "07_zero_fsdp", answers=("FSDP",),
    points=POINTS, fixtures="zero", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_fsdp_values": (check_fsdp_values_hidden, ("FSDP",)),
    "test_fsdp_memory": (check_fsdp_memory_hidden, ("FSDP",)),
    "test_fsdp_traffic": (check_fsdp_traffic_hidden, ("FSDP",)),
    "test_fsdp_mixed_precision": (check_fsdp_mixed_precision_hidden, ("FSDP",)),
}
