"""The hostile probe class, graded once (conftest.graded_class); each case is one test.

Every test asserts one student's points and review flag from that single run, and that the rest of
the class was graded in the same run.
"""

from __future__ import annotations

import glob
import os
import sqlite3

import nbformat
import pytest

from autograde_tests.support import hostile_class
from conftest import skip_or_fail
from course_lib.grading.sandbox.policy import running_as_root

pytestmark = pytest.mark.slow
NEEDS_ROOT = {"snoop", "vandal", "neighbour"}
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
    # a refused id (hostile_class.REFUSED) is scored 0 in the results and grades.csv, never in the gradebook
    assert students == {student for (_, student) in graded_class.results} - hostile_class.REFUSED


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


def test_a_forger_that_neutralises_the_tests_scores_what_its_answer_deserves(graded_class):
    # the tests ran as `pass` and a lone surrogate was sent: the notebook is still written, so the
    # judge re-checks it (a registered cell with no verdict would score 0 anyway)
    notebook = _autograded(graded_class.root, "forger")
    assert "IsolatedCheckFailed" in _feedback(graded_class.root, "forger")
    assert "\ud800" not in _outputs_text(notebook)


def test_output_to_the_kernels_own_stdout_and_forged_log_lines_change_nothing(graded_class):
    # 50 MB to the kernel's original stdout and stderr went to a capped file, not to nbgrader's log (nor
    # the grading parent's memory); log lines and an error named as the grader's own are the student's
    notes = " ".join(graded_class.results[("probe", "flood_and_forge")].notes)
    assert "graded twice" not in notes and "busy" not in notes and "nbgrader could not" not in notes
    names = {output.get("ename") for cell in _autograded(graded_class.root, "flood_and_forge").cells
             for output in cell.get("outputs", [])}
    assert "GradingMachineBusy (raised by the notebook's code)" in names and "GradingMachineBusy" not in names


def _processes_left(uids: range) -> list[str]:
    """Live processes run by one of uids or named as the hostile daemon (zombies wait for their parent)."""
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            name = open(f"/proc/{pid}/comm").read().strip()
            owner = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] not in "ZX" and (owner in uids or name == hostile_class.DAEMON_NAME):
            left.append(f"{pid} {name} uid {owner}")
    return left


def test_no_process_of_a_sandbox_uid_outlives_the_run(graded_class):
    if not running_as_root():
        skip_or_fail(ROOT_ONLY)
    assert graded_class.sandbox_uids
    # the daemon re-forked every 50 ms from the kernel and from the ranks, in the notebook and the judge
    assert _processes_left(graded_class.sandbox_uids) == []


def test_the_network_and_tmp_are_the_students_own(graded_class):
    if not running_as_root():
        skip_or_fail(ROOT_ONLY)
    text = _outputs_text(_autograded(graded_class.root, "neighbour"))
    assert "NEIGHBOUR refused" in text and "reached" not in text
    assert "NEIGHBOUR left a file in /tmp" in text   # in its own /tmp, which went with it
    left = [path for folder in ("/tmp", "/var/tmp", "/dev/shm")
            for path in glob.glob(f"{folder}/{hostile_class.LEFTOVER}-*")]
    assert left == []


def test_student_text_that_stopped_the_class_costs_its_student_alone(graded_class):
    """Issue 53: a verdict holding a lone surrogate, "\\ud800" in a notebook's JSON, a file name that is not
    UTF-8, a folder name that is no student id: each student is graded (or refused, scored 0 with the
    reason) and the class beside them is graded in full."""
    results = graded_class.results
    assert results[("probe", "full")].lost == {} and not results[("probe", "full")].needs_review
    assert results[("probe", "surrogate_error")].lost["test_scale"].startswith("0/2")
    notes = {student: " ".join(results[("probe", student)].notes) for student in ("bad_file_name", "Zoë")}
    assert "«notes-\ufffd.txt» was left out" in notes["bad_file_name"]
    assert "«Zoë» is not usable as a folder name" in notes["Zoë"]
    rows = (graded_class.root / "grading" / "grades.csv").read_text(encoding="utf-8")
    assert "Zoë" in rows and "\ufffd" in rows


def test_no_student_text_or_name_writes_a_graders_note(graded_class):
    """Issue 53: an exception the student names RanksHungError writes no deadlock note; a kernel whose idle
    status is swallowed is not "a machine too busy" and is not graded twice with twice the budget."""
    forged = graded_class.results[("probe", "forged_hang")]
    assert not forged.needs_review and not any("deadlock" in note for note in forged.notes), forged.notes
    assert "deadlock detected" not in _feedback(graded_class.root, "forged_hang")
    silent = " ".join(graded_class.results[("probe", "silent_kernel")].notes)
    assert "stopped reporting back" in silent
    assert "graded twice" not in silent and "busy" not in silent
    deadlock = " ".join(graded_class.results[("probe", "deadlock")].notes)
    assert "the ranks deadlocked (the isolated re-check stopped them" in deadlock


def test_no_secret_of_the_grader_reaches_the_code_that_runs_the_answer(graded_class):
    """Issue 53: the answer scanned its own memory (initial environment block, stack) for the grader's
    token, in the kernel and in the judge's child, to raise it into its feedback: it found none; and it
    read the course's grades.csv export."""
    if not running_as_root():
        skip_or_fail(ROOT_ONLY)
    student = "reads_the_graders_secret"
    result = graded_class.results[("probe", student)]
    seen = [_feedback(graded_class.root, student), _outputs_text(_autograded(graded_class.root, student)),
            " ".join(result.notes), " ".join(result.lost.values())]
    assert hostile_class.GRADER_SECRET_VALUE not in "\n".join(seen)
    assert "found INSTRUCTOR_TOKEN" not in "\n".join(seen)
    # nor an export beside the course: the grades.csv `nbgrader export` once wrote there is hidden (empty,
    # or not there at all where the course lies in /tmp, which the sandbox does not show)
    assert "EXPORT reads ''" in seen[1] or "EXPORT refused" in seen[1], seen[1]
    assert hostile_class.EXPORTED_GRADE not in "\n".join(seen)


def test_the_hidden_checks_are_out_of_reach_of_the_answer(graded_class):
    """Issue 53: the kernel runs no hidden check and cannot read their folder; the judge's child, forked
    from a judge that holds them, has the folder hidden and refuses their code when the answer calls it."""
    if not running_as_root():
        skip_or_fail(ROOT_ONLY)
    student = "peeks_at_hidden_checks"
    text = _outputs_text(_autograded(graded_class.root, student))
    assert "PEEK sees nothing" in text and "PEEK sees the hidden check" not in text
    assert "the grader's hidden checks" in graded_class.results[("probe", student)].lost["test_scale"]


def test_the_grading_parent_does_no_students_work_past_its_limits(graded_class):
    """Issue 53: widget state stays under the output cap (nbgrader held 1.3 GB for 300 MB of it, and the
    parent read that notebook back), an answer cell over 256 KiB is not parsed (quadratic before), and a
    submission over 20 MiB is refused unread (the parent held every file for the whole run)."""
    root = graded_class.root
    widgets = root / "grading" / "autograded" / "widget_flood" / "probe" / "probe.ipynb"
    assert widgets.stat().st_size < 3_000_000   # 11 MB of widget state and Output widget prints, capped
    assert "widgets' state" in _outputs_text(_autograded(root, "widget_flood"))
    long_answer = graded_class.results[("probe", "long_answer")].lost["test_scale"]
    assert "over the grader's limit of 262144" in long_answer
    oversized = graded_class.results[("probe", hostile_class.OVERSIZED)]
    assert any("over the grader's limit of 20 MiB" in note for note in oversized.notes)
    assert not (root / "grading" / "autograded" / hostile_class.OVERSIZED).exists()
