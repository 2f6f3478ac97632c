"""Visible checks of chapter 02's prediction exercise: gloo's all-reduce time from the alpha-beta model.

The reference is the simulator's closed form (``collective_time`` with gloo's segments, one in flight).
"""

from __future__ import annotations

import math

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.refusals import Refusal
from course_lib.sim import Link, collective_time

FUNCTION_NAME = "predict_gloo_all_reduce"
# The formula is the exercise: the course's simulator (which has it) may not compute it for the student.
REFUSAL = Refusal(FUNCTION_NAME, why="write the alpha-beta formula yourself, from math alone")
GLOO_SEGMENT_BYTES = 1 << 20          # gloo's kMaxSegmentSize (course_lib.dist.GLOO_SEGMENT_BYTES)


def reference_time(nbytes, world_size, latency, bandwidth, segment_bytes=GLOO_SEGMENT_BYTES) -> float:
    """The closed form the exercise asks for, from the simulator (segments one after the other)."""
    return collective_time("all_reduce", nbytes, world_size, Link(latency, bandwidth), "ring",
                           segment_bytes=segment_bytes, in_flight=1)


def _textbook(nbytes, world_size, latency, bandwidth) -> float:
    return collective_time("all_reduce", nbytes, world_size, Link(latency, bandwidth), "ring")


def compare_prediction(got, case: tuple, where: str) -> None:
    """Raise AssertionError naming the case when ``got`` is not the closed form of ``case``."""
    nbytes, world_size, latency, bandwidth, segment_bytes = case
    expected = reference_time(*case)
    spelled = (f"nbytes={nbytes:g}, world_size={world_size}, latency={latency:g}, bandwidth={bandwidth:g}, "
               f"segment_bytes={segment_bytes:g}")
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        raise AssertionError(f"{FUNCTION_NAME}({spelled}) returned {got!r}: return the seconds as a number "
                             f"({where})")
    if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-15):
        textbook = _textbook(nbytes, world_size, latency, bandwidth)
        hint = (" (that is the textbook ring, one message per chunk: gloo cuts chunks into segments)"
                if math.isclose(got, textbook, rel_tol=1e-9) else "")
        raise AssertionError(f"{FUNCTION_NAME}({spelled}) returned {got:.6g} s, expected {expected:.6g} s"
                             f"{hint} ({where})")


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
