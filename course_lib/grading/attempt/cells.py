"""The one reader of a notebook's nbgrader cells: its answer (solution) cells and any cell by grade_id.

Graders, fixtures, the isolated judge and the lessons that reuse a student's earlier answers (chapter 03's
ring, chapter 08's capstone) all read cells through here, from a path or an already-read notebook.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

SOLUTION_MARKERS = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$\n?", re.MULTILINE)


def read_notebook(notebook):
    """A notebook (nbformat node or plain dict) as given, or read from a path."""
    if isinstance(notebook, (str, Path)):
        import nbformat

        return nbformat.read(str(notebook), as_version=4)
    return notebook


def marks(cell) -> dict:
    """The cell's nbgrader metadata (empty for a cell nbgrader does not manage)."""
    return cell.get("metadata", {}).get("nbgrader") or {}


def _source(cell) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def answer_cells(notebook) -> Iterator[tuple[str, str]]:
    """(grade_id, source) of every answer cell (nbgrader ``solution``), in notebook order."""
    for cell in read_notebook(notebook).get("cells", []):
        if marks(cell).get("solution") and marks(cell).get("grade_id"):
            yield marks(cell)["grade_id"], _source(cell)


def answer_ids(notebook) -> list[str]:
    return [grade_id for grade_id, _ in answer_cells(notebook)]


def answer_sources(notebook, strip_markers: bool = False) -> dict[str, str]:
    """grade_id -> source of every answer cell; ``strip_markers`` drops ``### BEGIN/END SOLUTION``."""
    return {grade_id: SOLUTION_MARKERS.sub("", source) if strip_markers else source
            for grade_id, source in answer_cells(notebook)}


def sources_by_id(notebook, grade_ids: Sequence[str], answers_only: bool = False) -> list[str]:
    """The sources of the cells named ``grade_ids``, in that order; a missing one raises KeyError naming it.

    ``answers_only`` looks only at answer cells (a student's own code, never a lesson's cell)."""
    notebook = read_notebook(notebook)
    found = {marks(cell).get("grade_id"): _source(cell) for cell in notebook.get("cells", [])
             if marks(cell).get("grade_id") and (marks(cell).get("solution") or not answers_only)}
    missing = [grade_id for grade_id in grade_ids if grade_id not in found]
    if missing:
        raise KeyError(f"the notebook has no {'answer ' if answers_only else ''}cell with grade_id "
                       f"{', '.join(map(repr, missing))}; is it the right chapter's notebook?")
    return [found[grade_id] for grade_id in grade_ids]
