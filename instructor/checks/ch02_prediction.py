"""Hidden checks of chapter 02's prediction exercise (instructor-only): gloo's all-reduce time on links,
sizes, rank counts and segment sizes drawn at grading time, from the student's own formula.

Test cells of solutions/02_collectives/02_collectives.ipynb and what their hidden part calls:

  grade_id ``test_predict_gloo_all_reduce``  -> check_predict_hidden(predict_gloo_all_reduce)
  grade_id ``test_predict_gloo_own_formula`` -> check_predict_own_formula(predict_gloo_all_reduce)

Both run the student's function in a child under the exercise's refusal (course_lib refused).
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch02_prediction.visible import (
    FUNCTION_NAME,
    REFUSAL,
    compare_prediction,
    predictions,
)

from ._seeds import fresh_seed

POINTS = {"test_predict_gloo_all_reduce": 3, "test_predict_gloo_own_formula": 1}

# Always tried: an empty buffer, a tiny one, and a segment count that must be rounded up to whole chunks.
FIXED_CASES = [(0, 5, 3e-5, 2e9, 1 << 20), (100, 7, 1e-5, 1e10, 1 << 20), (7 << 20, 3, 1e-5, 1e9, 1 << 20)]


def _cases(rng: random.Random) -> list[tuple]:
    cases = list(FIXED_CASES)
    for _ in range(12):
        segment = rng.choice([1 << 16, 1 << 20, 300_000, 4 << 20])
        nbytes = rng.choice([0, rng.randint(1, 4096), rng.randint(1, 64) * segment + rng.randint(0, 999),
                             rng.uniform(1e3, 2e9)])
        latency, bandwidth = 10 ** rng.uniform(-6, -3), 10 ** rng.uniform(8, 11)
        cases.append((nbytes, rng.randint(2, 12), latency, bandwidth, segment))
    return cases


def check_predict_hidden(predict) -> None:
    """New links, sizes (empty, tiny, whole segments and not), 2 to 12 ranks and other segment sizes."""
    seed = fresh_seed(8)
    cases = _cases(random.Random(seed))
    for got, case in zip(predictions(predict, cases, "hidden case"), cases, strict=True):
        compare_prediction(got, case, f"hidden test seed {seed}")
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases")


def _far_cases(rng: random.Random) -> list[tuple]:
    """Clusters far beyond a measurement: thousands of ranks, odd segment sizes, buffers of hundreds of GB
    and buffers whose chunk per rank is smaller than one segment."""
    cases = []
    for big in (True, False) * 3:
        ranks = rng.choice([64, 512, 1000, 4096])
        segment = rng.choice([1 << 18, 1 << 20, 3_000_001, 16 << 20])
        nbytes = rng.uniform(1e9, 4e11) if big else ranks * rng.uniform(1e3, segment / 2)
        cases.append((nbytes, ranks, 10 ** rng.uniform(-6, -4), 10 ** rng.uniform(9, 11.5), segment))
    return cases


def check_predict_own_formula(predict) -> None:
    """A formula, not a fit: right on clusters of up to 4096 ranks and hundreds of GB (course_lib, whose
    simulator has the formula, is refused here as in every check of this exercise)."""
    seed = fresh_seed(8)
    cases = _far_cases(random.Random(seed))
    for got, case in zip(predictions(predict, cases, "hidden case"), cases, strict=True):
        compare_prediction(got, case, f"hidden test seed {seed}, a cluster far beyond a measurement")
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases far beyond a measurement")


EXERCISE = Exercise(
    "ch02_prediction", "02_collectives", answers=("predict_gloo_all_reduce",),
    points=POINTS, fixtures="ring", refusals=(REFUSAL,), on_ranks=False)
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_predict_gloo_all_reduce": (check_predict_hidden, ("predict_gloo_all_reduce",)),
    "test_predict_gloo_own_formula": (check_predict_own_formula, ("predict_gloo_all_reduce",)),
}
