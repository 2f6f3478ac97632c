"""A second grading run on the same machine, in a process and a course folder of its own: what `make grade`
from a second checkout is to the machine (the same cores, uid leases, ports, /tmp and Jupyter folders).

    python -m autograde_tests.support.neighbour_run ROOT RESULTS_JSON

grades the class `prepare(ROOT)` wrote (the probe's right answer and its deadlock, chapter 08's reference
solution) and writes {"assignment/student": [score, max_score, notes]} to RESULTS_JSON.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path

from autograde_tests.support import hostile_class, probe_course
from autograde_tests.support.chapter_classes import write_solution_student
from course_lib.grading.autograder import class_run, fixtures
from course_lib.grading.sandbox.policy import GiB, SandboxPolicy

PROBE_STUDENTS = ("full", "deadlock")
CHAPTER = "08_nd_parallelism"     # its lesson and capstone run 8 ranks: the heaviest of the shared run
# The order both runs grade in (their work is queued in this order, two jobs at a time): chapter 08 first, so
# that its minutes under load run beside the probe's students in the other job, not after them, and the two
# runs' 8-rank gradings overlap from the start.
HEAVIEST_FIRST = [CHAPTER, "probe"]


def write_probe_students(root: Path, names) -> list[str]:
    release = probe_course.release(root)
    for name in names:
        folder = root / "grading" / "submitted" / name / "probe"
        fixtures.write_submission(folder, "probe",
                                  fixtures.make_submission(release, hostile_class.CASES[name]))
    return list(names)


def grading_run(root: Path, jobs: int = 2, cell_timeout: int = 20) -> class_run.GradingRun:
    """Settings of the shared grading run (conftest.graded_class): the probe's registry, a 20 s cell."""
    return class_run.GradingRun(course_root=root, jobs=jobs, judge_timeout=300, stream=io.StringIO(),
                                course=replace(probe_course.PROBE_SETTINGS, cell_timeout=cell_timeout),
                                policy=SandboxPolicy(memory_bytes=3 * GiB), check_reference=False)


def prepare(root: Path) -> Path:
    """The neighbour's course and class under root (built before the machine is loaded: only the grading
    is under test)."""
    root = probe_course.build(root)
    write_probe_students(root, PROBE_STUDENTS)
    write_solution_student(root, CHAPTER, "neighbour_solution")
    return root


def main(root: Path, results_file: Path) -> None:
    results = class_run.grade(grading_run(root), HEAVIEST_FIRST)
    results_file.write_text(json.dumps({f"{r.assignment}/{r.student}": [r.score, r.max_score, r.notes]
                                        for r in results}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
