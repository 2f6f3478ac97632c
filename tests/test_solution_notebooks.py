"""Every chapter's solution notebook runs top to bottom headless within its time budget, and leaves no
folder of its own behind in the temporary folder (a student runs a chapter many times)."""

import tempfile
from pathlib import Path

import pytest

from tests.support.notebooks import execute_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))


def _course_folders() -> set[Path]:
    """The course's folders in the temporary folder, but a Slurm job's (course-jobs-*: sbatch writes the
    job's output there, for the student to read after the job)."""
    return {p for p in Path(tempfile.gettempdir()).glob("course-*") if not p.name.startswith("course-jobs-")}


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTION_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_solution_notebook_runs_headless(path):
    before = _course_folders()
    _, seconds = execute_notebook(path, cell_timeout=150, total_timeout=180)
    print(f"{path.parent.name}: {seconds:.1f} s")
    left = sorted(str(p) for p in _course_folders() - before)
    assert not left, f"{path.parent.name} left {left}: write under one tempfile.TemporaryDirectory"


def test_there_are_chapters():
    assert SOLUTION_NOTEBOOKS, "solutions/ holds no chapter notebook"
