"""The solution notebooks that the shared grading run does not already run top to bottom (chapter 00: no
graded exercise): each runs headless within its budget and leaves no folder of its own behind in the
temporary folder (a student runs a chapter many times).

Every graded chapter's reference runs top to bottom, worked answers shown, as a student of the shared
grading run, and prints what it left in its sandbox's own /tmp (autograde_tests/test_grading_chapters.py);
benchmarks/bench_notebooks.py times them all.
"""

import tempfile
from pathlib import Path

import pytest

from autograde_tests.support.chapter_classes import CHAPTERS
from tests.support.notebooks import execute_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
GRADED = {chapter.assignment for chapter in CHAPTERS}
RUN_HERE = [path for path in SOLUTION_NOTEBOOKS if path.parent.name not in GRADED]
HEADLESS_BUDGET_S = 180   # CHAPTERS.md: under 3 minutes headless on the 2-core machine


def _course_folders() -> set[Path]:
    """The course's folders in the temporary folder, but a Slurm job's (course-jobs-*: sbatch writes the
    job's output there, for the student to read after the job)."""
    return {p for p in Path(tempfile.gettempdir()).glob("course-*") if not p.name.startswith("course-jobs-")}


@pytest.mark.slow
@pytest.mark.parametrize("path", RUN_HERE, ids=lambda p: p.parent.name)
def test_solution_notebook_runs_headless(path):
    before = _course_folders()
    _, seconds = execute_notebook(path, cell_timeout=150, total_timeout=HEADLESS_BUDGET_S)
    print(f"{path.parent.name}: {seconds:.1f} s")
    left = sorted(str(p) for p in _course_folders() - before)
    assert not left, f"{path.parent.name} left {left}: write under one tempfile.TemporaryDirectory"


def test_there_are_chapters():
    assert SOLUTION_NOTEBOOKS, "solutions/ holds no chapter notebook"
