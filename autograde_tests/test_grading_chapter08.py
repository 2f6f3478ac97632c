"""Chapter 08 through the whole grading pipeline: the solution, the unanswered release, every wrong mapping.

Graded in the shared run (conftest.graded_class); each fixture must earn exactly the points per test
cell that autograde_tests/fixtures/mesh/expected_scores.json gives it, the solution full marks.
"""

from __future__ import annotations

import pytest

from autograde_tests.conftest import CAPSTONE_FIXTURES, MESH, MESH_FIXTURES, expected_points

pytestmark = pytest.mark.slow


def _expected() -> dict[str, dict[str, int]]:
    return expected_points(MESH_FIXTURES)


@pytest.mark.parametrize("name", sorted(_expected()))
def test_mesh_submission_earns_exactly_its_expected_points(graded_class, name):
    result = graded_class.results[(MESH, f"mesh_{name}")]
    expected = _expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"


def test_full_marks_solution_needs_no_review(graded_class):
    assert not graded_class.results[(MESH, "mesh_solution")].needs_review


def _capstone_expected() -> dict[str, dict[str, int]]:
    return expected_points(CAPSTONE_FIXTURES, prefix="capstone_")


@pytest.mark.parametrize("name", sorted(_capstone_expected()))
def test_capstone_submission_earns_exactly_its_expected_points(graded_class, name):
    result = graded_class.results[(MESH, f"mesh_{name}")]
    expected = _capstone_expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"
