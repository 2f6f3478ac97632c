"""Chapter 03's hidden checks on the reference DDP and on the known-wrong DDPs (no nbgrader).

Every fixture in autograde_tests/fixtures/ddp/ must earn exactly the points expected_scores.json gives
it, test cell by test cell (those it lists as graded_through_nbgrader: in autograde_tests/
test_grading_chapters.py, through the whole pipeline); the solution's own DDP cell must earn full marks.
Answers run after the release's own import lines, as the judge runs them; a shortcut's feedback names
what the exercise refused.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.notebook_cells import SOLUTION_MARKERS, lesson_imports

ch03_ddp = instructor_checks("ch03_ddp")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "ddp"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
CHECKED_HERE = sorted(set(EXPECTED["fixtures"]) - set(EXPECTED["graded_through_nbgrader"]))
SOLUTION = ROOT / "solutions" / "03_data_parallel" / "03_data_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "03_data_parallel" / "03_data_parallel.ipynb"
EXERCISE_CELL = "ddp"

TEST_CELLS = {
    "test_ddp_broadcast": ch03_ddp.check_ddp_broadcast_hidden,
    "test_ddp_gradients": ch03_ddp.check_ddp_gradients_hidden,
    "test_ddp_frozen_and_tied": ch03_ddp.check_ddp_frozen_and_tied_hidden,
    "test_ddp_unused_parameters": ch03_ddp.check_ddp_unused_hidden,
    "test_ddp_overlap": ch03_ddp.check_ddp_overlap_hidden,
    "test_ddp_buckets": ch03_ddp.check_ddp_buckets_hidden,
    "test_ddp_overlap_buckets": ch03_ddp.check_ddp_overlap_buckets_hidden,
    "test_ddp_one_rank": ch03_ddp.check_ddp_one_rank_hidden,
}


def solution_source() -> str:
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    [cell] = [c for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_CELL]
    return SOLUTION_MARKERS.sub("", cell.source)


def earned_points(source: str) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    prelude = lesson_imports(RELEASE)
    # as the judge does: the lesson's imports once here, so every forked rank finds them imported
    exec(compile(prelude, "<lesson imports>", "exec"), {"__name__": "lesson_imports"})
    for grade_id, check in TEST_CELLS.items():
        try:
            check(StudentFunction("DDP", sources=[source], prelude=prelude))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch03_ddp.POINTS[grade_id]
    return points, messages


def test_points_table_matches_the_notebook_and_the_fixture_table():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == ch03_ddp.POINTS == EXPECTED["max_points"]
    assert set(TEST_CELLS) == set(graded)
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(EXPECTED["fixtures"])


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(solution_source())
    assert points == EXPECTED["solution"], messages


# A DDP that deadlocks never finishes, so its points and words do not depend on the timeout: its runs get
# 8 s instead of the checks' 15.
DEADLOCKS_S = {"unused_deadlock": 8}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", CHECKED_HERE)
def test_each_wrong_ddp_loses_exactly_its_points(fixture, monkeypatch):
    if fixture in DEADLOCKS_S:
        monkeypatch.setattr(ch03_ddp, "TIMEOUT_S", DEADLOCKS_S[fixture])
    points, messages = earned_points((FIXTURES / f"{fixture}.py").read_text())
    assert points == EXPECTED["fixtures"][fixture], messages
    if fixture == "unused_deadlock":   # stopped after the timeout, and the student is told so
        assert any("did not finish on 2 ranks" in message for message in messages.values()), messages


# What each shortcut's feedback must name: what the exercise refused.
REFUSED = {"torch_ddp": "DistributedDataParallel", "course_helper": "import course_lib.sim"}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(REFUSED))
def test_a_shortcut_is_told_what_was_refused(fixture):
    _, messages = earned_points((FIXTURES / f"{fixture}.py").read_text())
    failed = list(messages.values())
    assert failed, f"{fixture} lost no points"
    assert all(REFUSED[fixture] in m and "which this exercise refuses" in m for m in failed), failed
