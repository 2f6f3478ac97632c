"""Visible checks of chapter 11's exercise, ``expert_parallel_forward``, and what its answer may not use.

Each check runs the student's dispatch on 1, 2 and 4 real gloo ranks (uneven tokens per rank, an expert
every token picks, an expert nobody picks) and compares every rank with the one-process MoE
(ch11_expert_parallel_judge); the traffic check reads the bytes each all-to-all sent to each rank.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import RankRun, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch11_expert_parallel.judge import (
    capacity_problems,
    gradient_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch11_expert_parallel.ranks import MoECase, run_cases

REFUSAL = Refusal(
    "your expert-parallel dispatch",
    modules=("torch.distributed._functional_collectives", "torch.distributed.nn.functional",
             "torch.distributed._symmetric_memory"),
    functions=("torch.nn.functional.grouped_mm",),
    why=("the exercise is to write the dispatch, the combine and the autograd function whose backward "
         "reverses them yourself, with dist.all_to_all_single"))

VISIBLE_WORLD_SIZES = (1, 2, 4)
VISIBLE_SEED = 2025
VISIBLE_TIMEOUT_S = 20
TOKENS = (5, 3, 6, 4)        # uneven: the first ranks' tokens
NAME = "expert_parallel_forward"


def visible_cases(world_size: int, capacity: bool = False) -> list[MoECase]:
    """k = 1 and 2, an expert every token picks and one nobody picks, on ``world_size`` ranks."""
    tokens, per_rank = TOKENS[:world_size], 2 if world_size > 1 else 3
    if capacity:
        return [MoECase(tokens, per_rank, 2, hidden=16, routing="one_takes_all", capacity_factor=1.0),
                MoECase(tokens, per_rank, 1, hidden=16, capacity_factor=1.5)]
    return [MoECase(tokens, per_rank, 1), MoECase(tokens, per_rank, 2, routing="one_takes_all"),
            MoECase(tokens, per_rank, 2, routing="idle_expert", dtype="float64")]


def student_of(candidate):
    """The student's function with this exercise's refusal (what it may not run) attached."""
    return as_student_function(candidate, NAME, refusal=REFUSAL)


def runs(candidate, world_sizes=VISIBLE_WORLD_SIZES, backward: bool = False, capacity: bool = False,
         seed: int = VISIBLE_SEED, timeout: float = VISIBLE_TIMEOUT_S) -> list[RankRun]:
    """One run per world size of the visible cases; stops at the first that raises or hangs."""
    student = student_of(candidate)
    return runs_until_failure(
        lambda world_size: run_cases(student, visible_cases(world_size, capacity), seed, timeout, backward),
        world_sizes)


def _check(problems: list[str], what: str, passed: str) -> None:
    fail_with(problems, what)
    print(passed)


def check_expert_parallel_values(expert_parallel_forward) -> None:
    """Visible test: every rank's output equals its tokens' rows of the one-process MoE."""
    problems = [p for run in runs(expert_parallel_forward) for p in value_problems(run)]
    _check(problems, "expert_parallel_forward's output differs from the one-process MoE",
           f"expert_parallel_forward: every rank's output equals the one-process MoE on "
           f"{VISIBLE_WORLD_SIZES} ranks (k = 1 and 2, an expert every token picks, one nobody picks)")


def check_expert_parallel_gradients(expert_parallel_forward) -> None:
    """Visible test: the gradients of the tokens, the router logits and every expert's parameters."""
    problems = [p for run in runs(expert_parallel_forward, backward=True) for p in gradient_problems(run)]
    _check(problems, "expert_parallel_forward's gradients differ from the one-process MoE's",
           "expert_parallel_forward: the gradients of the tokens, the router logits and every expert equal "
           f"the one-process MoE's on {VISIBLE_WORLD_SIZES} ranks")


def check_expert_parallel_traffic(expert_parallel_forward) -> None:
    """Visible test: counts, tokens out, results back; backward the reverse; bytes as the routing says."""
    problems = [p for run in runs(expert_parallel_forward, world_sizes=(2, 4), backward=True)
                for p in traffic_problems(run)]
    _check(problems, "expert_parallel_forward does not communicate as an expert-parallel dispatch",
           "expert_parallel_forward: forward sends the counts, then each rank exactly its routed rows, and "
           "gets them back; backward reverses both, on 2 and 4 ranks")


def check_expert_parallel_capacity(expert_parallel_forward) -> None:
    """Visible test: a capacity factor drops each rank's overflow pairs in token order; none travels."""
    problems = [p for run in runs(expert_parallel_forward, capacity=True) for p in capacity_problems(run)]
    _check(problems, "expert_parallel_forward does not drop the overflow as the contract says",
           f"expert_parallel_forward: with a capacity factor, the output equals the MoE that keeps each "
           f"expert's first tokens, and no dropped pair is sent, on {VISIBLE_WORLD_SIZES} ranks")
