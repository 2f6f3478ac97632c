"""Visible checks of chapter 02's prediction exercise: gloo's all-reduce time from the alpha-beta model.

The visible cases carry their expected seconds as numbers: the formula that gives them is the hidden
check's (the instructor's ch02_prediction checks, which a student does not have), and the course's
tests/chapters/test_ch02_prediction_checks.py holds these numbers to it.
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


# (nbytes, world_size, latency, bandwidth, segment_bytes) -> seconds gloo's ring takes in the model.
# On 2 ranks and 4 KiB a phase has only 2 segments to send, so the segments in flight change nothing
# there; on the other two they do.
VISIBLE_CASES = {(4096, 2, 50e-6, 1e9, GLOO_SEGMENT_BYTES): 0.000204096,
                 (64 << 20, 2, 50e-6, 1e9, GLOO_SEGMENT_BYTES): 0.067308864,
                 (3 << 20, 4, 20e-6, 2e9, GLOO_SEGMENT_BYTES): 0.002439296,
                 (100, 1, 50e-6, 1e9, GLOO_SEGMENT_BYTES): 0.0}


def predictions(predict, cases, where: str) -> list:
    """The student's predictions for ``cases``, computed in a child under the exercise's refusal."""
    try:
        return map_isolated(predict, cases, name=FUNCTION_NAME, timeout=30, refusal=REFUSAL)
    except IsolatedCallError as error:
        raise AssertionError(f"{FUNCTION_NAME} failed on a {where}: {error}") from None


def check_gloo_prediction(predict) -> None:
    """Visible test: the prediction matches the model on a few cases (one is 1 rank)."""
    cases = list(VISIBLE_CASES)
    for got, case in zip(predictions(predict, cases, "visible case"), cases, strict=True):
        compare_prediction(got, case, VISIBLE_CASES[case], "visible case")
    print(f"{FUNCTION_NAME}: right on {len(cases)} visible cases; the hidden tests draw new links, "
          "sizes, rank counts and segment sizes")
