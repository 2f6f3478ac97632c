"""Visible checks of chapter 02's prediction exercise: gloo's all-reduce time from the alpha-beta model.

The reference is the simulator's closed form (``collective_time`` with gloo's segments, one in flight).
"""

from __future__ import annotations

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.checks.ch02_prediction.judge import (
    FUNCTION_NAME,
    GLOO_SEGMENT_BYTES,
    compare_prediction,
)

# The formula is the exercise: the course's simulator (which has it) may not compute it for the student.
REFUSAL = Refusal(FUNCTION_NAME, why="write the alpha-beta formula yourself, from math alone")


VISIBLE_CASES = [(4096, 2, 50e-6, 1e9, GLOO_SEGMENT_BYTES), (64 << 20, 2, 50e-6, 1e9, GLOO_SEGMENT_BYTES),
                 (3 << 20, 4, 20e-6, 2e9, GLOO_SEGMENT_BYTES), (100, 1, 50e-6, 1e9, GLOO_SEGMENT_BYTES)]


def predictions(predict, cases, where: str) -> list:
    """The student's predictions for ``cases``, computed in a child under the exercise's refusal."""
    try:
        return map_isolated(predict, cases, name=FUNCTION_NAME, timeout=30, refusal=REFUSAL)
    except IsolatedCallError as error:
        raise AssertionError(f"{FUNCTION_NAME} failed on a {where}: {error}") from None


def check_gloo_prediction(predict) -> None:
    """Visible test: the prediction matches the alpha-beta closed form on a few cases (one is 1 rank)."""
    for got, case in zip(predictions(predict, VISIBLE_CASES, "visible case"), VISIBLE_CASES, strict=True):
        compare_prediction(got, case, "visible case")
    print(f"{FUNCTION_NAME}: right on {len(VISIBLE_CASES)} visible cases; the hidden tests draw new links, "
          "sizes, rank counts and segment sizes")
