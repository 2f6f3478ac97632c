"""Chapter 10's hidden checks on the reference solution and on each known-wrong ring attention (no nbgrader).

Every fixture in autograde_tests/fixtures/ring_attention/ must earn exactly the points expected_scores.json
gives it, test cell by test cell, with feedback that names what went wrong; the fixtures it lists under
graded_through_nbgrader also go through the whole pipeline (autograde_tests/test_grading_chapters.py). The
shortcut that the pipeline grades is checked here too, for its message (it fails in seconds).
"""

import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.notebook_cells import SOLUTION_MARKERS, sources_by_id

ch10 = instructor_checks("ch10_ring_attention")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "ring_attention"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "10_context_parallel" / "10_context_parallel.ipynb"
# The fixtures of the forward (the backward ones and every overlap cell: test_ch10_ring_backward_fixtures.py).
OWN = {name for name in EXPECTED["fixtures"] if not name.startswith("backward_")}
CHECKED_HERE = sorted(OWN - set(EXPECTED["graded_through_nbgrader"]) | {"torch_cp"})

TEST_CELLS = {
    "test_zigzag_positions": ("zigzag_positions", ch10.check_zigzag_positions_hidden),
    "test_ring_attention_values": ("ring_attention", ch10.check_ring_attention_values_hidden),
    "test_ring_attention_causal": ("ring_attention", ch10.check_ring_attention_causal_hidden),
    "test_ring_attention_zigzag": ("ring_attention", ch10.check_ring_attention_zigzag_hidden),
    "test_ring_attention_traffic": ("ring_attention", ch10.check_ring_attention_traffic_hidden),
    "test_ring_attention_skips_masked": ("ring_attention", ch10.check_ring_attention_skips_masked_hidden),
    "test_ring_attention_stable": ("ring_attention", ch10.check_ring_attention_stable_hidden),
}
# What the feedback of a failing cell must say, per fixture: (grade_id, words).
MESSAGES = {
    "softmax_per_block": [("test_ring_attention_values", "largest difference")],
    "max_not_carried": [("test_ring_attention_causal", "the query at sequence position")],
    "local_mask_positions": [("test_ring_attention_causal", "causal"),
                             ("test_ring_attention_skips_masked", "does not count")],
    "zigzag_wrong_order": [("test_ring_attention_zigzag", "zigzag layout")],
    "no_skip": [("test_ring_attention_skips_masked", "skip the blocks whose keys all come after")],
    "holds_everything": [("test_ring_attention_traffic", "grew from")],
    "causal_keeps_blocks": [("test_ring_attention_traffic", "grew from"),
                            ("test_ring_attention_traffic", "causal")],
    "zigzag_sends_to_all": [("test_ring_attention_traffic", "one neighbour"),
                            ("test_ring_attention_traffic", "zigzag layout")],
    "broadcast_no_skip": [("test_ring_attention_skips_masked", "operations of arithmetic")],
    "unsafe_exp": [("test_ring_attention_stable", "inf or NaN")],
    "blocking_sends": [("test_ring_attention_values", "deadlock"),
                       ("test_ring_attention_values", "dist.send"),
                       ("test_ring_attention_stable", "did not finish")],
    "all_gather_kv": [("test_ring_attention_values", "dist.all_gather is not allowed")],
    "torch_cp": [("test_ring_attention_values", "PyTorch's own implementation"),
                 ("test_ring_attention_values", "torch.distributed.tensor.experimental._context_parallel")],
    "unanswered": [("test_zigzag_positions", "NotImplementedError")],
    "warns_but_right": [],   # a right answer that warns on every rank: full marks (issue 40)
    "waits_before_computing": [],   # full marks here; it loses the overlap cell
}
# Fixtures whose every run on more than one rank deadlocks (each rank blocks in dist.send before any posts a
# receive), and the seconds their runs are given instead of the checks' 30. A deadlock never finishes, so the
# checks stop it at whatever timeout they have and the points and words are the same; the shorter one need
# only let the ranks reach dist.send (well under a second), and the words asserted ("dist.send", from the
# stacks dumped at the timeout) show that they were blocked there and not merely slow.
DEADLOCKS_S = {"blocking_sends": 8}


def solution_sources() -> list[str]:
    cells = sources_by_id(SOLUTION, ch10.EXERCISE_CELLS, answers_only=True)
    return [SOLUTION_MARKERS.sub("", source) for source in cells]


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, (name, check) in TEST_CELLS.items():
        try:
            check(StudentFunction(name, sources=sources))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch10.POINTS[grade_id]
    return points, messages


def test_every_fixture_has_its_reason_and_its_message():
    assert set(EXPECTED["why"]) == set(EXPECTED["fixtures"]) and OWN == set(MESSAGES)
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(EXPECTED["fixtures"])
    assert len(EXPECTED["graded_through_nbgrader"]) <= 1


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(solution_sources())
    assert points == {g: EXPECTED["solution"][g] for g in TEST_CELLS}, messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", CHECKED_HERE)
def test_each_wrong_ring_attention_loses_exactly_its_points(fixture, monkeypatch):
    if fixture in DEADLOCKS_S:
        monkeypatch.setattr(ch10, "TIMEOUT_S", DEADLOCKS_S[fixture])
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()])
    assert points == {g: EXPECTED["fixtures"][fixture][g] for g in TEST_CELLS}, (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert "hidden test seed" in message, (grade_id, message)
    for grade_id, words in MESSAGES[fixture]:
        assert words in messages[grade_id], (fixture, grade_id, words, messages[grade_id][:2000])
