"""Chapter 02's prediction checks: the visible check accepts gloo's ring with its two segments in flight
and names the two known mistakes; the hidden check's expected time is the simulator's segmented ring,
whose model ``calibrate(segments_in_flight=2)`` fits; what the prose says gloo and torch do is read in
their sources."""

import math
import random
from pathlib import Path

import pytest
import torch

from course_lib.grading import instructor_checks
from course_lib.grading.checks.ch02_prediction.judge import GLOO_SEGMENT_BYTES, one_in_flight_time
from course_lib.grading.checks.ch02_prediction.visible import VISIBLE_CASES, check_gloo_prediction
from course_lib.sim import Link, collective_time

ch02_prediction = instructor_checks("ch02_prediction")
TORCH_C10D = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "distributed" / "c10d"


def in_flight(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    n, window = world_size, 2
    if n == 1:
        return 0.0
    segments = math.ceil(max(math.ceil(nbytes / segment_bytes), 2 * n) / n) * n
    messages = segments // n * (n - 1)
    transfer = nbytes / segments / bandwidth
    first = min(messages, window)
    return 2 * (first * (latency + transfer)
                + (messages - first) * max(transfer, (latency + transfer) / window))


def textbook(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    return 2 * (world_size - 1) * (latency + nbytes / world_size / bandwidth)


def one_at_a_time(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    n = world_size
    if n == 1:
        return 0.0
    segments = math.ceil(max(math.ceil(nbytes / segment_bytes), 2 * n) / n) * n
    return 2 * segments // n * (n - 1) * (latency + nbytes / segments / bandwidth)


def test_the_closed_form_with_two_segments_in_flight_passes():
    check_gloo_prediction(in_flight)


def test_the_textbook_ring_is_named():
    with pytest.raises(AssertionError, match="textbook ring"):
        check_gloo_prediction(textbook)


def test_one_segment_in_flight_is_named():
    with pytest.raises(AssertionError, match="one segment in flight"):
        check_gloo_prediction(one_at_a_time)


def test_a_non_number_is_refused():
    with pytest.raises(AssertionError, match="return the seconds as a number"):
        check_gloo_prediction(lambda *args, **kwargs: "fast")


def test_the_visible_values_are_the_hidden_checks_formula():
    for case, seconds in VISIBLE_CASES.items():
        assert seconds == pytest.approx(ch02_prediction.expected_time(*case), rel=1e-12, abs=1e-15), case


def test_the_visible_cases_tell_two_segments_in_flight_from_one():
    differ = [case for case in VISIBLE_CASES
              if not math.isclose(ch02_prediction.expected_time(*case), one_in_flight_time(*case))]
    assert len(differ) >= 2, differ


@pytest.mark.parametrize("seed", range(5))
def test_the_graded_time_is_the_simulators_segmented_ring_with_gloos_segments_in_flight(seed):
    """What is graded is what calibrate(segments_in_flight=2) fits and chapter 00 describes."""
    rng = random.Random(seed)
    cases = list(ch02_prediction.FIXED_CASES) + ch02_prediction._cases(rng) + ch02_prediction._far_cases(rng)
    for nbytes, n, latency, bandwidth, segment in cases:
        simulated = collective_time("all_reduce", nbytes, n, Link(latency, bandwidth), "ring",
                                    segment_bytes=segment, in_flight=ch02_prediction.GLOO_SEGMENTS_IN_FLIGHT)
        assert ch02_prediction.expected_time(nbytes, n, latency, bandwidth, segment) == pytest.approx(
            simulated, rel=1e-12, abs=1e-18)


def test_the_hidden_cases_catch_one_segment_in_flight():
    cases = ch02_prediction.FIXED_CASES + ch02_prediction._far_cases(random.Random(0))
    assert any(not math.isclose(ch02_prediction.expected_time(*c), one_in_flight_time(*c)) for c in cases)
    far = ch02_prediction._far_cases(random.Random(1))
    assert all(not math.isclose(ch02_prediction.expected_time(*c), one_in_flight_time(*c)) for c in far)


def _with_segments(count):
    """The right model with another segment count, as a student might count them."""
    def predict(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
        n = world_size
        if n == 1:
            return 0.0
        segments = count(nbytes, n, segment_bytes)
        messages = segments * (n - 1) / n
        transfer = nbytes / segments / bandwidth
        first = min(messages, 2)
        later = (messages - first) * max(transfer, (latency + transfer) / 2)
        return 2 * (first * (latency + transfer) + later)
    return predict


@pytest.mark.parametrize("count", [
    lambda nbytes, n, segment: max(math.ceil(nbytes / segment), 2 * n),              # not whole chunks
    lambda nbytes, n, segment: math.ceil(max(math.ceil(nbytes / segment), n) / n) * n,  # one a chunk
], ids=["not_rounded_to_whole_chunks", "one_segment_a_chunk"])
def test_the_fixed_cases_alone_catch_a_wrong_segment_count(count):
    """With two segments in flight a bandwidth-bound phase costs the same whatever the count, so a wrong
    count shows only where latency bounds the segments: the fixed cases hold such a case, near and far, and
    a wrong count never depends on the draw (fixtures sends_whole_tensor and off_by_one_chunk)."""
    wrong = _with_segments(count)
    for fixed in (ch02_prediction.FIXED_CASES, ch02_prediction.FIXED_FAR_CASES):
        assert any(not math.isclose(wrong(*case), ch02_prediction.expected_time(*case), rel_tol=1e-9)
                   for case in fixed), fixed


def test_torch_runs_gloos_default_algorithm_for_a_cpu_all_reduce():
    """The prose: ProcessGroupGloo's AsyncAllreduceWork calls gloo::allreduce without choosing an
    algorithm, so gloo runs ring() (gloo/allreduce.cc: UNSPECIFIED and RING both call ring()); it queues
    the work for its own threads (enqueue, runLoop)."""
    detail = (TORCH_C10D / "ProcessGroupGlooDetail.hpp").read_text()
    work = detail[detail.index("class AsyncAllreduceWork"):]
    work = work[:work.index("\n};")]
    assert "gloo::allreduce(opts);" in work and "setAlgorithm" not in work
    header = (TORCH_C10D / "ProcessGroupGloo.hpp").read_text()
    assert "void enqueue(" in header and "void runLoop(" in header
    assert GLOO_SEGMENT_BYTES == 1 << 20 == ch02_prediction.FIXED_CASES[0][-1]   # gloo's kMaxSegmentSize


def test_the_small_sizes_latencies_the_prose_counts():
    """Cell 55: the model charges a 4 KiB all-reduce 4 latencies on 2 ranks and 6 on 3 (8 segments, two in
    flight), whatever the floor a call costs."""
    for ranks, latencies in ((2, 4), (3, 6)):
        seconds = ch02_prediction.expected_time(4096, ranks, 1.0, 1e30, GLOO_SEGMENT_BYTES)
        assert seconds == pytest.approx(latencies)
    assert one_in_flight_time(4096, 3, 1.0, 1e30, GLOO_SEGMENT_BYTES) == pytest.approx(8)
