"""Hidden checks of chapter 05's zero-bubble exercise (instructor-only): ZB-H1's F/B/W op lists.

The student's zero_bubble_h1 is asked for many (stages, microbatches) pairs, 1 to 8 stages and 1 to 16
micro-batches, fewer micro-batches than stages and a single stage included, some drawn at grading time
from a seed taken from os.urandom; it runs in a child process under the exercise's refusal (course_lib,
torch.distributed.pipelining). The returned ops are played on the course simulator with (F, B, W) times
drawn from the seed (W <= F, B, as in a transformer layer). Every failure message names the seed.

Test cells of solutions/05_pipeline_parallel/05_pipeline_parallel.ipynb, their points, and their hidden part:

  grade_id                            points  hidden check
  test_zero_bubble_h1_dependencies       2    check_zero_bubble_h1_dependencies_hidden(zero_bubble_h1)
  test_zero_bubble_h1_memory             2    check_zero_bubble_h1_memory_hidden(zero_bubble_h1)
  test_zero_bubble_h1_makespan           2    check_zero_bubble_h1_makespan_hidden(zero_bubble_h1)

No reference schedule is used: the makespan is held to the bubble Qi et al. 2024 state for ZB-H1, and a
failure draws the student's timeline above a bar as long as that makespan. The expected points of
known-wrong submissions: autograde_tests/fixtures/zero_bubble/expected_scores.json.
"""

from __future__ import annotations

import functools
import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.visible import generate_schedules, pair_problems
from course_lib.grading.checks.ch05_zero_bubble.judge import (
    dependency_problems,
    makespan_problems,
    memory_problems,
)
from course_lib.grading.checks.ch05_zero_bubble.visible import NAME, REFUSAL

from ._seeds import fresh_seed

FIXED_PAIRS = ((4, 8), (1, 1), (1, 5), (2, 1), (3, 2), (8, 3), (5, 5), (2, 9), (6, 12), (8, 16), (7, 1),
               (8, 8), (3, 16))
TIMEOUT_S = 10
POINTS = {"test_zero_bubble_h1_dependencies": 2, "test_zero_bubble_h1_memory": 2,
          "test_zero_bubble_h1_makespan": 2}
_CACHE: dict = {}       # the schedules of the last function graded, for its three checks


def hidden_times(rng: random.Random) -> list[tuple[float, float, float]]:
    """Equal times, and three uneven (F, B, W) with W <= min(F, B), rounded to read well."""
    times = [(1.0, 1.0, 1.0)]
    for _ in range(3):
        forward, backward = round(rng.uniform(0.5, 1.5), 2), round(rng.uniform(0.5, 2.0), 2)
        times.append((forward, backward, round(rng.uniform(0.2, min(forward, backward)), 2)))
    return times


def _schedules(student):
    key = student.identity()
    if _CACHE.get("key") != key:
        seed = fresh_seed()
        rng = random.Random(seed)
        pairs = list(FIXED_PAIRS) + [(rng.randint(1, 8), rng.randint(1, 16)) for _ in range(6)]
        schedules = generate_schedules(student, pairs, TIMEOUT_S)
        _CACHE.clear()
        _CACHE.update(key=key, seed=seed, schedules=schedules,
                      times=hidden_times(rng), student=student)   # keeps the ids in key alive
    return _CACHE


def _check(zero_bubble_h1, judge, what: str) -> None:
    """``judge(run)`` gives the per-pair judge: the run's schedules are made once for all three checks."""
    run = _schedules(as_student_function(zero_bubble_h1, NAME, refusal=REFUSAL))
    problems = pair_problems(run["schedules"], judge(run), NAME)
    fail_with([f"{p}\n  (hidden test seed {run['seed']})" for p in dict.fromkeys(problems)], what, limit=2)


def check_zero_bubble_h1_dependencies_hidden(zero_bubble_h1) -> None:
    """Every F, B and W once, B after its F, W after its B, and no stage waits forever."""
    _check(zero_bubble_h1, lambda run: dependency_problems,
           "zero_bubble_h1's ops cannot run in that order on hidden cases")


def check_zero_bubble_h1_memory_hidden(zero_bubble_h1) -> None:
    """No stage holds more micro-batches (F until W) than 1F1B's busiest stage, min(stages, microbatches)."""
    _check(zero_bubble_h1, lambda run: memory_problems,
           "zero_bubble_h1 holds more activations than 1F1B on hidden cases")


def check_zero_bubble_h1_makespan_hidden(zero_bubble_h1) -> None:
    """Makespan within ZB-H1's, m(F+B+W) + (p-1)(F+B-W), for equal and uneven F, B, W (1F1B's with m < p)."""
    _check(zero_bubble_h1, lambda run: functools.partial(makespan_problems, times_list=run["times"]),
           "zero_bubble_h1's simulated makespan misses ZB-H1's on hidden cases")


EXERCISE = Exercise(
    "ch05_zero_bubble", "05_pipeline_parallel", answers=("zero_bubble_h1",),
    points=POINTS, fixtures="zero_bubble", refusals=(REFUSAL,), on_ranks=False)
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_zero_bubble_h1_dependencies": (check_zero_bubble_h1_dependencies_hidden, ("zero_bubble_h1",)),
    "test_zero_bubble_h1_memory": (check_zero_bubble_h1_memory_hidden, ("zero_bubble_h1",)),
    "test_zero_bubble_h1_makespan": (check_zero_bubble_h1_makespan_hidden, ("zero_bubble_h1",)),
}
