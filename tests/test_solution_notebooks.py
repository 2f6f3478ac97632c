"""Every chapter's solution notebook runs top to bottom headless within its time budget."""

from pathlib import Path

import pytest

from tests.support.notebooks import execute_notebook

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTION_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_solution_notebook_runs_headless(path):
    _, seconds = execute_notebook(path, cell_timeout=150, total_timeout=180)
    print(f"{path.parent.name}: {seconds:.1f} s")


def test_there_are_chapters():
    assert SOLUTION_NOTEBOOKS, "solutions/ holds no chapter notebook"
