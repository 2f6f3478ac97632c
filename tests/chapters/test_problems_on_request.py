"""Every chapter's Problems show their worked answers only when the student asks (CHAPTERS.md: "printed
only when the student asks for it, after their own attempt"): each answer cell that prints is a
``%%worked_answer`` cell (a button on Run All, course_lib.viz.worked_answer), the extension loaded before
the first; chapter 11 asks for the student's number first and prints the worked one beside it."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb"))
HEADING = re.compile(r"^## (\d+\. )?Problems", re.M)
LOAD = "%load_ext course_lib.viz.worked_answer"
ASKS_FOR_THE_STUDENTS_NUMBER = {"11_expert_parallel"}   # my_answer = ..., then compare(my_answer, worked)


def _problem_cells(path: Path) -> list:
    cells = nbformat.read(path, as_version=4).cells
    start = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and HEADING.search(c.source)),
                 None)
    if start is None:
        return []
    end = next((i for i in range(start + 1, len(cells))
                if cells[i].cell_type == "markdown" and cells[i].source.startswith("## ")), len(cells))
    return [c for c in cells[start:end] if c.cell_type == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_worked_answers_are_shown_when_asked(path):
    cells = _problem_cells(path)
    if path.parent.name == "00_orientation":
        assert not cells   # the orientation has no problems: it measures the machine the course runs on
        return
    assert cells, f"{path.parent.name} has no Problems section"
    if path.parent.name in ASKS_FOR_THE_STUDENTS_NUMBER:
        for source in (c.source for c in cells if "print(" in c.source and "def compare(" not in c.source):
            assert "if my_answer is not None:" in source, source[:200]
        return
    sources = [c.source for c in cells]
    first = next(i for i, source in enumerate(sources) if source.startswith("%%worked_answer"))
    assert LOAD in sources[:first], f"{path.parent.name}: load the extension before the first answer"
    for source in sources:
        assert source.startswith("%%worked_answer") or "print(" not in source, source[:200]
