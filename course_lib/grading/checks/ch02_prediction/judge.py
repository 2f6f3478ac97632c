"""The student-facing side of chapter 02's prediction checks: a predicted all-reduce time against the
alpha-beta closed form, with a message naming the case and the textbook ring when that is what came.
"""

from __future__ import annotations

import math

from course_lib.sim import Link, collective_time

FUNCTION_NAME = "predict_gloo_all_reduce"
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
