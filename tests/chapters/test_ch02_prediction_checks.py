"""Chapter 02's visible prediction check: it accepts the closed form and names the textbook-ring mistake."""

import math

import pytest

from course_lib.grading.checks.ch02_prediction.visible import check_gloo_prediction


def segmented(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    n = world_size
    if n == 1:
        return 0.0
    segments = math.ceil(max(math.ceil(nbytes / segment_bytes), 2 * n) / n) * n
    return 2 * segments // n * (n - 1) * (latency + nbytes / segments / bandwidth)


def textbook(nbytes, world_size, latency, bandwidth, segment_bytes=2**20):
    return 2 * (world_size - 1) * (latency + nbytes / world_size / bandwidth)


def test_the_closed_form_passes():
    check_gloo_prediction(segmented)


def test_the_textbook_ring_is_named():
    with pytest.raises(AssertionError, match="textbook ring"):
        check_gloo_prediction(textbook)


def test_a_non_number_is_refused():
    with pytest.raises(AssertionError, match="return the seconds as a number"):
        check_gloo_prediction(lambda *args, **kwargs: "fast")
