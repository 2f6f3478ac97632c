"""Chapter 09's hidden checks on the reference answers and on the known-wrong ones (no nbgrader).

Each fixture in autograde_tests/fixtures/checkpoint/ answers the cells its functions name, over the
solution's other cells; it must earn exactly the points expected_scores.json gives it, test cell by test
cell. Answers run as the judge runs them: the submitted cells after the release's own import lines. A
check whose functions a fixture leaves as the solution's is not run again for it (the solution's own test
runs it). The fixtures sent through nbgrader (graded_through_nbgrader) are graded by
autograde_tests/test_grading_chapters.py instead; the shortcut's refusal is checked here too.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder import fixtures
from course_lib.grading.autograder.judge import load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings
from course_lib.notebook_cells import lesson_imports

ch09 = instructor_checks("ch09_checkpoint")
CHECKS = load_registry(read_settings(CODE_ROOT).registry)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "checkpoint"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "09_on_the_cluster" / "09_on_the_cluster.ipynb"
RELEASE = ROOT / "notebooks" / "09_on_the_cluster" / "09_on_the_cluster.ipynb"
CHECKED_HERE = sorted(set(EXPECTED["fixtures"]) - set(EXPECTED["graded_through_nbgrader"]))
ASSIGNMENT = "09_on_the_cluster"


def _solution() -> dict[str, str]:
    return fixtures.solution_sources(nbformat.read(str(SOLUTION), as_version=4))


def earned_points(answers: dict[str, str], grade_ids) -> tuple[dict, dict]:
    """Points per test cell (of ``grade_ids``) for the solution's cells with ``answers`` over them."""
    sources, prelude = list({**_solution(), **answers}.values()), lesson_imports(RELEASE)
    points, messages = {}, {}
    for grade_id in grade_ids:
        entry = CHECKS[(ASSIGNMENT, grade_id)]
        students = [StudentFunction(name, sources=sources, prelude=prelude) for name in entry.functions]
        try:
            getattr(ch09, entry.check.split(":")[1])(*students)
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch09.POINTS[grade_id]
    return points, messages


def test_points_table_matches_the_notebook_the_registry_and_the_fixture_table():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == ch09.POINTS == EXPECTED["max_points"] == EXPECTED["solution"]
    assert {key for key in CHECKS if key[0] == ASSIGNMENT} == {(ASSIGNMENT, g) for g in graded}
    names = sorted(EXPECTED["fixtures"])
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == names == sorted(EXPECTED["why"])
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(names)


def test_the_grading_paragraph_states_the_notebooks_points():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    text = " ".join(" ".join(cell.source for cell in cells).split())
    stated = {"test_checkpoint_round_trip": "**Round trip** ({} points)",
              "test_checkpoint_atomic": "**Atomic** ({})",
              "test_resume_after_sigkill": "**Resume after SIGKILL** ({})",
              "test_resume_after_sigterm": "**SIGTERM** ({})",
              "test_resume_on_new_world_size": "**New world size** ({})",
              "test_checkpoint_durable": "**Durable** ({})"}
    for grade_id, phrase in stated.items():
        assert phrase.format(ch09.POINTS[grade_id]) in text, (grade_id, phrase)


def test_each_fixture_answers_only_answer_cells_and_each_shortcut_uses_course_lib():
    answer_ids = set(_solution())
    for path in FIXTURES.glob("*.py"):
        assert set(fixtures.load_py_fixture(path)) <= answer_ids, path.name
    assert "course_lib" in (FIXTURES / "course_lib_shortcut.py").read_text()


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points({}, ch09.POINTS)
    assert points == EXPECTED["solution"], messages


def _depends_on(grade_id: str, answers: dict) -> bool:
    """Whether the test cell's check runs any of ``answers`` (train runs save and load too)."""
    names = set(CHECKS[(ASSIGNMENT, grade_id)].functions)
    return bool(names & set(answers)) or ("train" in names and bool(set(answers) & STORAGE))


STORAGE = {"save_checkpoint", "load_checkpoint"}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", CHECKED_HERE)
def test_each_wrong_answer_loses_exactly_its_points(fixture):
    answers = fixtures.load_py_fixture(FIXTURES / f"{fixture}.py")
    run_here = [grade_id for grade_id in ch09.POINTS if _depends_on(grade_id, answers)]
    limited = EXPECTED.get("checked_only", {}).get(fixture)     # CI time: the parts a fixture can change
    run_here = [grade_id for grade_id in run_here if limited is None or grade_id in limited]
    points, messages = earned_points(answers, run_here)
    expected = EXPECTED["fixtures"][fixture]
    assert points == {grade_id: expected[grade_id] for grade_id in run_here}, messages
    skipped = set(ch09.POINTS) - set(run_here)
    assert all(expected[grade_id] == ch09.POINTS[grade_id] for grade_id in skipped), (fixture, skipped)


@pytest.mark.slow
def test_the_shortcut_scores_nothing_and_its_feedback_names_the_refusal():
    answers = fixtures.load_py_fixture(FIXTURES / "course_lib_shortcut.py")
    points, messages = earned_points(answers, ["test_checkpoint_round_trip", "test_resume_after_sigterm"])
    assert points == {"test_checkpoint_round_trip": 0, "test_resume_after_sigterm": 0}, messages
    for message in messages.values():
        assert "course_lib" in message and "refuses" in message, message
