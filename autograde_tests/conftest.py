"""The grading run the slow grading tests share (support/chapter_classes.py lists what it grades).

``graded_class``: the hostile probe class and every chapter's classes, in one throw-away course graded by
`make grade`'s pipeline in one pool, so the idle time of deadlocked submissions overlaps with the work of
the others. Chapters whose lessons time, train or kill real ranks give their cells longer than the run's
20 s (their rows' cell_timeout, the run's cell_timeouts); tests/chapters/ checks the fixtures not sent
through nbgrader directly against the hidden checks.
"""

from __future__ import annotations

import io
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from autograde_tests.support import hostile_class, probe_course
from autograde_tests.support.chapter_classes import (
    REPO,
    cell_timeouts,
    chapters_of,
    write_chapter_class,
)
from conftest import skip_or_fail
from course_lib.grading.autograder import class_run
from course_lib.grading.sandbox.policy import GiB, SandboxPolicy, running_as_root

__all__ = ["GRADING_RUN_TIMEOUT_S", "REPO", "GradedClass"]


@dataclass
class GradedClass:
    root: Path
    students: dict[str, list[str]]       # assignment -> students submitted
    results: dict[tuple[str, str], object]
    log: str
    sandbox_uids: range = range(0)       # the uids the run's student code ran under (as root)


GRADING_RUN_TIMEOUT_S = 3600  # one run grades every chapter's class: far past pytest's 600 s default
RUNS = ("graded_class",)


def pytest_collection_modifyitems(items):
    """Whichever test first asks for a grading run (the shared one, or a chapter's, up to 10 minutes on a
    busy machine) pays for it: give those tests its time."""
    for item in items:
        # test_grading_chapters asks for its chapter's run by name (request.getfixturevalue), so its items
        # do not list the run among their fixtures
        named = set(RUNS) & set(getattr(item, "fixturenames", ()))
        if named or item.path.name == "test_grading_chapters.py":
            item.add_marker(pytest.mark.timeout(GRADING_RUN_TIMEOUT_S))


def _grade(root: Path, students: dict, jobs: int, cell_timeout: int, judge_timeout: int,
           cell_timeouts: dict[str, int]) -> GradedClass:
    if running_as_root() and not shutil.which("bwrap"):
        skip_or_fail("grading as root puts each student in namespaces of its own: apt-get install bubblewrap")
    log = io.StringIO()
    course = replace(probe_course.PROBE_SETTINGS, cell_timeout=cell_timeout, cell_timeouts=cell_timeouts)
    run = class_run.GradingRun(course_root=root, course=course, jobs=jobs, judge_timeout=judge_timeout,
                               stream=log, policy=SandboxPolicy(memory_bytes=3 * GiB),
                               check_reference=False)  # each chapter's solution is a student of the class
    results = {(r.assignment, r.student): r for r in class_run.grade(run, sorted(students))}
    uids = range(run.policy.uid, run.policy.uid + len(results) + 2 * len(students))  # the preflight's too
    return GradedClass(root, students, results, log.getvalue(), uids)


def _chapter_run(tmp_path_factory, run: str, jobs: int, cell_timeout: int, judge_timeout: int,
                 with_probe: bool = False) -> GradedClass:
    root = probe_course.build(tmp_path_factory.mktemp(run))
    students = {"probe": hostile_class.write_class(root)} if with_probe else {}
    rows = chapters_of(run)
    for assignment, chapters in rows.items():
        students[assignment] = write_chapter_class(root, chapters)
    timeouts = cell_timeouts(chapter for chapters in rows.values() for chapter in chapters)
    return _grade(root, students, jobs, cell_timeout, judge_timeout, timeouts)


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> GradedClass:
    return _chapter_run(tmp_path_factory, "graded_class", jobs=3, cell_timeout=20, judge_timeout=400,
                        with_probe=True)
