"""Hidden checks of chapter 11 (instructor-only): the expert-parallel dispatch and combine.

Each check runs the student's ``expert_parallel_forward`` on real gloo ranks for world sizes 4, 2, 1 and 3,
with tokens per rank, experts per rank, widths and routings drawn at grading time from a seed taken from
os.urandom (float32 on even world sizes, float64 on odd ones); every case has an expert every token picks
or one nobody picks. Expected values come from the one-process MoE computed here, in the judging process,
never from the student's code; each failure message names the seed. Every run has a timeout, so a deadlock
costs the part's points, never a hung grader. The exercise's refusal (course_lib, torch's autograd-aware
all-to-alls and its MoE kernels) travels with the answer.

Test cells of solutions/11_expert_parallel/11_expert_parallel.ipynb, their points, and their hidden checks:

  grade_id                          points  hidden check
  test_expert_parallel_values          4    check_expert_parallel_values_hidden(expert_parallel_forward)
  test_expert_parallel_gradients       4    check_expert_parallel_gradients_hidden(expert_parallel_forward)
  test_expert_parallel_traffic         3    check_expert_parallel_traffic_hidden(expert_parallel_forward)
  test_expert_parallel_capacity        3    check_expert_parallel_capacity_hidden(expert_parallel_forward)
                                      --
                                      14

What each one demands (every check fails if the code raises, hangs or runs refused code):
- values: every rank's output equals its tokens' rows of the one-process MoE (top-k, gates renormalised
  over the k, results put back at their tokens), k = 1 and 2.
- gradients: the gradients of the tokens, the router logits and every expert's parameters (on the rank
  holding the expert) equal the one-process MoE's.
- traffic: forward, exactly three all_to_all_single calls (the counts, then to each rank at least one row
  per token and at most one per (token, expert) pair routed to its experts, then the same rows back);
  backward, exactly two, each the reverse of one forward all-to-all; no other call (on 2, 3 and 4 ranks).
- capacity: with capacity factors 0.5 to 1.5, the output of the MoE in which each rank sends each expert
  at most floor(cf * T * k / E) of its pairs, the first in token order, and its router logits' gradient
  (the kept gates' softmax still differentiable: dropping is no reason to detach them; computed alone, so
  the all-to-alls' backward is the gradients part's); the dropped pairs never travel.
The expected points of known-wrong submissions: autograde_tests/fixtures/expert_parallel/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch11_expert_parallel.judge import (
    capacity_problems,
    gradient_problems,
    router_gradient_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch11_expert_parallel.ranks import ROUTER_ONLY, MoECase, run_cases
from course_lib.grading.checks.ch11_expert_parallel.visible import REFUSAL, student_of

from ._seeds import fresh_seed

WORLD_SIZES = (4, 2, 1, 3)          # the usual case first, so a wrong dispatch fails fast
TRAFFIC_WORLD_SIZES = (4, 2, 3)
TIMEOUT_S = 20                      # per run of one world size; a correct dispatch needs well under 1 s
POINTS = {"test_expert_parallel_values": 4, "test_expert_parallel_gradients": 4,
          "test_expert_parallel_traffic": 3, "test_expert_parallel_capacity": 3}


def hidden_cases(world_size: int, rng: random.Random, capacity: bool = False) -> list[MoECase]:
    """Uneven tokens per rank, 1 to 3 experts per rank (at least 3 experts in all), drawn widths."""
    tokens = tuple(rng.randint(1, 9) for _ in range(world_size))
    per_rank = max(rng.randint(1, 3), -(-3 // world_size))
    sizes = dict(hidden=rng.choice((8, 12, 16)), ffn=rng.choice((8, 16, 24)),
                 dtype="float64" if world_size % 2 else "float32")
    if capacity:
        return [MoECase(tokens, per_rank, 2, routing="one_takes_all", capacity_factor=rng.choice((0.5, 1.0)),
                        **sizes),
                MoECase(tokens, per_rank, rng.randint(1, 2), capacity_factor=rng.choice((1.0, 1.25, 1.5)),
                        **sizes)]
    return [MoECase(tokens, per_rank, 1, routing=rng.choice(("random", "idle_expert")), **sizes),
            MoECase(tokens, per_rank, 2, routing="one_takes_all", **sizes),
            MoECase(tokens, per_rank, 2, routing="idle_expert", **sizes)]


def _problems(expert_parallel_forward, judge, world_sizes=WORLD_SIZES, backward: bool | str = False,
              capacity: bool = False) -> tuple[list[str], int]:
    seed = fresh_seed(5)
    rng, student = random.Random(seed), student_of(expert_parallel_forward)

    def run_one(world_size: int):
        return run_cases(student, hidden_cases(world_size, rng, capacity), seed, TIMEOUT_S, backward)

    runs = runs_until_failure(run_one, world_sizes)
    problems = [p for run in runs for p in judge(run)]
    return [f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], seed


def check_expert_parallel_values_hidden(expert_parallel_forward) -> None:
    """Every rank's output equals the one-process MoE's rows for its tokens, on 1 to 4 ranks."""
    problems, _ = _problems(expert_parallel_forward, value_problems)
    fail_with(problems, "expert_parallel_forward's output is wrong on hidden cases")


def check_expert_parallel_gradients_hidden(expert_parallel_forward) -> None:
    """Gradients of tokens, router logits and each rank's experts equal the one-process MoE's."""
    problems, _ = _problems(expert_parallel_forward, gradient_problems, backward=True)
    fail_with(problems, "expert_parallel_forward's gradients are wrong on hidden cases")


def check_expert_parallel_traffic_hidden(expert_parallel_forward) -> None:
    """Counts, routed tokens out, results back; backward the reverse; nothing else (2, 3 and 4 ranks)."""
    problems, _ = _problems(expert_parallel_forward, traffic_problems, TRAFFIC_WORLD_SIZES, backward=True)
    fail_with(problems, "expert_parallel_forward does not communicate as an expert-parallel dispatch")


def check_expert_parallel_capacity_hidden(expert_parallel_forward) -> None:
    """A capacity factor drops each rank's overflow pairs in token order, the router's gradient still right;
    no dropped pair travels."""
    problems, _ = _problems(expert_parallel_forward, _capacity_and_router, backward=ROUTER_ONLY,
                            capacity=True)
    fail_with(problems, "expert_parallel_forward does not drop the overflow as the contract says")


def _capacity_and_router(run) -> list[str]:
    return capacity_problems(run) + (router_gradient_problems(run) if run.completed else [])


EXERCISE = Exercise(
    "ch11_expert_parallel", "11_expert_parallel", answers=("expert_parallel_forward",),
    points=POINTS, fixtures="expert_parallel", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_expert_parallel_values": (check_expert_parallel_values_hidden, ("expert_parallel_forward",)),
    "test_expert_parallel_gradients": (check_expert_parallel_gradients_hidden, ("expert_parallel_forward",)),
    "test_expert_parallel_traffic": (check_expert_parallel_traffic_hidden, ("expert_parallel_forward",)),
    "test_expert_parallel_capacity": (check_expert_parallel_capacity_hidden, ("expert_parallel_forward",)),
}
