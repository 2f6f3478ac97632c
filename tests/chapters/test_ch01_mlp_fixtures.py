"""Chapter 01's hidden checks on each known-wrong backward pass, run directly (no nbgrader).

Every fixture in autograde_tests/fixtures/mlp/ must earn exactly the points expected_scores.json gives
it, test cell by test cell, through the rows the exercise gives the registry; those under
graded_through_nbgrader also go through the shared grading run.
"""

import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder import fixtures

ch01 = instructor_checks("ch01_mlp")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "mlp"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell through the exercise's registry rows, and each failing cell's message."""
    points, messages = {}, {}
    for grade_id, (check, answers) in ch01.ROWS.items():
        try:
            check(*(StudentFunction(name, sources=sources) for name in answers))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch01.EXERCISE.points[grade_id]
    return points, messages


def test_the_fixture_table_lists_every_fixture_and_the_exercises_points():
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])
    assert EXPECTED["max_points"] == EXPECTED["solution"] == dict(ch01.EXERCISE.points)
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(EXPECTED["fixtures"])


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_wrong_backward_loses_exactly_its_points(fixture):
    sources = list(fixtures.load_py_fixture(FIXTURES / f"{fixture}.py").values())
    points, messages = earned_points(sources)
    assert points == EXPECTED["fixtures"][fixture], (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    if fixture == "steps_the_weights":
        assert all("in place" in message for message in messages.values()), messages
    if EXPECTED["why"][fixture].startswith("a shortcut"):  # refused, and told so plainly in every part
        assert all("RefusedCodeError" in message for message in messages.values()), messages
    if fixture == "uses_nn_linear":
        assert all("torch.set_grad_enabled" in m and "backward pass by hand" in m
                   for m in messages.values()), messages


def test_every_part_has_at_least_four_plausible_wrong_answers():
    """Per-gradient credit: each part is lost by four or more wrong answers that are not shortcuts."""
    wrong = [name for name, why in EXPECTED["why"].items() if not why.startswith("a shortcut")]
    for grade_id, points in ch01.EXERCISE.points.items():
        losers = [name for name in wrong if EXPECTED["fixtures"][name][grade_id] < points]
        assert len(losers) >= 4, (grade_id, losers)
