"""The grading runs the slow grading tests share (support/chapter_classes.py lists what each grades).

``graded_class``: the hostile probe class and every chapter whose row says so, in one throw-away course
graded by `make grade`'s pipeline in one pool, so the idle time of deadlocked submissions overlaps with
the work of the others. Chapters 03, 07, 08, 09, 10 and 11 are graded in runs of their own
(``ddp_graded_class``, ``zero_graded_class``, ``nd_graded_class``, ``checkpoint_graded_class``,
``cp_graded_class``, ``ep_graded_class``); tests/chapters/ checks the fixtures not sent through
nbgrader directly against the hidden checks.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograde_tests.support import hostile_class, probe_course
from autograde_tests.support.chapter_classes import REPO, chapters_of, write_chapter_class
from course_lib.grading.autograder import class_run
from course_lib.grading.sandbox.policy import GiB, SandboxPolicy

__all__ = ["GRADING_RUN_TIMEOUT_S", "REPO", "GradedClass"]


@dataclass
class GradedClass:
    root: Path
    students: dict[str, list[str]]       # assignment -> students submitted
    results: dict[tuple[str, str], object]
    log: str


GRADING_RUN_TIMEOUT_S = 1800  # the shared run of every chapter's classes outgrows pytest's 600 s default
RUNS = ("graded_class", "ddp_graded_class", "zero_graded_class", "nd_graded_class", "checkpoint_graded_class",
        "cp_graded_class", "ep_graded_class")


def pytest_collection_modifyitems(items):
    """Whichever test first asks for a grading run (the shared one, or a chapter's, up to 10 minutes on a
    busy machine) pays for it: give those tests its time."""
    for item in items:
        # test_grading_chapters asks for its chapter's run by name (request.getfixturevalue), so its items
        # do not list the run among their fixtures
        named = set(RUNS) & set(getattr(item, "fixturenames", ()))
        if named or item.path.name == "test_grading_chapters.py":
            item.add_marker(pytest.mark.timeout(GRADING_RUN_TIMEOUT_S))


def _grade(root: Path, students: dict, jobs: int, cell_timeout: int, judge_timeout: int) -> GradedClass:
    log = io.StringIO()
    run = class_run.GradingRun(course_root=root, jobs=jobs, cell_timeout=cell_timeout,
                               judge_timeout=judge_timeout, stream=log, **probe_course.PROBE_SETTINGS,
                               policy=SandboxPolicy(memory_bytes=3 * GiB),
                               check_reference=False)  # each chapter's solution is a student of the class
    results = {(r.assignment, r.student): r for r in class_run.grade(run, sorted(students))}
    return GradedClass(root, students, results, log.getvalue())


def _chapter_run(tmp_path_factory, run: str, jobs: int, cell_timeout: int, judge_timeout: int,
                 with_probe: bool = False) -> GradedClass:
    root = probe_course.build(tmp_path_factory.mktemp(run))
    students = {"probe": hostile_class.write_class(root)} if with_probe else {}
    for assignment, chapters in chapters_of(run).items():
        students[assignment] = write_chapter_class(root, chapters)
    return _grade(root, students, jobs, cell_timeout, judge_timeout)


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> GradedClass:
    return _chapter_run(tmp_path_factory, "graded_class", jobs=3, cell_timeout=20, judge_timeout=300,
                        with_probe=True)


@pytest.fixture(scope="session")
def zero_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 07 in a run of its own: each submission re-runs a long lesson and ten hidden checks twice,
    which would push the shared run past its timeout on the 2-core machine."""
    return _chapter_run(tmp_path_factory, "zero_graded_class", jobs=2, cell_timeout=120, judge_timeout=400)


@pytest.fixture(scope="session")
def nd_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 08 in a run of its own: its lesson trains on 4 and 8 ranks (the capstone, FSDP2 + TP), so its
    cells need more than the shared run's 20 s on a busy machine."""
    return _chapter_run(tmp_path_factory, "nd_graded_class", jobs=2, cell_timeout=120, judge_timeout=400)


@pytest.fixture(scope="session")
def ddp_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 03 in a run of its own: its lesson times real ranks, so its cells need more than the shared
    run's 20 s on a busy machine."""
    return _chapter_run(tmp_path_factory, "ddp_graded_class", jobs=2, cell_timeout=120, judge_timeout=300)


@pytest.fixture(scope="session")
def checkpoint_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 09 in a run of its own: every test cell kills real runs and resumes them, several times, and
    a wrong answer that leaves mixed checkpoints makes a resumed run hang until the run's timeout."""
    return _chapter_run(tmp_path_factory, "checkpoint_graded_class", jobs=2, cell_timeout=120,
                        judge_timeout=400)


@pytest.fixture(scope="session")
def cp_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 10 in a run of its own: its hidden checks run the ring on up to 8 ranks, part by part."""
    return _chapter_run(tmp_path_factory, "cp_graded_class", jobs=2, cell_timeout=120, judge_timeout=300)


@pytest.fixture(scope="session")
def ep_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 11 in a run of its own: its lesson times real ranks and calibrates this machine, so its
    cells need more than the shared run's 20 s on a busy machine."""
    return _chapter_run(tmp_path_factory, "ep_graded_class", jobs=2, cell_timeout=120, judge_timeout=300)
