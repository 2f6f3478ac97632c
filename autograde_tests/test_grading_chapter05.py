"""Chapter 05 through the whole grading pipeline: the solution, the unanswered release, every wrong answer.

Graded in the shared run (conftest.graded_class); each fixture must earn exactly the points per test
cell that autograde_tests/fixtures/pipeline/expected_scores.json gives it, the solution full marks.
"""

from __future__ import annotations

import pytest

from autograde_tests.conftest import PIPELINE, PIPELINE_FIXTURES, expected_points

pytestmark = pytest.mark.slow


def _expected() -> dict[str, dict[str, int]]:
    return expected_points(PIPELINE_FIXTURES)


@pytest.mark.parametrize("name", sorted(_expected()))
def test_pipeline_submission_earns_exactly_its_expected_points(graded_class, name):
    result = graded_class.results[(PIPELINE, f"pipeline_{name}")]
    expected = _expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"


def test_full_marks_solution_needs_no_review(graded_class):
    assert not graded_class.results[(PIPELINE, "pipeline_solution")].needs_review
