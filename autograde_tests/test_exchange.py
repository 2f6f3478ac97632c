"""nbgrader's exchange end to end on a local exchange folder: the instructor releases, two students
fetch and submit (as their own users where the machine allows it), the instructor collects, grades
with `make grade`'s pipeline, and releases the feedback, which the students fetch. The assignment is due
the day before (`nbgrader db assignment add --duedate`, as docs/instructors.md says, before anything else
made the gradebook) and the course's penalty is "zero": every submission is late, and the gradebook, the
feedback, grades.csv and `nbgrader export` show its time, its raw score and the penalty. As root, a
classmate (the account daemon) also makes an inbound entry in the answering student's name, later than
theirs: collect refuses it, saying who made it, and the student's own submission is the one graded.

As root, student "nobody" runs as the real user nobody (its own uid, as on a shared JupyterHub
server) and student "root" as root; otherwise both steps run as the current user. A student runs
nbgrader from a Python every account can reach (the course's environment, linked into the shared folder,
as a site installs it), never from this checkout's .venv, which may sit in a folder only its owner can
enter (a clone in root's home or in a `mktemp -d` folder).
"""

from __future__ import annotations

import csv
import io
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import parse_utc

from autograde_tests.support import probe_course
from autograde_tests.support.exchange_commands import COURSE_ID
from autograde_tests.support.exchange_commands import nbgrader as _nbgrader
from course_lib.grading.autograder import class_run, fixtures
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root
from tests.support.site_install import shared_folder, site_venv

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _students() -> dict[str, bool]:
    """student user -> answers the exercise (True) or hands in the release unanswered (False)."""
    me = pwd.getpwuid(os.getuid()).pw_name
    if running_as_root() and shutil.which("setpriv"):
        return {"nobody": True, me: False}
    return {me: True}


@pytest.fixture(scope="module")
def students_venv():
    """The course's environment linked into a folder every account can enter, on an interpreter every
    account can run (made once for this module's tests: it is tens of thousands of links)."""
    if not running_as_root():
        yield None      # the students are this account, which runs this run's own Python
        return
    area = shared_folder("course-exchange-python-")
    yield site_venv(area)
    shutil.rmtree(area, ignore_errors=True)


def students_python(students_venv: Path | None, students) -> str:
    """The Python the students run nbgrader with: when any of them is another account, the shared
    environment (this checkout's .venv may sit where they cannot enter); else this run's own."""
    if students_venv is not None and set(students) - {pwd.getpwuid(os.getuid()).pw_name}:
        return str(students_venv / "bin" / "python")
    return sys.executable


@pytest.fixture
def shared_area():
    """A folder every user can enter (the exchange and the students' homes), removed afterwards."""
    area = shared_folder("course-exchange-")
    yield area
    shutil.rmtree(area, ignore_errors=True)


FORGED = datetime(2020, 1, 1, 9, 0)   # a time long before any due date


def _forge_an_early_submission(exchange: Path) -> str:
    """What a late student can do to the submission they own: rename its inbound folder to an early time
    and write that time into its timestamp.txt. Returns the forged folder's name."""
    inbound = next((exchange / COURSE_ID / "inbound").iterdir())
    student, assignment, _, rest = inbound.name.split("+", 3)
    forged = inbound.with_name(f"{student}+{assignment}+{FORGED} UTC+{rest}")
    inbound.rename(forged)
    (forged / "timestamp.txt").write_text(f"{FORGED} UTC")
    return forged.name


def _forge_a_submission_in_anothers_name(exchange: Path, victim: str, notebook: bytes) -> bool:
    """What a classmate (the account ``daemon``) can do: an inbound entry in ``victim``'s name, later than
    the victim's own, holding a notebook that scores 0. False where there is no such classmate to act."""
    if not running_as_root():
        return False
    try:
        attacker = pwd.getpwnam("daemon")
    except KeyError:
        return False
    time = datetime.now(UTC).replace(tzinfo=None) + timedelta(minutes=1)
    entry = exchange / COURSE_ID / "inbound" / f"{victim}+probe+{time} UTC+forged"
    subprocess.run(["sh", "-c", 'mkdir "$1" && cat > "$1/probe.ipynb"', "sh", str(entry)], input=notebook,
                   user=attacker.pw_uid, group=attacker.pw_gid, extra_groups=[], cwd="/", check=True,
                   timeout=60)
    return True


def _grades(path: Path) -> dict[str, dict]:
    with path.open(newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def test_release_fetch_submit_collect_grade_and_feedback(tmp_path, shared_area, students_venv):
    started = datetime.now(UTC).replace(tzinfo=None)
    course = probe_course.build(tmp_path / "course")
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    with (course / "nbgrader_config.py").open("a") as config:   # docs/instructors.md, "Due dates"
        config.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    (course / "grading").mkdir(mode=0o700)  # the gradebook's folder, as `make grade` makes it
    exchange = shared_area / "exchange"
    due = started - timedelta(days=1)   # every submission of this test is late
    _nbgrader(course, exchange, "db", "assignment", "add", "probe", f"--duedate={due} UTC")
    _nbgrader(course, exchange, "generate_assignment", "probe", "--force")
    _nbgrader(course, exchange, "release_assignment", "probe")
    solution = fixtures.solution_sources(nbformat.read(course / "solutions" / "probe" / "probe.ipynb", 4))
    students = _students()
    student_python = students_python(students_venv, students)
    for student, answers in students.items():
        home = shared_area / f"home-{student}"
        home.mkdir()
        shutil.chown(home, student)
        _nbgrader(home, exchange, "fetch_assignment", "probe", user=student, python=student_python)
        fetched = home / "probe" / "probe.ipynb"
        notebook = fixtures.make_submission(nbformat.read(fetched, 4), solution if answers else {})
        nbformat.write(notebook, fetched)
        shutil.chown(fetched, student)
        _nbgrader(home, exchange, "submit", "probe", user=student, python=student_python)

    forged = _forge_an_early_submission(exchange)
    release = (exchange / COURSE_ID / "outbound" / "probe" / "probe.ipynb").read_bytes()   # unanswered
    impersonated = _forge_a_submission_in_anothers_name(exchange, "nobody", release) if "nobody" in students \
        else False
    collected = _nbgrader(course, exchange, "collect", "probe")
    assert sorted(p.name for p in (course / "grading" / "submitted").iterdir()) == sorted(students)
    # the time is when the files last changed, not the name or timestamp.txt the student wrote
    for student in students:
        stamp = course / "grading" / "submitted" / student / "probe" / "timestamp.txt"
        received = parse_utc(stamp.read_text())
        assert received >= started - timedelta(seconds=2), (student, received, started)
    assert f"its name says {FORGED}" in collected and forged in collected
    if impersonated:   # refused and reported with who tried; the victim's own submission is collected
        assert "it names student 'nobody' but belongs to daemon" in collected, collected[-3000:]
    run = class_run.GradingRun(course_root=course, jobs=2, stream=io.StringIO(),
                               course=replace(probe_course.PROBE_SETTINGS, cell_timeout=30),
                               policy=SandboxPolicy(uid=62200, gid=62200),
                               check_reference=False)  # tested on its own; here the exchange is
    results = {r.student: r for r in class_run.grade(run, ["probe"])}
    points = {student: (3.0 if answers else 0.0) for student, answers in students.items()}
    assert {student: r.score for student, r in results.items()} == dict.fromkeys(students, 0.0)   # late
    # (a course config's CsvExportPlugin.to outranks --to, which sets ExportPlugin.to: name the class)
    _nbgrader(course, exchange, "export", f"--CsvExportPlugin.to={tmp_path / 'export.csv'}")
    for grades in (_grades(course / "grading" / "grades.csv"), _grades(tmp_path / "export.csv")):
        for student in students:   # the time collect wrote, the raw score and the 'zero' penalty
            stamp = (course / "grading" / "submitted" / student / "probe" / "timestamp.txt").read_text()
            row = grades[student]
            assert parse_utc(row["timestamp"]) == parse_utc(stamp) and parse_utc(row["duedate"]) == due, row
            assert (float(row["raw_score"]), float(row["late_submission_penalty"]), float(row["score"])) == \
                (points[student], points[student], 0.0), row

    _nbgrader(course, exchange, "release_feedback", "probe")
    for student in students:
        home = shared_area / f"home-{student}"
        _nbgrader(home, exchange, "fetch_feedback", "probe", user=student, python=student_python)
        feedback = list((home / "probe" / "feedback").glob("*/probe.html"))
        assert len(feedback) == 1, f"{student} fetched no feedback"
        html = feedback[0].read_text()
        assert "0.0 / 3.0" in html, f"{student}'s feedback shows another score"
        if points[student]:
            assert "Late submission penalty (Score: -3.0)" in html, f"{student}'s feedback shows no penalty"


def test_another_account_runs_nbgrader_with_the_students_python(shared_area, students_venv):
    """What the round trip's students need, checked on its own in a second (and in a clone inside a private
    folder by test_exchange_private_checkout.py, where this checkout's own .venv is out of their reach)."""
    if not running_as_root():
        pytest.skip("only as root do the students run as other accounts")
    nobody = pwd.getpwnam("nobody")
    python = students_python(students_venv, ["nobody"])
    run = subprocess.run([python, "-m", "nbgrader", "--version"], cwd=shared_area, user=nobody.pw_uid,
                         group=nobody.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"nobody cannot run nbgrader with {python}:\n{run.stderr[-2000:]}"
