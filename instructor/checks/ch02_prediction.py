"""Hidden checks of chapter 02's prediction exercise (instructor-only): gloo's all-reduce time on links,
sizes, rank counts and segment sizes drawn at grading time, from the student's own formula.

The expected time is computed here, not in course_lib: gloo's ring (``ring()`` in gloo/allreduce.cc,
what torch's ProcessGroupGloo runs for a CPU all-reduce) with its segments and its two segments in
flight, in the alpha-beta model the notebook states. course_lib's simulator models the same ring
(``collective_time(..., segment_bytes=..., in_flight=2)``); tests/chapters/test_ch02_prediction_checks.py
holds the two equal, so that what ``calibrate(segments_in_flight=2)`` fits is what is graded.

Test cells of solutions/02_collectives/02_collectives.ipynb and what their hidden part calls:

  grade_id ``test_predict_gloo_all_reduce``  -> check_predict_hidden(predict_gloo_all_reduce)
  grade_id ``test_predict_gloo_own_formula`` -> check_predict_own_formula(predict_gloo_all_reduce)

Both run the student's function in a child under the exercise's refusal (course_lib refused).
"""

from __future__ import annotations

import math
import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch02_prediction.judge import compare_prediction
from course_lib.grading.checks.ch02_prediction.visible import FUNCTION_NAME, REFUSAL, predictions

from ._seeds import fresh_seed

POINTS = {"test_predict_gloo_all_reduce": 3, "test_predict_gloo_own_formula": 1}

# gloo/allreduce.cc, ring(): "With two operations in flight we need two offsets" (segmentOffset has 2);
# the reduce-scatter and all-gather loops issue segment i's send and receive, and wait for segment i - 2's.
GLOO_SEGMENTS_IN_FLIGHT = 2


def expected_time(nbytes, world_size, latency, bandwidth, segment_bytes) -> float:
    """Seconds of gloo's ring all-reduce in the notebook's model. Segments: ceil(S / segment), at least 2
    per chunk, rounded up to a whole number per chunk (numSegments in ring()), each S / segments bytes.
    Per phase a rank sends every segment but its own chunk's (segments (N-1)/N messages). The first
    GLOO_SEGMENTS_IN_FLIGHT of a phase each pay latency + bytes/bandwidth; each later one leaves when
    the oldest in flight arrives, so costs that shared by the segments in flight, and never less than
    its own bytes / bandwidth."""
    n, in_flight = world_size, GLOO_SEGMENTS_IN_FLIGHT
    if n == 1:
        return 0.0
    segments = math.ceil(max(math.ceil(nbytes / segment_bytes), 2 * n) / n) * n
    messages = segments // n * (n - 1)
    transfer = nbytes / segments / bandwidth
    first = min(messages, in_flight)
    later = (messages - first) * max(transfer, (latency + transfer) / in_flight)
    return 2 * (first * (latency + transfer) + later)


def _compare(got, case: tuple, where: str) -> None:
    compare_prediction(got, case, expected_time(*case), where)


# Always tried: an empty buffer, a tiny one, a segment count that must be rounded up to whole chunks (once
# where bandwidth bounds each segment and once where latency does: with segments in flight, a bandwidth-
# bound phase costs the same whatever the segment count, so only the latency-bound case shows a count not
# rounded up), and the notebook's largest size on 3 and 2 ranks over a link like the one calibrate() fits
# on a laptop (where the segments in flight change the answer).
FIXED_CASES = [(0, 5, 3e-5, 2e9, 1 << 20), (100, 7, 1e-5, 1e10, 1 << 20), (7 << 20, 3, 1e-5, 1e9, 1 << 20),
               (7 << 16, 3, 1e-3, 1e9, 1 << 16), (4 << 20, 3, 1e-4, 2e9, 1 << 20),
               (16 << 20, 2, 1e-4, 2e9, 1 << 20)]
# The same far beyond a measurement, each segment latency-bound: 2,501 segments of 256 KiB on 1,000 ranks,
# rounded up to 3,000; and 2 MB on 1,000 ranks, a chunk far below one segment, still cut in two segments.
FIXED_FAR_CASES = [(2500 * (1 << 18) + 1, 1000, 1e-4, 1e11, 1 << 18), (2_000_000, 1000, 1e-4, 1e11, 1 << 20)]


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
        _compare(got, case, f"hidden test seed {seed}")
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases")


def _far_cases(rng: random.Random) -> list[tuple]:
    """Clusters far beyond a measurement: thousands of ranks, odd segment sizes, buffers of hundreds of GB
    and buffers whose chunk per rank is smaller than one segment."""
    cases = list(FIXED_FAR_CASES)
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
        _compare(got, case, f"hidden test seed {seed}, a cluster far beyond a measurement")
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases far beyond a measurement")


EXERCISE = Exercise(
    "ch02_prediction", "02_collectives", answers=("predict_gloo_all_reduce",),
    points=POINTS, fixtures="ring", refusals=(REFUSAL,), on_ranks=False)
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_predict_gloo_all_reduce": (check_predict_hidden, ("predict_gloo_all_reduce",)),
    "test_predict_gloo_own_formula": (check_predict_own_formula, ("predict_gloo_all_reduce",)),
}
