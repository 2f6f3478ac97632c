"""`make grade SLURM=1` on the local Slurm: a demo class graded as a job array gets exactly the grades of
`make grade` on one machine. Twelve students over four tasks (three each) keep CI's run short; the
30-student figure is benchmarks/bench_grading_slurm.py's.

The class is the probe assignment (autograde_tests/probe_course.py): the cheapest assignment to grade,
so the test measures the array, not a chapter's lesson.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from autograde_tests import probe_course
from course_lib.grading import class_run, demo, gradebook_merge, slurm_array, slurm_grading

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
STUDENTS, TASKS = 12, 4
# Two gradings of the class (one without Slurm, one array) outgrow pytest's 600 s on a busy machine.
TIMEOUT_S = 1800


def grades(course: Path) -> dict[str, tuple]:
    rows = gradebook_merge.export_rows(f"sqlite:///{course / 'grading' / 'gradebook.db'}", ["probe"])
    return {row["student_id"]: (row["score"], row["max_score"], row["needs_manual_grade"]) for row in rows}


def autograded(course: Path) -> list[str]:
    return sorted(p.parent.name for p in (course / "grading" / "autograded").glob("*/probe"))


def grading_run(course: Path, stream) -> class_run.GradingRun:
    return class_run.GradingRun(course_root=course, registry="autograde_tests.probe_registry", jobs=2,
                                feedback=False, stream=stream)


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    """The probe course and two copies of the same demo class; one graded without Slurm."""
    base = tmp_path_factory.mktemp("array-grading")
    base.chmod(0o755)
    course = probe_course.build(base / "course")
    plain, array = base / "plain", base / "array"
    assert demo.write_class(course, plain, "probe", STUDENTS) == demo.write_class(course, array, "probe",
                                                                                   STUDENTS)
    class_run.grade(grading_run(plain, io.StringIO()), ["probe"])
    return plain, array


@pytest.mark.timeout(TIMEOUT_S)
def test_array_grades_exactly_like_make_grade(classes, local_slurm, monkeypatch):
    plain, array = classes
    monkeypatch.setenv("SLURM_CONF", local_slurm.env["SLURM_CONF"])
    options = slurm_array.ArrayOptions(tasks=TASKS, poll_seconds=0.5, max_wait_s=900)
    results = slurm_grading.grade_on_slurm(grading_run(array, io.StringIO()), options, ["probe"])
    assert len(results) == STUDENTS
    assert grades(array) == grades(plain)
    assert autograded(array) == autograded(plain) and len(autograded(plain)) > STUDENTS // 2
    assert not (array / "grading" / "slurm").exists()


def test_grade_array_script_refuses_to_run_without_the_checkout(tmp_path):
    result = subprocess.run(["bash", str(slurm_grading.SCRIPT), str(tmp_path)], capture_output=True,
                            text=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert result.returncode != 0 and "COURSE_DIR must name the course checkout" in result.stderr
