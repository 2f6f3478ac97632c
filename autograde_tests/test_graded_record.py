"""`make grade` grades only new or changed submissions (graded_record): what a fingerprint covers, and when
a submission is kept. The term that relies on it (a resubmission graded alone) is test_instructor_term.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nbgrader.api import Gradebook

from course_lib.grading.autograder import graded_record
from course_lib.grading.settings import CourseSettings


def _submission(folder: Path, notebook: str = "{}") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "hw.ipynb").write_text(notebook)
    (folder / "timestamp.txt").write_text("2026-12-07 10:00:00.000000 UTC")
    return folder


def test_a_fingerprint_changes_with_the_files_their_time_and_the_grading_key(tmp_path):
    folder = _submission(tmp_path / "ann")
    first = graded_record.fingerprint(folder, "key")
    (folder / ".ipynb_checkpoints").mkdir()   # what the grader does not read changes nothing
    (folder / ".hidden").write_text("x")
    assert graded_record.fingerprint(folder, "key") == first
    assert graded_record.fingerprint(folder, "another key") != first
    (folder / "timestamp.txt").write_text("2026-12-08 10:00:00.000000 UTC")   # submitted again
    assert graded_record.fingerprint(folder, "key") != first
    (folder / "big.bin").write_bytes(b"\0" * (21 * 2**20))   # over the grader's limit: refused, never kept
    assert graded_record.fingerprint(folder, "key") == ""


def test_the_grading_key_changes_with_the_source_the_hidden_checks_and_the_cell_limit(tmp_path):
    source, checks = tmp_path / "solutions" / "hw", tmp_path / "checks"
    _submission(source)
    checks.mkdir()
    (checks / "hw.py").write_text("def check(): pass\n")
    course = CourseSettings(course_id="c", cell_timeout=60, hidden_checks=(checks,))
    key = graded_record.grading_key(source, course, "hw")
    (checks / "hw.py").write_text("def check(): assert False\n")   # the instructor fixed a check
    fixed = graded_record.grading_key(source, course, "hw")
    assert fixed != key
    (source / "hw.ipynb").write_text('{"fixed": "a hidden test"}')
    assert graded_record.grading_key(source, course, "hw") != fixed
    longer = CourseSettings(course_id="c", cell_timeout=60, cell_timeouts={"hw": 300},
                            hidden_checks=(checks,))
    assert graded_record.grading_key(source, longer, "hw") != graded_record.grading_key(source, course, "hw")


def test_a_submission_is_kept_only_while_unchanged_and_its_grades_are_still_there(tmp_path):
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"   # alembic
    grading = tmp_path / "grading"
    url = f"sqlite:///{grading / 'gradebook.db'}"
    grading.mkdir()
    with Gradebook(url) as gb:
        gb.add_assignment("hw")
        for student in ("ann", "bob", "cat"):
            gb.add_student(student)
            gb.add_submission("hw", student)
    for student in ("ann", "bob"):
        (grading / "autograded" / student / "hw").mkdir(parents=True)
    prints = {"ann": "a", "bob": "b", "cat": "c", "dan": "d"}
    for student, print_ in prints.items():
        graded_record.mark_graded(grading, "hw", student, print_)
    now = {**prints, "bob": "b, resubmitted"}
    # ann: unchanged; bob: changed; cat: no autograded notebooks any more; dan: not in the gradebook
    assert graded_record.unchanged(grading, url, "hw", now) == ["ann"]
    (grading / "graded.json").write_text("{damaged")   # a damaged record grades everyone again
    assert graded_record.unchanged(grading, url, "hw", now) == []
