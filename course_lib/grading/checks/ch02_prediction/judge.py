"""The student-facing side of chapter 02's prediction checks: is the answer a number, and the message
naming the case, with the two known mistakes named when that is what came. The expected time itself is
the hidden check's (the instructor's ch02_prediction checks, which a student does not have); the visible
check holds only its values on the visible cases.
"""

from __future__ import annotations

import math

from course_lib.sim import Link, collective_time

FUNCTION_NAME = "predict_gloo_all_reduce"
GLOO_SEGMENT_BYTES = 1 << 20          # gloo's kMaxSegmentSize (course_lib.real.GLOO_SEGMENT_BYTES)


def textbook_time(nbytes, world_size, latency, bandwidth) -> float:
    """The textbook ring of section 2, one message per chunk: the mistake the check names."""
    return collective_time("all_reduce", nbytes, world_size, Link(latency, bandwidth), "ring")


def one_in_flight_time(nbytes, world_size, latency, bandwidth, segment_bytes) -> float:
    """gloo's segments, each waiting for the one before (the exercise's answer until 2026-11): the other
    mistake the check names."""
    return collective_time("all_reduce", nbytes, world_size, Link(latency, bandwidth), "ring",
                           segment_bytes=segment_bytes, in_flight=1)


MISTAKES = {"that is the textbook ring, one message per chunk: gloo cuts chunks into segments":
            lambda case: textbook_time(*case[:4]),
            "that is one segment in flight, each waiting for the one before: count how many gloo's ring() "
            "keeps travelling": lambda case: one_in_flight_time(*case)}


def spelled(case: tuple) -> str:
    nbytes, world_size, latency, bandwidth, segment_bytes = case
    return (f"nbytes={nbytes:g}, world_size={world_size}, latency={latency:g}, bandwidth={bandwidth:g}, "
            f"segment_bytes={segment_bytes:g}")


def compare_prediction(got, case: tuple, expected: float, where: str) -> None:
    """Raise AssertionError naming the case when ``got`` is not ``expected`` (seconds), and the mistake
    when it is one of ``MISTAKES``."""
    if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
        raise AssertionError(f"{FUNCTION_NAME}({spelled(case)}) returned {got!r}: return the seconds as a "
                             f"number ({where})")
    if not math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-15):
        hint = "".join(f" ({why})" for why, mistake in MISTAKES.items()
                       if math.isclose(got, mistake(case), rel_tol=1e-9))
        raise AssertionError(f"{FUNCTION_NAME}({spelled(case)}) returned {got:.6g} s, "
                             f"expected {expected:.6g} s{hint} ({where})")
