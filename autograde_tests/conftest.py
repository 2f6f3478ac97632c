"""One grading run shared by the slow grading tests: the hostile probe class, chapter 01's solution and
unanswered release, chapter 02's solution, unanswered release and wrong rings, and the same for
chapters 05, 06 and 08. Chapters 03 and 07 go through the pipeline in runs of their own
(ddp_graded_class, zero_graded_class) with the wrong fixtures named in DDP_GRADED and ZERO_GRADED;
tests/chapters/ checks their other fixtures directly against the hidden checks.

All the classes sit in one throw-away course and go through `make grade`'s pipeline together, in one pool,
so the idle time of deadlocked submissions overlaps with the work of the others.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograde_tests.support import hostile_class, probe_course
from course_lib.grading.autograder import class_run, fixtures
from course_lib.grading.sandbox.policy import GiB, SandboxPolicy

REPO = Path(__file__).resolve().parents[1]
RING = "02_collectives"
RING_FIXTURES = REPO / "autograde_tests" / "fixtures" / "ring"
MLP = "01_mlp_by_hand"
PIPELINE = "05_pipeline_parallel"
PIPELINE_FIXTURES = REPO / "autograde_tests" / "fixtures" / "pipeline"
TENSOR_PARALLEL = "06_tensor_parallel"
TENSOR_PARALLEL_FIXTURES = REPO / "autograde_tests" / "fixtures" / "tensor_parallel"
MESH = "08_nd_parallelism"
MESH_FIXTURES = REPO / "autograde_tests" / "fixtures" / "mesh"
CAPSTONE_FIXTURES = REPO / "autograde_tests" / "fixtures" / "capstone"
ZERO = "07_zero_fsdp"
ZERO_FIXTURES = REPO / "autograde_tests" / "fixtures" / "zero"
# Wrong answers also sent through nbgrader: none, since each submission re-runs the whole lesson and every
# hidden check twice; tests/chapters/test_ch07_zero_fixtures.py checks every fixture's points directly.
ZERO_GRADED: tuple[str, ...] = ()
DDP = "03_data_parallel"
DDP_FIXTURES = REPO / "autograde_tests" / "fixtures" / "ddp"
# Wrong DDPs also sent through nbgrader (listed in expected_scores.json): the ones whose failure the
# student must read in the graded notebook (values right, the timeline drawn wrong; every rank deadlocked
# and stopped). Each submission re-runs the lesson and the hidden checks twice (about 90 s on 2 busy
# cores), so tests/chapters/test_ch03_ddp_fixtures.py checks the others' points directly.
DDP_GRADED = tuple(json.loads((DDP_FIXTURES / "expected_scores.json").read_text())["graded_through_nbgrader"])


def expected_points(fixtures_dir: Path, graded: tuple[str, ...] | None = None,
                    prefix: str = "") -> dict[str, dict[str, int]]:
    """Cell points each submission of a chapter's run must earn: the solution, the unanswered release
    and the wrong fixtures sent through nbgrader (``graded``; all of them when None), from the fixtures'
    expected_scores.json. ``prefix`` goes before each wrong fixture's name (the capstone's are graded in
    chapter 08's class as capstone_<name>)."""
    table = json.loads((fixtures_dir / "expected_scores.json").read_text())
    unanswered = {cell: 0 for cell in table["max_points"]}
    wrong = table["fixtures"] if graded is None else {name: table["fixtures"][name] for name in graded}
    return {"solution": table["solution"], "release": unanswered,
            **{f"{prefix}{name}": points for name, points in wrong.items()}}


@dataclass
class GradedClass:
    root: Path
    students: dict[str, list[str]]       # assignment -> students submitted
    results: dict[tuple[str, str], object]
    log: str


def write_chapter_class(root: Path, chapter: str, prefix: str,
                        wrong: dict[str, dict] | None = None) -> list[str]:
    """A chapter's reference solution, its release left unanswered and any ``wrong`` answers
    ({student: {grade_id: source}}), each as a student named ``<prefix>_<student>``."""
    (root / "solutions" / chapter).symlink_to(REPO / "solutions" / chapter, target_is_directory=True)
    release = nbformat.read(REPO / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)
    source = nbformat.read(REPO / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
    classes = {"solution": fixtures.solution_sources(source), "release": {}, **(wrong or {})}
    for student, answers in classes.items():
        folder = root / "grading" / "submitted" / f"{prefix}_{student}" / chapter
        fixtures.write_submission(folder, chapter, fixtures.make_submission(release, answers))
    return [f"{prefix}_{student}" for student in classes]


def wrong_answers(chapter: str, folder: Path) -> dict[str, dict]:
    """Every wrong submission in ``folder`` (fixtures/<exercise>/), as the solution cells it answers."""
    release = nbformat.read(REPO / "notebooks" / chapter / f"{chapter}.ipynb", as_version=4)
    expected = json.loads((folder / "expected_scores.json").read_text())
    wrong = {}
    for name in expected["fixtures"]:
        answers = fixtures.load_py_fixture(folder / f"{name}.py")
        wrong[name] = {k: v for k, v in answers.items() if k in fixtures.solution_ids(release)}
    return wrong


def wrong_ddps(names=DDP_GRADED) -> dict[str, dict]:
    """The named wrong DDPs of fixtures/ddp/: each file is the whole source of the exercise cell 'ddp'."""
    return {name: {"ddp": (DDP_FIXTURES / f"{name}.py").read_text()} for name in names}


def wrong_rings() -> dict[str, dict]:
    """Every wrong ring in fixtures/ring/, as the solution cells it answers."""
    return wrong_answers(RING, RING_FIXTURES)


def wrong_capstone() -> dict[str, dict]:
    """Each fixture of fixtures/capstone/ over the solution's other cells (capstone_groups uses mesh_groups),
    as students named capstone_<fixture>."""
    source = nbformat.read(REPO / "solutions" / MESH / f"{MESH}.ipynb", as_version=4)
    solution = fixtures.solution_sources(source)
    expected = json.loads((CAPSTONE_FIXTURES / "expected_scores.json").read_text())
    return {f"capstone_{name}": {**solution, **fixtures.load_py_fixture(CAPSTONE_FIXTURES / f"{name}.py")}
            for name in expected["fixtures"]}


GRADING_RUN_TIMEOUT_S = 1800  # the shared run of every chapter's classes outgrows pytest's 600 s default


def pytest_collection_modifyitems(items):
    """Whichever test first asks for the shared grading run (or chapter 03's, up to 10 minutes on a busy
    machine) pays for it: give those tests its time."""
    for item in items:
        if {"graded_class", "ddp_graded_class"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.timeout(GRADING_RUN_TIMEOUT_S))
def wrong_zero(names=ZERO_GRADED) -> dict[str, dict]:
    """The named fixtures of fixtures/zero/: each one's wrong cells over the solution's other cells."""
    source = nbformat.read(REPO / "solutions" / ZERO / f"{ZERO}.ipynb", as_version=4)
    solution = fixtures.solution_sources(source)
    return {name: {**solution, **fixtures.load_py_fixture(ZERO_FIXTURES / f"{name}.py")} for name in names}


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory) -> GradedClass:
    root = probe_course.build(tmp_path_factory.mktemp("grading-course"))
    students = {"probe": hostile_class.write_class(root)}
    students[RING] = write_chapter_class(root, RING, "ring", wrong_rings())
    students[MLP] = write_chapter_class(root, MLP, MLP)
    students[PIPELINE] = write_chapter_class(root, PIPELINE, "pipeline",
                                             wrong_answers(PIPELINE, PIPELINE_FIXTURES))
    students[TENSOR_PARALLEL] = write_chapter_class(root, TENSOR_PARALLEL, "tp",
                                                    wrong_answers(TENSOR_PARALLEL, TENSOR_PARALLEL_FIXTURES))
    students[MESH] = write_chapter_class(root, MESH, "mesh",
                                         {**wrong_answers(MESH, MESH_FIXTURES), **wrong_capstone()})
    log = io.StringIO()
    run = class_run.GradingRun(course_root=root, jobs=3, cell_timeout=20, judge_timeout=300,
                               **probe_course.PROBE_SETTINGS, stream=log,
                               policy=SandboxPolicy(memory_bytes=3 * GiB),
                               check_reference=False)  # each chapter's solution is a student of this class
    results = {(r.assignment, r.student): r for r in class_run.grade(run, sorted(students))}
    return GradedClass(root, students, results, log.getvalue())


def chapter_run(tmp_path_factory, chapter: str, prefix: str, wrong: dict, judge_timeout: int) -> GradedClass:
    """One chapter's solution, unanswered release and ``wrong`` answers graded in a run of their own."""
    root = probe_course.build(tmp_path_factory.mktemp(f"{prefix}-course"))
    students = {chapter: write_chapter_class(root, chapter, prefix, wrong)}
    log = io.StringIO()
    run = class_run.GradingRun(course_root=root, jobs=2, cell_timeout=120, judge_timeout=judge_timeout,
                               **probe_course.PROBE_SETTINGS, stream=log,
                               policy=SandboxPolicy(memory_bytes=3 * GiB), check_reference=False)
    results = {(r.assignment, r.student): r for r in class_run.grade(run, [chapter])}
    return GradedClass(root, students, results, log.getvalue())


@pytest.fixture(scope="session")
def zero_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 07 in a run of its own: each submission re-runs a long lesson and ten hidden checks twice,
    which would push the shared run past its timeout on the 2-core machine."""
    return chapter_run(tmp_path_factory, ZERO, "zero", wrong_zero(), judge_timeout=400)


@pytest.fixture(scope="session")
def ddp_graded_class(tmp_path_factory) -> GradedClass:
    """Chapter 03 in a run of its own: its lesson times real ranks, so its cells need more than the shared
    run's 20 s on a busy machine."""
    return chapter_run(tmp_path_factory, DDP, "ddp", wrong_ddps(), judge_timeout=300)
