"""Chapter 01 through the whole grading pipeline: the solution earns full marks, the release left
unanswered earns 0 without stopping the run (graded in the shared run, conftest.graded_class)."""

import nbformat
import pytest

from autograde_tests.conftest import MLP, REPO

pytestmark = pytest.mark.slow


def max_points() -> dict[str, float]:
    source = nbformat.read(REPO / "solutions" / MLP / f"{MLP}.ipynb", as_version=4)
    return {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"]["points"]
            for cell in source.cells if (cell.metadata.get("nbgrader") or {}).get("grade")}


def test_the_chapter_has_graded_cells():
    assert sum(max_points().values()) > 0


def test_solution_earns_full_marks(graded_class):
    result = graded_class.results[(MLP, f"{MLP}_solution")]
    assert {cell: result.cells.get(cell) for cell in max_points()} == max_points(), result.notes
    assert not result.needs_review, result.notes


def test_unanswered_release_earns_zero(graded_class):
    result = graded_class.results[(MLP, f"{MLP}_release")]
    assert {cell: result.cells.get(cell) for cell in max_points()} == dict.fromkeys(max_points(), 0), \
        result.notes
