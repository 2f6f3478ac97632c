"""A late submission carries its time and the course's late penalty into the class gradebook, grades.csv
and `nbgrader export` (fast: gradebooks built with nbgrader's API, the merge `make grade` runs on them).

The time is the one the grader wrote (`timestamp.txt`: TrustedCollect's st_ctime or the zip's arrival),
which `nbgrader autograde` records in the student's private gradebook; the penalty is nbgrader's own
`AssignLatePenalties`, as the course's nbgrader_config.py sets it. The whole way (the documented due date
command on a fresh course, the exchange, `make grade`'s pipeline, the feedback, `nbgrader export`) is
`test_exchange.py::test_release_fetch_submit_collect_grade_and_feedback`.
"""

from __future__ import annotations

import csv
import os
import shutil
import sys
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.plugins import CsvExportPlugin

from course_lib.grading.autograder import extensions, report, zip_times
from course_lib.grading.autograder.gradebook_merge import export_rows, merge_student, read_autograded_scores

DUE = datetime(2026, 1, 1, 0, 0)
LATE = datetime(2026, 12, 7, 9, 30)
ON_TIME = datetime(2025, 12, 31, 23, 0)
HALF_OFF = '''
from nbgrader.plugins import LateSubmissionPlugin

class HalfOff(LateSubmissionPlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        return score / 2
'''


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A gradebook holding assignment hw (one notebook, one 3-point test cell), made once: nbgrader makes
    a new gradebook by running `alembic` (from PATH: the one beside this Python), seconds each time."""
    path = tmp_path_factory.mktemp("template") / "gradebook.db"
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
    with Gradebook(f"sqlite:///{path}") as gb:
        gb.add_assignment("hw")
        gb.add_notebook("hw", "hw")
        gb.add_grade_cell("test_it", "hw", "hw", max_score=3, cell_type="code")
    return path


def _private_gradebook(template: Path, folder: Path, received: datetime | None) -> str:
    """What `nbgrader autograde` leaves in a student's private course (whose template gradebook has no due
    date: the class gradebook holds it): 3/3, received at ``received``."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, folder / "private.db")
    url = f"sqlite:///{folder / 'private.db'}"
    with Gradebook(url) as gb:
        gb.add_student("ada")
        with warnings.catch_warnings():   # nbgrader's own autoflush warning, as in merge_student
            warnings.simplefilter("ignore")
            gb.add_submission("hw", "ada", timestamp=received)
        gb.find_grade("test_it", "hw", "hw", "ada").auto_score = 3.0
        gb.db.commit()
    return url


def _course(template: Path, folder: Path, config: str = "") -> str:
    """A course whose nbgrader_config.py says ``config``, its class gradebook holding hw's due date."""
    (folder / "course" / "grading").mkdir(parents=True)
    shutil.copy(template, folder / "course" / "grading" / "gradebook.db")
    url = f"sqlite:///{folder / 'course' / 'grading' / 'gradebook.db'}"
    (folder / "course" / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.CourseDirectory.db_url = {url!r}\n{config}\n")
    with Gradebook(url) as gb:
        gb.update_or_create_assignment("hw", duedate=DUE)
    return url


def _merge(template: Path, folder: Path, class_url: str, received: datetime | None):
    scores = read_autograded_scores(_private_gradebook(template, folder, received), "hw", "ada")
    assert scores.timestamp == received
    return merge_student(class_url, "hw", "ada", scores, set(), review_all=False)


def test_a_late_submission_carries_its_time_and_the_zero_penalty_into_the_gradebook_csv_and_export(
        template, tmp_path):
    url = _course(template, tmp_path, 'c.LateSubmissionPlugin.penalty_method = "zero"')
    merged = _merge(template, tmp_path, url, LATE)
    assert (merged.raw_score, merged.late_penalty, merged.score) == (3.0, 3.0, 0.0)
    with Gradebook(url) as gb:
        submission = gb.find_submission("hw", "ada")
        assert (submission.timestamp, submission.late_submission_penalty) == (LATE, 3.0)
    report.write_grades_csv(tmp_path / "grades.csv", export_rows(url, ["hw"]), {})
    with (tmp_path / "grades.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert {k: row[k] for k in ("duedate", "timestamp", "raw_score", "late_submission_penalty", "score")} == \
        {"duedate": str(DUE), "timestamp": str(LATE), "raw_score": "3.0", "late_submission_penalty": "3.0",
         "score": "0.0"}
    with Gradebook(url) as gb:   # what `nbgrader export` runs (the round trip in test_exchange.py runs it)
        CsvExportPlugin(to=str(tmp_path / "export.csv")).export(gb)
    with (tmp_path / "export.csv").open() as handle:
        exported = next(csv.DictReader(handle))
    assert {k: exported[k] for k in ("timestamp", "raw_score", "late_submission_penalty", "score")} == \
        {"timestamp": str(LATE), "raw_score": "3.0", "late_submission_penalty": "3.0", "score": "0.0"}


def test_on_time_with_no_time_or_with_penalty_none_costs_nothing(template, tmp_path):
    zero = 'c.LateSubmissionPlugin.penalty_method = "zero"'
    for name, received in (("on_time", ON_TIME), ("no_time", None)):
        url = _course(template, tmp_path / name, zero)
        assert _merge(template, tmp_path / name, url, received).late_penalty == 0.0, name
    none = _course(template, tmp_path / "none")   # nbgrader's default: 'none'
    assert _merge(template, tmp_path / "none", none, LATE).score == 3.0
    with Gradebook(none) as gb:
        assert gb.find_submission("hw", "ada").timestamp == LATE   # recorded even when it costs nothing


def test_a_plugin_class_sets_the_penalty_and_an_extension_lifts_it(template, tmp_path, monkeypatch):
    (tmp_path / "half_off.py").write_text(HALF_OFF)
    monkeypatch.syspath_prepend(str(tmp_path))
    url = _course(template, tmp_path, 'c.AssignLatePenalties.plugin_class = "half_off.HalfOff"')
    assert _merge(template, tmp_path, url, LATE).score == 1.5
    said = extensions.grant(tmp_path / "course" / "grading", "hw", "ada", days=365)   # make extend
    assert said.startswith("ada has 365 days more on hw: due 2027-01-01 00:00:00 UTC"), said
    scores = read_autograded_scores(f"sqlite:///{tmp_path / 'private.db'}", "hw", "ada")
    again = merge_student(url, "hw", "ada", scores, set(), review_all=False)
    assert (again.late_penalty, again.score) == (0.0, 3.0)
    extensions.grant(tmp_path / "course" / "grading", "hw", "ada")   # taken back: the penalty again
    assert merge_student(url, "hw", "ada", scores, set(), review_all=False).score == 1.5


def test_a_bad_penalty_setting_names_the_file_to_fix(template, tmp_path):
    url = _course(template, tmp_path, 'c.LateSubmissionPlugin.penalty_method = "half"')
    with pytest.raises(ValueError, match="penalty_method in .*nbgrader_config.py"):
        _merge(template, tmp_path, url, LATE)


def test_an_lms_late_tag_decides_where_the_zips_time_disagrees_and_counts_the_extension(template, tmp_path):
    """c.CourseGrading.lms_late_tag (zip_times): Canvas's _LATE in a name makes a zip late, its absence on
    time, whatever the file's time says; where they agree, the file's time stands."""
    _course(template, tmp_path)   # hw due DUE
    grading = tmp_path / "course" / "grading"

    def received(name: str, file_time: datetime, tag: str | None = "_LATE") -> datetime:
        archive = tmp_path / name
        archive.write_bytes(b"")
        stamp = file_time.replace(tzinfo=UTC).timestamp()
        os.utime(archive, (stamp, stamp))
        return zip_times.received(archive, grading, "hw", "ada", tag).replace(tzinfo=None)

    assert received("ada_LATE_1_2_hw.zip", ON_TIME) == DUE + timedelta(seconds=1)   # the LMS says late
    assert received("ada_LATE_1_2_hw.zip", LATE) == LATE                           # both say late: its days
    assert received("ada_1_2_hw.zip", LATE) == DUE                                 # the LMS says on time
    assert received("ada_LATE_1_2_hw.zip", ON_TIME, tag=None) == ON_TIME            # no setting: the file's
    extensions.grant(grading, "hw", "ada", days=2)
    assert received("ada_LATE_1_2_hw.zip", ON_TIME) == DUE + timedelta(days=2, seconds=1)
