"""One grading run shared by the slow grading tests: the hostile probe class and chapter 02's fixtures.

Both classes sit in one throw-away course and go through `make grade`'s pipeline together, in one pool,
so the idle time of deadlocked submissions overlaps with the work of the others.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograde_tests import hostile_class, probe_course
from course_lib.grading import fixtures, pipeline
from course_lib.grading.sandbox import GiB, SandboxPolicy

REPO = Path(__file__).resolve().parents[1]
RING = "02_collectives"
RING_FIXTURES = REPO / "autograde_tests" / "fixtures" / "ring"


@dataclass
class GradedClass:
    root: Path
    students: dict[str, list[str]]       # assignment -> students submitted
    results: dict[tuple[str, str], object]
    log: str


def ring_available() -> bool:
    return all(path.exists() for path in (REPO / "solutions" / RING / f"{RING}.ipynb",
                                          RING_FIXTURES / "expected_scores.json"))


def write_ring_class(root: Path) -> list[str]:
    """The reference solution, the unanswered release, and every wrong ring in fixtures/ring/."""
    (root / "solutions" / RING).symlink_to(REPO / "solutions" / RING, target_is_directory=True)
    release = nbformat.read(REPO / "notebooks" / RING / f"{RING}.ipynb", as_version=4)
    source = nbformat.read(REPO / "solutions" / RING / f"{RING}.ipynb", as_version=4)
    classes = {"solution": fixtures.solution_sources(source), "release": {}}
    expected = json.loads((RING_FIXTURES / "expected_scores.json").read_text())
    for name in expected["fixtures"]:
        answers = fixtures.load_py_fixture(RING_FIXTURES / f"{name}.py")
        classes[name] = {k: v for k, v in answers.items() if k in fixtures.solution_ids(release)}
    for student, answers in classes.items():
        folder = root / "grading" / "submitted" / f"ring_{student}" / RING
        fixtures.write_submission(folder, RING, fixtures.make_submission(release, answers))
    return [f"ring_{student}" for student in classes]


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> GradedClass:
    root = probe_course.build(tmp_path_factory.mktemp("grading-course"))
    students = {"probe": hostile_class.write_class(root)}
    if ring_available():
        students[RING] = write_ring_class(root)
    log = io.StringIO()
    run = pipeline.GradingRun(course_root=root, jobs=3, cell_timeout=20, judge_timeout=300,
                              registry="autograde_tests.probe_registry", stream=log,
                              policy=SandboxPolicy(memory_bytes=3 * GiB))
    results = {(r.assignment, r.student): r for r in pipeline.grade(run, sorted(students))}
    return GradedClass(root, students, results, log.getvalue())
