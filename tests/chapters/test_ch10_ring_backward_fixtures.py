"""Chapter 10's overlap and backward checks on the reference and on each known-wrong answer (no nbgrader).

Every fixture in autograde_tests/fixtures/ring_attention/ must earn, in the overlap and backward cells,
exactly the points expected_scores.json gives it; the backward fixtures (backward_*) in every cell (they
answer only zigzag_positions and ring_attention_backward, so the forward's cells fail at once), or, those
in its "checked_only", in the cells listed there alone. A failing cell's feedback names what went wrong,
and an overlap failure draws the rank's calls beside a ring (or a ring backward) that overlaps.
"""

import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.notebook_cells import SOLUTION_MARKERS, sources_by_id

ch10 = instructor_checks("ch10_ring_attention")
backward = instructor_checks("ch10_ring_backward")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "ring_attention"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "10_context_parallel" / "10_context_parallel.ipynb"
NEW_CELLS = {grade_id: (names[0], check) for grade_id, (check, names) in backward.ROWS.items()}
OLD_CELLS = {grade_id: (names[0], check) for grade_id, (check, names) in ch10.ROWS.items()}
BACKWARD_FIXTURES = sorted(name for name in EXPECTED["fixtures"] if name.startswith("backward_"))
# What the feedback of a failing cell must say, per fixture: (grade_id, words).
MESSAGES = {
    "waits_before_computing": [("test_ring_attention_overlap", "a ring that overlaps"),
                               ("test_ring_attention_overlap", "wait irecv")],
    "holds_everything": [("test_ring_attention_overlap", "had no products between")],
    "backward_wrong_owner": [("test_ring_backward_dkdv", "belong to the rank that holds those keys")],
    "backward_lse_from_scratch": [("test_ring_backward_traffic", "a ring backward sends"),
                                  ("test_ring_backward_work", "saved log-sum-exp")],
    "backward_dkdv_all_reduce": [("test_ring_backward_traffic", "dist.all_reduce is not allowed")],
    "backward_torch_ring": [("test_ring_backward_dq", "_templated_ring_attention_backward"),
                            ("test_ring_backward_dq", "refuses")],
    "backward_waits_before_computing": [("test_ring_backward_overlap", "a ring backward that overlaps"),
                                        ("test_ring_backward_overlap", "had no products between")],
    "backward_gradients_wait_at_once": [("test_ring_backward_overlap", "last trip home")],
    "backward_keeps_every_block": [("test_ring_backward_memory", "kept for every block")],
}
# CI time: a fixture whose verdict can differ from the solution's only on a few cells is run on those cells
# (expected_scores.json's "checked_only") and on the world sizes they need: overlap shows on any ring of
# 3 ranks, the memory bound needs 3 and 8 (a block more per rank grows past the slack only over several).
CHECKED_ONLY = {name: cells for name, cells in EXPECTED.get("checked_only", {}).items() if name != "about"}
SIZES = {"backward_waits_before_computing": (3,), "backward_gradients_wait_at_once": (3,),
         "backward_keeps_every_block": (3, 8)}

# Fixtures whose every forward run on more than one rank deadlocks (each rank blocks in dist.send before any
# posts a receive), and the seconds the overlap check's runs are given instead of its 20. A deadlock never
# finishes, so the check stops it at whatever timeout it has and the points are the same; the shorter one
# need only let the ranks reach dist.send (well under a second). The forward's checks assert that it is
# blocked there (test_ch10_ring_attention_fixtures.py: "dist.send" in the stacks dumped at the timeout).
DEADLOCKS_S = {"blocking_sends": 8}


def solution_sources() -> list[str]:
    names = ch10.EXERCISE_CELLS + backward.EXERCISE_CELLS
    return [SOLUTION_MARKERS.sub("", source) for source in sources_by_id(SOLUTION, names, answers_only=True)]


def earned_points(sources: list[str], cells: dict) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, (name, check) in cells.items():
        try:
            check(StudentFunction(name, sources=sources))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = EXPECTED["max_points"][grade_id]
    return points, messages


def test_points_are_the_exercises_and_every_fixture_has_its_reason():
    assert {g: EXPECTED["max_points"][g] for g in NEW_CELLS} == backward.POINTS
    assert set(BACKWARD_FIXTURES).isdisjoint(EXPECTED["graded_through_nbgrader"])
    assert "waits_before_computing" not in EXPECTED["graded_through_nbgrader"]
    assert set(MESSAGES) <= set(EXPECTED["fixtures"])
    assert len(BACKWARD_FIXTURES) >= 4 and "shortcut" in EXPECTED["why"]["backward_torch_ring"]
    assert {"backward_waits_before_computing", "backward_keeps_every_block"} <= set(BACKWARD_FIXTURES)
    for fixture, cells in CHECKED_ONLY.items():     # the cells not checked earn what the solution's do
        expected = EXPECTED["fixtures"][fixture]
        assert set(cells) <= set(NEW_CELLS) and set(SIZES) == set(CHECKED_ONLY), fixture
        answered = {g for g in NEW_CELLS if g.startswith("test_ring_backward")} - set(cells)
        assert all(expected[g] == EXPECTED["solution"][g] for g in answered), fixture
        unanswered = {**OLD_CELLS, **NEW_CELLS}.keys() - answered - set(cells) - {"test_zigzag_positions"}
        assert all(expected[g] == 0 for g in unanswered), fixture     # the forward's cells: no ring_attention


@pytest.mark.slow
def test_the_solution_earns_full_marks_for_overlap_and_backward():
    points, messages = earned_points(solution_sources(), NEW_CELLS)
    assert points == {g: EXPECTED["solution"][g] for g in NEW_CELLS}, messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_fixture_earns_exactly_its_overlap_and_backward_points(fixture, monkeypatch):
    if fixture in DEADLOCKS_S:
        monkeypatch.setattr(backward, "TIMEOUT_S", DEADLOCKS_S[fixture])
    cells = {**OLD_CELLS, **NEW_CELLS} if fixture.startswith("backward_") else NEW_CELLS
    if fixture in CHECKED_ONLY:
        monkeypatch.setattr(backward, "BACKWARD_SIZES", SIZES[fixture])
        cells = {g: cells[g] for g in CHECKED_ONLY[fixture]}
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()], cells)
    assert points == {g: EXPECTED["fixtures"][fixture][g] for g in cells}, (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert "hidden test seed" in message, (grade_id, message)
    for grade_id, words in MESSAGES.get(fixture, []):
        assert words in messages[grade_id], (fixture, grade_id, words, messages[grade_id][:2000])
