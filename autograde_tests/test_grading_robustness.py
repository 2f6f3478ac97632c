"""One grading run of the probe class of broken and hostile submissions; each case is one test.

The class (autograde_tests/hostile_class.py) is graded once with `make grade`'s pipeline; every test
then asserts one student's points and review flag, and that the rest of the class was graded too.
"""

from __future__ import annotations

import io
import sqlite3

import nbformat
import pytest

from autograde_tests import hostile_class, probe_course
from course_lib.grading import pipeline
from course_lib.grading.sandbox import GiB, SandboxPolicy, running_as_root

pytestmark = pytest.mark.slow
NEEDS_ROOT = {"snoop", "vandal"}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = probe_course.build(tmp_path_factory.mktemp("probe-course"))
    students = hostile_class.write_class(root)
    log = io.StringIO()
    run = pipeline.GradingRun(course_root=root, jobs=2, cell_timeout=10, judge_timeout=120,
                              registry="autograde_tests.probe_registry", stream=log,
                              policy=SandboxPolicy(memory_bytes=3 * GiB))
    results = {r.student: r for r in pipeline.grade(run, ["probe"])}
    return root, students, results, log.getvalue()


def _autograded(root, student):
    return nbformat.read(root / "grading" / "autograded" / student / "probe" / "probe.ipynb", as_version=4)


def _outputs_text(notebook) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts += [output.get("text", ""), output.get("evalue", ""),
                      "\n".join(output.get("traceback", []))]
    return "\n".join(parts)


@pytest.mark.parametrize("student", sorted(hostile_class.EXPECTED))
def test_each_case_gets_its_points_and_review_flag(graded, student):
    root, students, results, log = graded
    if student in NEEDS_ROOT and not running_as_root():
        pytest.skip("the sandbox only drops privileges and hides paths when grading runs as root")
    assert set(results) == set(students), f"not graded in the same run: {set(students) - set(results)}"
    scale, ring, review = hostile_class.EXPECTED[student]
    result = results[student]
    assert result.cells.get("test_scale", 0) == scale, (student, result.cells, result.notes)
    assert result.cells.get("test_ring_pass", 0) == ring, (student, result.cells, result.notes)
    assert result.needs_review == review, (student, result.notes)


def test_deadlock_feedback_names_where_ranks_block_without_a_timeout_trace(graded):
    root = graded[0]
    html = (root / "grading" / "feedback" / "deadlock" / "probe" / "probe.html").read_text()
    assert "RanksHungError" in html and "rank 0" in html
    assert "CellTimeoutError" not in html


def test_killed_kernel_marks_the_cells_that_did_not_run(graded):
    root, _, results, _ = graded
    assert any("kernel died" in note for note in results["os_exit"].notes)
    assert "KernelDied" in _outputs_text(_autograded(root, "os_exit"))


def test_output_flood_is_capped(graded):
    root = graded[0]
    path = root / "grading" / "autograded" / "print_flood" / "probe" / "probe.ipynb"
    assert path.stat().st_size < 3_000_000
    assert "output truncated by the grader" in _outputs_text(_autograded(root, "print_flood"))


def test_isolated_recheck_explains_a_score_the_notebook_would_not(graded):
    root = graded[0]
    html = (root / "grading" / "feedback" / "patch_allclose" / "probe" / "probe.html").read_text()
    assert "IsolatedCheckFailed" in html


def test_hostile_code_finds_no_solutions_and_writes_nowhere(graded):
    if not running_as_root():
        pytest.skip("the sandbox only drops privileges and hides paths when grading runs as root")
    root, _, results, _ = graded
    assert "SNOOP found 0 files" in _outputs_text(_autograded(root, "snoop"))
    vandal = _outputs_text(_autograded(root, "vandal"))
    assert "VANDAL refused" in vandal and "VANDAL wrote" not in vandal
    full = nbformat.read(root / "grading" / "submitted" / "full" / "probe" / "probe.ipynb", as_version=4)
    assert full.cells  # still a notebook, not "vandalised"
    with sqlite3.connect(root / "grading" / "gradebook.db") as db:
        assert db.execute("select count(*) from student").fetchone()[0] == len(results)


def test_grades_csv_and_summary_cover_the_class(graded):
    root, students, _, log = graded
    rows = (root / "grading" / "grades.csv").read_text().splitlines()
    assert len(rows) == 1 + len(students)
    assert f"{len(students)} submissions graded" in log
