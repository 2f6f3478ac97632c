"""`make grade SLURM=1` on the local Slurm: an 8-student demo class over four array tasks gets exactly
the grades of `make grade` on one machine, although one task's process is killed (SIGKILL) half-way:
Slurm reports the task FAILED, the class gradebook then holds the other tasks' students, whole, and
nothing of the killed task's, and its share, re-queued once, completes the class.

The class is the probe assignment (autograde_tests/support/probe_course.py): the cheapest assignment to grade,
so the test measures the array, not a chapter's lesson. Nothing is timed: the task named in
COURSE_GRADE_HOLD_TASK waits, its share graded into its own gradebook but not marked done, for the test
to kill it, and waits again once re-queued, for the test to look at the class gradebook
(array_grading._hold_if_asked).
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograde_tests.support import probe_course
from course_lib.grading.autograder import class_run, demo, gradebook_merge
from course_lib.grading.slurm import array_grading, array_tasks

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
STUDENTS, TASKS = 8, 4   # two students a task: each grades, one is killed, the others merge (CI time)
KILLED_TASK = 2
# Two gradings of the class (one without Slurm, one array with a re-queued task) outgrow pytest's 600 s
# on a busy machine.
TIMEOUT_S = 1800


def grades(course: Path) -> dict[str, tuple]:
    """Each graded student's score, flag and every cell's points, as the class gradebook holds them."""
    db_url = f"sqlite:///{course / 'grading' / 'gradebook.db'}"
    found = {}
    with Gradebook(db_url) as gradebook:
        for row in gradebook_merge.export_rows(db_url, ["probe"]):
            submission = gradebook.find_submission("probe", row["student_id"])
            cells = sorted((notebook.name, grade.name, grade.auto_score, grade.manual_score)
                           for notebook in submission.notebooks for grade in notebook.grades)
            found[row["student_id"]] = (row["score"], row["max_score"], row["needs_manual_grade"], cells)
    return found


def autograded(course: Path) -> list[str]:
    return sorted(p.parent.name for p in (course / "grading" / "autograded").glob("*/probe"))


def grading_run(course: Path, stream) -> class_run.GradingRun:
    return class_run.GradingRun(course_root=course, course=probe_course.PROBE_SETTINGS, jobs=2,
                               feedback=False, stream=stream)


def array_options() -> array_tasks.ArrayOptions:
    return array_tasks.ArrayOptions(tasks=TASKS, poll_seconds=0.5, max_wait_s=900)


def wait_for(path: Path) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return path.read_text() if path.exists() else ""


class KillThenLook(threading.Thread):
    """Kills the held task at its first arrival; at its second (re-queued) records what the class
    gradebook holds, then lets it go on."""

    def __init__(self, folder: Path, course: Path):
        super().__init__(daemon=True)
        self.folder, self.course, self.killed, self.seen, self.task_rows = folder, course, "", None, 0
        self.error = None

    def run(self) -> None:
        try:
            self.killed = wait_for(self.folder / "held-1")
            if self.killed:
                task = self.killed.split()[1].split("_")[1]
                work = next((self.course / "grading" / "slurm").glob(f"run-*/task-{task}"))
                self.task_rows = len(grades(work))
                os.kill(int(self.killed.split()[0]), signal.SIGKILL)
            if wait_for(self.folder / "held-2"):
                with sqlite3.connect(self.course / "grading" / "gradebook.db") as db:
                    intact = db.execute("PRAGMA integrity_check").fetchone()
                self.seen = (grades(self.course), autograded(self.course), intact)
        except Exception as error:  # said by the test, which asserts on what this thread saw
            self.error = error
        finally:  # never leave the task waiting out its hold
            (self.folder / "go-1").touch()
            (self.folder / "go-2").touch()


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """The probe course and two copies of the same demo class; one graded without Slurm."""
    base = tmp_path_factory.mktemp("array-grading")
    base.chmod(0o755)
    course = probe_course.build(base / "course")
    plain, array = base / "plain", base / "array"
    students = demo.write_class(course, plain, "probe", STUDENTS)
    assert students == demo.write_class(course, array, "probe", STUDENTS)
    class_run.grade(grading_run(plain, io.StringIO()), ["probe"])
    return plain, array, students


@pytest.mark.timeout(TIMEOUT_S)
def test_a_killed_task_is_requeued_and_the_class_gets_the_grades_of_make_grade(classes, local_slurm,
                                                                               tmp_path, monkeypatch):
    plain, array, students = classes
    monkeypatch.setenv("SLURM_CONF", local_slurm.env["SLURM_CONF"])
    monkeypatch.setenv("COURSE_GRADE_HOLD_TASK", f"{KILLED_TASK}:{tmp_path}")
    watcher, said = KillThenLook(tmp_path, array), io.StringIO()
    watcher.start()
    try:
        results = array_grading.grade_on_slurm(grading_run(array, said), array_options(), ["probe"])
    finally:
        (tmp_path / "go-1").touch()
        (tmp_path / "go-2").touch()
        watcher.join(timeout=60)
    assert watcher.error is None and watcher.killed and watcher.seen, \
        f"the held task was not killed and re-queued ({watcher.error!r}):\n{said.getvalue()[-4000:]}"
    # submissions ("<student>/<assignment>") are shared out in sorted order
    killed = {key.split("/")[0] for key in array_tasks.split(sorted(f"{s}/probe" for s in students),
                                                            TASKS)[KILLED_TASK]}
    assert f"task {KILLED_TASK} ({len(killed)} students) ended FAILED" in said.getvalue()
    assert "re-submitting it once" in said.getvalue()
    assert watcher.task_rows == len(killed), "killed with its share graded into its own gradebook"
    # Between the kill and the re-queued task's end: the other tasks' students whole, none of its.
    seen_grades, seen_autograded, intact = watcher.seen
    expected = {student: row for student, row in grades(plain).items() if student not in killed}
    assert seen_grades == expected and len(expected) == STUDENTS - len(killed)
    assert set(seen_autograded) == set(autograded(plain)) - killed and intact == ("ok",)
    # The class, complete.
    assert len(results) == STUDENTS
    assert grades(array) == grades(plain) and len(grades(plain)) == STUDENTS
    assert autograded(array) == autograded(plain) and len(autograded(plain)) > STUDENTS // 2
    assert not (array / "grading" / "slurm").exists()


def test_grade_array_script_refuses_to_run_without_the_checkout(tmp_path):
    result = subprocess.run(["bash", str(array_grading.SCRIPT), str(tmp_path)], capture_output=True,
                            text=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert result.returncode != 0 and "COURSE_DIR must name the course checkout" in result.stderr
