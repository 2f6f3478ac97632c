"""nbgrader's exchange end to end on a local exchange folder: the instructor releases, two students
fetch and submit (as their own users where the machine allows it), the instructor collects, grades
with `make grade`'s pipeline, and releases the feedback, which the students fetch.

As root, student "nobody" runs as the real user nobody (its own uid, as on a shared JupyterHub
server) and student "root" as root; otherwise both steps run as the current user.
"""

from __future__ import annotations

import io
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograde_tests.support import probe_course
from course_lib.grading.autograder import class_run, fixtures
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
COURSE_ID = "distributed-training"


def _nbgrader(cwd: Path, exchange: Path, *args: str, user: str | None = None) -> str:
    prefix = []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_CONFIG_DIR")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs alembic
    if user is not None and user != pwd.getpwuid(os.getuid()).pw_name:
        entry = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        env.update(HOME=str(cwd), USER=user)
    command = [*prefix, sys.executable, "-m", "nbgrader", *args, f"--Exchange.root={exchange}",
               f"--CourseDirectory.course_id={COURSE_ID}", "--log-level=INFO"]
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{' '.join(args)}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    return run.stdout + run.stderr


def _students() -> dict[str, bool]:
    """student user -> answers the exercise (True) or hands in the release unanswered (False)."""
    me = pwd.getpwuid(os.getuid()).pw_name
    if running_as_root() and shutil.which("setpriv"):
        return {"nobody": True, me: False}
    return {me: True}


@pytest.fixture
def shared_area():
    """A folder every user can enter (the exchange and the students' homes), removed afterwards."""
    area = Path(tempfile.mkdtemp(prefix="course-exchange-"))
    os.chmod(area, 0o755)
    yield area
    shutil.rmtree(area, ignore_errors=True)


def test_release_fetch_submit_collect_grade_and_feedback(tmp_path, shared_area):
    course = probe_course.build(tmp_path / "course")
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    (course / "grading").mkdir(mode=0o700)  # the gradebook's folder, as `make grade` makes it
    exchange = shared_area / "exchange"
    _nbgrader(course, exchange, "generate_assignment", "probe", "--force")
    _nbgrader(course, exchange, "release_assignment", "probe")
    solution = fixtures.solution_sources(nbformat.read(course / "solutions" / "probe" / "probe.ipynb", 4))
    students = _students()
    for student, answers in students.items():
        home = shared_area / f"home-{student}"
        home.mkdir()
        shutil.chown(home, student)
        _nbgrader(home, exchange, "fetch_assignment", "probe", user=student)
        fetched = home / "probe" / "probe.ipynb"
        notebook = fixtures.make_submission(nbformat.read(fetched, 4), solution if answers else {})
        nbformat.write(notebook, fetched)
        shutil.chown(fetched, student)
        _nbgrader(home, exchange, "submit", "probe", user=student)

    _nbgrader(course, exchange, "collect", "probe")
    assert sorted(p.name for p in (course / "grading" / "submitted").iterdir()) == sorted(students)
    run = class_run.GradingRun(course_root=course, jobs=2, cell_timeout=30, stream=io.StringIO(),
                               **probe_course.PROBE_SETTINGS,
                               policy=SandboxPolicy(uid=62200, gid=62200),
                               check_reference=False)  # tested on its own; here the exchange is
    scores = {r.student: r.score for r in class_run.grade(run, ["probe"])}
    assert scores == {student: (3 if answers else 0) for student, answers in students.items()}

    _nbgrader(course, exchange, "release_feedback", "probe")
    for student in students:
        home = shared_area / f"home-{student}"
        _nbgrader(home, exchange, "fetch_feedback", "probe", user=student)
        feedback = list((home / "probe" / "feedback").glob("*/probe.html"))
        assert len(feedback) == 1, f"{student} fetched no feedback"
        points = 3 if students[student] else 0
        assert f"{points}.0 / 3.0" in feedback[0].read_text(), f"{student}'s feedback shows another score"
