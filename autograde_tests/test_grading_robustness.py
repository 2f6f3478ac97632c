"""The hostile probe class, graded once (conftest.graded_class); each case is one test.

Every test asserts one student's points and review flag from that single run, and that the rest of
the class was graded in the same run.
"""

from __future__ import annotations

import sqlite3

import nbformat
import pytest

from autograde_tests.support import hostile_class
from conftest import skip_or_fail
from course_lib.grading.sandbox.policy import running_as_root

pytestmark = pytest.mark.slow
NEEDS_ROOT = {"snoop", "vandal"}
ROOT_ONLY = ("the sandbox only drops privileges and hides paths when grading runs as root: run the tests "
             "as root (in a container or VM) to check it")


def _autograded(root, student):
    return nbformat.read(root / "grading" / "autograded" / student / "probe" / "probe.ipynb", as_version=4)


def _feedback(root, student) -> str:
    return (root / "grading" / "feedback" / student / "probe" / "probe.html").read_text()


def _outputs_text(notebook) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts += [output.get("text", ""), output.get("evalue", ""),
                      "\n".join(output.get("traceback", []))]
    return "\n".join(parts)


@pytest.mark.parametrize("student", sorted(hostile_class.EXPECTED))
def test_each_case_gets_its_points_and_review_flag(graded_class, student):
    if student in NEEDS_ROOT and not running_as_root():
        skip_or_fail(ROOT_ONLY)
    graded = {s for (a, s) in graded_class.results if a == "probe"}
    assert graded == set(graded_class.students["probe"]), "every student of the run must be graded"
    scale, ring, review = hostile_class.EXPECTED[student]
    result = graded_class.results[("probe", student)]
    assert result.cells.get("test_scale", 0) == scale, (student, result.cells, result.notes)
    assert result.cells.get("test_ring_pass", 0) == ring, (student, result.cells, result.notes)
    assert result.needs_review == review, (student, result.notes)


def test_deadlock_feedback_names_where_ranks_block_without_a_timeout_trace(graded_class):
    html = _feedback(graded_class.root, "deadlock")
    assert "RanksHungError" in html and "rank 0" in html
    assert "CellTimeoutError" not in html


def test_killed_kernel_marks_the_cells_that_did_not_run(graded_class):
    assert any("kernel died" in note for note in graded_class.results[("probe", "os_exit")].notes)
    assert "KernelDied" in _outputs_text(_autograded(graded_class.root, "os_exit"))


def test_output_flood_is_capped(graded_class):
    path = graded_class.root / "grading" / "autograded" / "print_flood" / "probe" / "probe.ipynb"
    assert path.stat().st_size < 3_000_000
    assert "output truncated by the grader" in _outputs_text(_autograded(graded_class.root, "print_flood"))


def test_isolated_recheck_explains_a_score_the_notebook_would_not(graded_class):
    assert "IsolatedCheckFailed" in _feedback(graded_class.root, "patch_allclose")
    assert "IsolatedCheckFailed" not in _feedback(graded_class.root, "full")


def test_hostile_code_finds_no_solutions_and_writes_nowhere(graded_class):
    if not running_as_root():
        skip_or_fail(ROOT_ONLY)
    root = graded_class.root
    assert "SNOOP found 0 files" in _outputs_text(_autograded(root, "snoop"))
    vandal = _outputs_text(_autograded(root, "vandal"))
    assert "VANDAL refused" in vandal and "VANDAL wrote" not in vandal
    full = nbformat.read(root / "grading" / "submitted" / "full" / "probe" / "probe.ipynb", as_version=4)
    assert full.cells  # still a notebook, not "vandalised"
    with sqlite3.connect(root / "grading" / "gradebook.db") as db:
        students = {row[0] for row in db.execute("select id from student")}
    assert students == {student for (_, student) in graded_class.results}


def test_grades_csv_and_summary_cover_the_class(graded_class):
    rows = (graded_class.root / "grading" / "grades.csv").read_text().splitlines()
    assert len(rows) == 1 + len(graded_class.results)
    assert f"{len(graded_class.results)} submissions graded" in graded_class.log


def test_a_warning_on_stderr_is_shown_and_costs_nothing(graded_class):
    """Issue 40: a right answer that warns in the kernel and on every rank keeps its points, unflagged, and
    the feedback shows the warnings, labelled as such."""
    result = graded_class.results[("probe", "warns")]
    assert result.lost == {} and not result.needs_review, (result.lost, result.notes)
    html = _feedback(graded_class.root, "warns")
    assert "this path is deprecated" in html and "rank 0: deprecated" in html and "are warnings" in html


def test_every_point_the_probe_class_loses_has_its_reason(graded_class):
    maximum = {"test_scale": 2, "test_ring_pass": 1}
    for (assignment, student), result in graded_class.results.items():
        if assignment != "probe":
            continue
        below = {cell for cell, points in result.cells.items() if points < maximum[cell]}
        assert set(result.lost) == below, (student, result.lost)
        assert all(why.split(": ", 1)[1].strip() for why in result.lost.values()), (student, result.lost)
