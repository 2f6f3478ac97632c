"""The chapters the grading tests send through `make grade`'s pipeline, as one table, and the classes they
make: each chapter's reference solution, its release left unanswered, and its wrong answers (fixtures).

A row says where a chapter's wrong answers are, how a fixture file answers the exercise, which of them go
through nbgrader (the rest are checked directly against the hidden checks, in tests/chapters/), and which
grading run holds the chapter. Adding a chapter to the grading tests is adding a row.
"""

from __future__ import annotations

import ast
import copy
import json
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_lib.grading.autograder import fixtures
from course_lib.viz.worked_answer import SHOW_ANSWERS_ENV

REPO = Path(__file__).resolve().parents[2]
LONG_LESSON_S = 120   # a cell's limit where lessons time, train or kill real ranks (make grade's own)
FIXTURES = REPO / "autograde_tests" / "fixtures"
# The reference student's own first and last cells: its worked answers run at once, and what its lesson
# leaves in the temporary folder is printed (the sandbox's /tmp is the student's own, and starts empty).
SHOW_ANSWERS_CELL = (f"import os\nos.environ[{SHOW_ANSWERS_ENV!r}] = '1'   # the worked answers run at once\n"
                     "import tempfile as _tempfile\nfrom pathlib import Path as _Path\n"
                     "_course_folders_before = set(_Path(_tempfile.gettempdir()).glob('course-*'))")
LEFT_IN_TMP = "course folders the lesson left in the temporary folder:"
# A folder a live TemporaryDirectory holds is removed when the kernel stops (chapter 09's lesson keeps one).
LEFT_IN_TMP_CELL = f"""\
import gc as _gc
_removed_at_exit = {{_Path(o.name) for o in _gc.get_objects() if type(o) is _tempfile.TemporaryDirectory}}
_left = set(_Path(_tempfile.gettempdir()).glob('course-*')) - _course_folders_before - _removed_at_exit
print({LEFT_IN_TMP!r}, sorted(p.name for p in _left if not p.name.startswith('course-jobs-')))  # Slurm's kept
"""


@dataclass(frozen=True)
class Chapter:
    """One exercise of a chapter in the grading tests."""

    assignment: str                      # the chapter folder, e.g. "02_collectives"
    prefix: str                          # its students are named <prefix>_<solution|release|fixture>
    fixtures: str | None = None          # folder under autograde_tests/fixtures/ (expected_scores.json)
    run: str = "graded_class"            # the session fixture whose grading run grades it
    # How a fixture file answers: "alone" (its cells, the others unanswered), "over_solution" (its cells
    # over the reference's others), or the grade_id of the one cell the whole file is.
    answers: str = "alone"
    student_prefix: str = ""             # before each fixture name (capstone_: in chapter 08's class)
    # Seconds one cell of the chapter may run, where its lesson needs more than the run's own limit (the
    # shared run keeps 20 s, so that the probe's endless loops cost little).
    cell_timeout: int | None = None

    @property
    def folder(self) -> Path | None:
        return FIXTURES / self.fixtures if self.fixtures else None

    def table(self) -> dict:
        return json.loads((self.folder / "expected_scores.json").read_text()) if self.folder else {}

    def graded(self) -> tuple[str, ...]:
        """The wrong fixtures sent through nbgrader: those expected_scores.json lists under
        graded_through_nbgrader, or all of them."""
        table = self.table()
        return tuple(table.get("graded_through_nbgrader", table.get("fixtures", {})))

    def expected(self) -> dict[str, dict[str, float]]:
        """student suffix -> the points per test cell it must earn."""
        if self.folder is None:
            maximum = max_points(self.assignment)
            return {"solution": maximum, "release": dict.fromkeys(maximum, 0)}
        table = self.table()
        return {"solution": table["solution"], "release": dict.fromkeys(table["max_points"], 0),
                **{f"{self.student_prefix}{name}": table["fixtures"][name] for name in self.graded()}}

    def wrong(self) -> dict[str, dict[str, str]]:
        """student suffix -> the answer cells of each graded wrong fixture."""
        solution = fixtures.solution_sources(_notebook("solutions", self.assignment))
        release_ids = set(fixtures.solution_ids(_notebook("notebooks", self.assignment)))
        wrong = {}
        warns = set(self.table().get("warns", ()))   # right answers that make torch or Python warn
        for name in self.graded():
            path = self.folder / f"{name}.py"
            if self.answers == "alone" and name not in warns:
                cells = {k: v for k, v in fixtures.load_py_fixture(path).items() if k in release_ids}
            elif self.answers in ("alone", "over_solution"):   # a warning fixture holds only what it changes
                cells = {**solution, **_answer_cells(path, set(solution))}
            else:
                cells = {self.answers: path.read_text()}
            wrong[f"{self.student_prefix}{name}"] = cells
        return wrong


def _answer_cells(path: Path, answer_ids: set[str]) -> dict[str, str]:
    """A fixture file's answer cells: each def or class named like an answer cell, with the defs and classes
    before it that are not (a helper, an autograd.Function), as the solution's cell holds them."""
    cells, helpers = {}, []
    for name, source in fixtures.load_py_fixture(path).items():
        if name in answer_ids:
            cells[name], helpers = "\n\n".join([*helpers, source]), []
        else:
            helpers.append(source)
    return cells


def _notebook(folder: str, assignment: str):
    return nbformat.read(REPO / folder / assignment / f"{assignment}.ipynb", as_version=4)


def max_points(assignment: str) -> dict[str, float]:
    """grade_id -> points of every graded cell of the chapter's source notebook."""
    cells = [cell.metadata.get("nbgrader") or {} for cell in _notebook("solutions", assignment).cells]
    return {marks["grade_id"]: marks["points"] for marks in cells if marks.get("grade")}


CHAPTERS = (
    Chapter("01_mlp_by_hand", "01_mlp_by_hand", "mlp"),
    Chapter("02_collectives", "ring", "ring"),
    # Each DDP fixture is the whole 'ddp' cell; the lesson times real ranks.
    Chapter("03_data_parallel", "ddp", "ddp", answers="ddp", cell_timeout=LONG_LESSON_S),
    # Each stage-split fixture is the whole 'split_stages' cell (helpers and all); the lesson trains on real
    # ranks, and the real-run check plays the split on 3 or 4 more, in the notebook and in the judge.
    Chapter("04_model_parallel", "split", "stage_split", answers="split_stages", cell_timeout=LONG_LESSON_S),
    Chapter("05_pipeline_parallel", "pipeline", "pipeline"),
    # The zero-bubble part's fixtures are all checked directly (tests/chapters/test_ch05_pipeline_fixtures):
    # this row grades the part's cells of the chapter's solution and release.
    Chapter("05_pipeline_parallel", "pipeline", "zero_bubble", student_prefix="zb_"),
    Chapter("06_tensor_parallel", "tp", "tensor_parallel"),
    Chapter("06_tensor_parallel", "tp", "vocab_parallel", student_prefix="vocab_"),
    # The block and sequence-parallel part: its fixtures are all checked directly
    # (tests/chapters/test_ch06_sequence_parallel_fixtures.py).
    Chapter("06_tensor_parallel", "tp", "sequence_parallel", answers="over_solution", student_prefix="sp_"),
    # A long lesson, and ten hidden checks run twice (in the notebook and in the judge).
    Chapter("07_zero_fsdp", "zero", "zero", answers="over_solution", cell_timeout=LONG_LESSON_S),
    # The lesson and the capstone train on 4 and 8 ranks.
    Chapter("08_nd_parallelism", "mesh", "mesh", cell_timeout=LONG_LESSON_S),
    Chapter("08_nd_parallelism", "mesh", "capstone", answers="over_solution", student_prefix="capstone_",
            cell_timeout=LONG_LESSON_S),
    # Each test cell kills and resumes real runs a few times; each fixture answers the cells it names.
    Chapter("09_on_the_cluster", "checkpoint", "checkpoint", answers="over_solution",
            cell_timeout=LONG_LESSON_S),
    # The hidden checks run the ring on up to 8 ranks, part by part.
    Chapter("10_context_parallel", "cp", "ring_attention", cell_timeout=LONG_LESSON_S),
    # The lesson times real ranks and calibrates the machine.
    Chapter("11_expert_parallel", "ep", "expert_parallel", cell_timeout=LONG_LESSON_S),
)


def without_imports(source: str) -> str:
    """An answer cell with its own import lines taken out: what a student writes who relies on the
    lesson's opening imports (nn, F, time...), as students naturally do."""
    tree = ast.parse(source)
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    lines = source.splitlines(keepends=True)
    for node in reversed(imports):
        del lines[node.lineno - 1:node.end_lineno]
    return "".join(lines)


def write_solution_student(root: Path, assignment: str, student: str) -> str:
    """One student under root who hands in the chapter's reference solution (its answer cells' own import
    lines taken out, as in the shared run); the chapter's source is linked into root's solutions/."""
    link = root / "solutions" / assignment
    if not link.exists():
        link.symlink_to(REPO / "solutions" / assignment, target_is_directory=True)
    answers = fixtures.solution_sources(_notebook("solutions", assignment))
    solution = {grade_id: without_imports(text) for grade_id, text in answers.items()}
    folder = root / "grading" / "submitted" / student / assignment
    fixtures.write_submission(folder, assignment,
                              fixtures.make_submission(_notebook("notebooks", assignment), solution))
    return student


def write_chapter_class(root: Path, chapters: list[Chapter]) -> list[str]:
    """The chapters' students under root: the reference solution WITHOUT its answer cells' own import
    lines (it must still earn full marks: answers see the lesson's imports, in the notebook and in the
    judge alike), the release left unanswered, and the wrong fixtures."""
    students = []
    assignment = chapters[0].assignment
    (root / "solutions" / assignment).symlink_to(REPO / "solutions" / assignment, target_is_directory=True)
    release = _notebook("notebooks", assignment)
    source = _notebook("solutions", assignment)
    answers = fixtures.solution_sources(source)
    solution = {grade_id: without_imports(text) for grade_id, text in answers.items()}
    classes = {"solution": solution, "release": {}}
    for chapter in chapters:
        classes.update(chapter.wrong())
    prefix = chapters[0].prefix
    for student, answers in classes.items():
        folder = root / "grading" / "submitted" / f"{prefix}_{student}" / assignment
        submission = fixtures.make_submission(release, answers)
        if student == "solution":
            submission = with_worked_answers_shown(submission)
        fixtures.write_submission(folder, assignment, submission)
        students.append(f"{prefix}_{student}")
    return students


def with_worked_answers_shown(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with a first cell of the student's own that sets COURSE_SHOW_ANSWERS=1, so that its
    Problems' worked answers run at once (course_lib.viz.worked_answer), as in the course's headless runs,
    and a last cell that prints the course folders the lesson left in the temporary folder: the graded
    reference is the course's one run of every graded chapter top to bottom
    (test_grading_chapters.test_the_reference_runs_every_cell_and_every_worked_answer)."""
    shown = copy.deepcopy(notebook)
    first_code = next(i for i, cell in enumerate(shown.cells) if cell.cell_type == "code")
    shown.cells.insert(first_code, nbformat.v4.new_code_cell(SHOW_ANSWERS_CELL))
    shown.cells.append(nbformat.v4.new_code_cell(LEFT_IN_TMP_CELL))
    return shown


def cell_timeouts(chapters) -> dict[str, int]:
    """assignment -> its cells' own limit, for the rows that set one."""
    return {chapter.assignment: chapter.cell_timeout for chapter in chapters if chapter.cell_timeout}


def chapters_of(run: str) -> dict[str, list[Chapter]]:
    """assignment -> its rows, for the chapters a grading run holds."""
    grouped: dict[str, list[Chapter]] = {}
    for chapter in CHAPTERS:
        if chapter.run == run:
            grouped.setdefault(chapter.assignment, []).append(chapter)
    return grouped
