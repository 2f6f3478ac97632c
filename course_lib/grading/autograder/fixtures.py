"""Making submissions from the release notebook: replace solution cells' sources by grade_id.

Fixtures (tests, the demo class, the benchmark) are small dicts {grade_id: source}, so they follow a
chapter when its notebook changes; only the named solution cells differ from an unanswered release.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from course_lib.notebook_cells import answer_ids, answer_sources, marks


def solution_sources(source_notebook) -> dict[str, str]:
    """grade_id -> the instructor's full answer of every solution cell (markers removed)."""
    return answer_sources(source_notebook, strip_markers=True)


def solution_ids(notebook) -> list[str]:
    return answer_ids(notebook)


def make_submission(release_notebook, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of the release with the named solution cells' sources replaced; unknown names raise."""
    notebook = copy.deepcopy(release_notebook)
    unknown = set(answers) - set(solution_ids(notebook))
    if unknown:
        raise KeyError(f"no solution cell with grade_id {sorted(unknown)} in this notebook; "
                       f"its solution cells are {solution_ids(notebook)}")
    for cell in notebook.cells:
        grade_id = marks(cell).get("grade_id")
        if grade_id in answers and marks(cell).get("solution"):
            cell.source = answers[grade_id]
    return notebook


def load_py_fixture(path: Path) -> dict[str, str]:
    """A fixture file `<name>.py` whose top-level functions and classes answer the solution cells of the
    same name.

    Returns {name: its source, with the file's imports in front} for every def and class in the file.
    """
    import ast

    text = path.read_text()
    tree = ast.parse(text)
    header = "\n".join(ast.get_source_segment(text, n) for n in tree.body
                       if isinstance(n, (ast.Import, ast.ImportFrom)))
    return {node.name: (header + "\n\n" if header else "") + ast.get_source_segment(text, node)
            for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def write_submission(folder: Path, notebook_name: str, notebook) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{notebook_name}.ipynb"
    nbformat.write(notebook, path)
    return path
