"""An instructor's term, as docs/instructors.md walks it: a roster, two assignments with due dates, an
extension for one student, submissions by the exchange and by Canvas's bulk download (a hyphenated name
among them) on time, late and extended, grading, a resubmission graded alone, the grades for Canvas and
Moodle checked column by column, and feedback back to every student (the exchange's release_feedback,
which zip students no longer break, and Canvas's upload zip for the others).

The course is the probe course (autograde_tests/support/probe_course.py: assignments `probe`, 3 points,
and `probe_other`, 1 point) so that the term costs seconds per submission; the students are this account
through the exchange (as test_exchange.py has it when not root) and two Canvas students.
"""

from __future__ import annotations

import csv
import io
import os
import pwd
import shutil
import zipfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest

from autograde_tests.support import probe_course
from autograde_tests.support.exchange_commands import nbgrader as _nbgrader
from course_lib.grading import cli
from course_lib.grading.autograder import class_run, extensions, fixtures
from course_lib.grading.sandbox.policy import SandboxPolicy

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
ME = pwd.getpwuid(os.getuid()).pw_name
# docs/instructors.md's Canvas pattern: <name>[_LATE]_<user id>_<file id>_<uploaded name>.zip
CANVAS = r"^[^_]+(?:_LATE)?_(?P<student_id>\d+)_\d+_.*\.zip$"
ROSTER = f"""id,first_name,last_name,email,lms_user_id
{ME},Ada,Lovelace,ada@example.org,48211
48213,Mary,Smith-Jones,mary@example.org,48213
48214,Charles,Babbage,charles@example.org,48214
"""


def _answered(course: Path, assignment: str, cells: set[str] | None = None) -> bytes:
    """The release of ``assignment`` with the solution's answers (only ``cells`` where given)."""
    source = course / "solutions" / assignment / f"{assignment}.ipynb"
    solution = fixtures.solution_sources(nbformat.read(source, 4))
    answers = {k: v for k, v in solution.items() if cells is None or k in cells}
    release = nbformat.read(course / "notebooks" / assignment / f"{assignment}.ipynb", 4)
    return nbformat.writes(fixtures.make_submission(release, answers)).encode()


def _canvas_zip(download: Path, name: str, notebook_name: str, notebook: bytes, received: datetime) -> None:
    """One file of Canvas's "Download Submissions", as it reaches the instructor at ``received``."""
    download.mkdir(exist_ok=True)
    with zipfile.ZipFile(download / name, "w") as bundle:
        bundle.writestr(f"{notebook_name}.ipynb", notebook)
    stamp = received.replace(tzinfo=UTC).timestamp()
    os.utime(download / name, (stamp, stamp))


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def _grade(course: Path, assignment: str, download: Path | None) -> tuple[dict, str]:
    said = io.StringIO()
    run = class_run.GradingRun(course_root=course, jobs=2, stream=said, check_reference=False,
                               course=replace(probe_course.PROBE_SETTINGS, cell_timeout=30),
                               policy=SandboxPolicy(uid=62400, gid=62400))
    results = class_run.grade(run, [assignment], download, CANVAS if download else None)
    return {r.student: r for r in results}, said.getvalue()


def test_a_term_from_the_roster_to_feedback_for_every_student(tmp_path):
    # Dates from the test's own start, not the module's import: a full suite collects an hour before
    # this runs, and an exchange submission made after a due date computed then is late.
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    due = now + timedelta(hours=1)          # probe: the exchange student is on time, the zips a day late
    due_other = now + timedelta(days=7)     # probe_other
    course = probe_course.build(tmp_path / "course")
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    with (course / "nbgrader_config.py").open("a") as config:   # "Due dates and late submissions"
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    grading = course / "grading"
    grading.mkdir(mode=0o700)   # make setup's `grading` target
    exchange = tmp_path / "exchange"
    (course / "roster.csv").write_text(ROSTER)
    _nbgrader(course, exchange, "db", "student", "import", "roster.csv")
    _nbgrader(course, exchange, "db", "assignment", "add", "probe", f"--duedate={due} UTC")
    _nbgrader(course, exchange, "db", "assignment", "add", "probe_other", f"--duedate={due_other} UTC")
    said = extensions.grant(grading, "probe", "48214", days=3)   # make extend ... DAYS=3
    assert said.startswith(f"48214 has 3 days more on probe: due {due + timedelta(days=3)} UTC"), said

    # the exchange student, on time; the Canvas students a day late, one of them with the extension
    _nbgrader(course, exchange, "generate_assignment", "probe", "--force")
    _nbgrader(course, exchange, "release_assignment", "probe")
    home = tmp_path / "home"
    home.mkdir()
    _nbgrader(home, exchange, "fetch_assignment", "probe", user=ME)
    (home / "probe" / "probe.ipynb").write_bytes(_answered(course, "probe"))
    _nbgrader(home, exchange, "submit", "probe", user=ME)
    _nbgrader(course, exchange, "collect", "probe")
    probe_download, other_download = tmp_path / "canvas-probe", tmp_path / "canvas-probe_other"
    late = due + timedelta(days=1)
    _canvas_zip(probe_download, "smith-jonesmary_LATE_48213_990412_probe.zip", "probe",
                _answered(course, "probe"), late)
    _canvas_zip(probe_download, "babbagecharles_LATE_48214_990413_probe.zip", "probe",
                _answered(course, "probe", {"scale"}), late)
    _canvas_zip(other_download, "smith-jonesmary_48213_990500_probe_other.zip", "probe_other",
                _answered(course, "probe_other"), now)

    graded, _ = _grade(course, "probe", probe_download)
    assert {s: (r.score, r.max_score) for s, r in graded.items()} == \
        {ME: (3.0, 3.0), "48213": (0.0, 3.0), "48214": (2.0, 3.0)}   # 48213 late: 'zero'; 48214 extended
    graded, _ = _grade(course, "probe_other", other_download)
    assert {s: r.score for s, r in graded.items()} == {"48213": 1.0}

    # 48214 resubmits within the extension: only that submission is graded again
    (probe_download / "babbagecharles_LATE_48214_990413_probe.zip").unlink()
    _canvas_zip(probe_download, "babbagecharles_LATE_48214_990777_probe.zip", "probe",
                _answered(course, "probe"), due + timedelta(days=2))
    graded, output = _grade(course, "probe", probe_download)
    assert {s: r.score for s, r in graded.items()} == {"48214": 3.0}
    assert "probe: 2 submissions unchanged since they were graded keep their grades" in output, output

    with (grading / "grades.csv").open(newline="") as handle:
        rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(handle)}
    assert {key: (r["raw_score"], r["late_submission_penalty"], r["score"]) for key, r in rows.items()} == {
        ("probe", ME): ("3.0", "0.0", "3.0"), ("probe", "48213"): ("3.0", "3.0", "0.0"),
        ("probe", "48214"): ("3.0", "0.0", "3.0"), ("probe_other", "48213"): ("1.0", "0.0", "1.0")}
    assert rows[("probe", "48214")]["duedate"] == str(due + timedelta(days=3))   # the extension included

    assert cli._export(grading) == 0   # make export
    exports = grading / "exports"
    assert _rows(exports / "canvas.csv") == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "probe", "probe_other"],
        ["    Points Possible", "", "", "", "", "3", "1"],
        ["Babbage, Charles", "48214", "", "48214", "", "3", ""],
        ["Lovelace, Ada", "48211", "", ME, "", "3", ""],
        ["Smith-Jones, Mary", "48213", "", "48213", "", "0", "1"]]
    assert _rows(exports / "moodle.csv") == [
        ["ID number", "Email address", "First name", "Last name", "probe", "probe_other"],
        ["48214", "charles@example.org", "Charles", "Babbage", "3", ""],
        [ME, "ada@example.org", "Ada", "Lovelace", "3", ""],
        ["48213", "mary@example.org", "Mary", "Smith-Jones", "0", "1"]]

    # feedback: the exchange releases everyone's (zip students' too, unfetchable but no longer a crash) ...
    for assignment in ("probe", "probe_other"):
        _nbgrader(course, exchange, "release_feedback", assignment)
    _nbgrader(home, exchange, "fetch_feedback", "probe", user=ME)
    [page] = (home / "probe" / "feedback").glob("*/probe.html")
    assert "3.0 / 3.0" in page.read_text()
    # ... and Canvas's upload zips carry each zip student's, named as the download named the submission
    with zipfile.ZipFile(exports / "feedback" / "canvas-probe.zip") as bundle:
        pages = {name: bundle.read(name).decode() for name in bundle.namelist()}
    late_page = "smith-jonesmary_LATE_48213_990412_probe_feedback.html"
    assert set(pages) == {late_page, "babbagecharles_LATE_48214_990777_probe_feedback.html"}
    assert "Late submission penalty (Score: -3.0)" in pages[late_page]
    with zipfile.ZipFile(exports / "feedback" / "canvas-probe_other.zip") as bundle:
        assert bundle.namelist() == ["smith-jonesmary_48213_990500_probe_other_feedback.html"]
