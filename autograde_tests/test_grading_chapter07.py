"""Chapter 07 through the whole grading pipeline: the solution, the unanswered release and the wrong
answers named in conftest.ZERO_GRADED (tests/chapters/test_ch07_zero_fixtures.py grades every fixture).

Graded in chapter 07's own run (conftest.zero_graded_class); each must earn exactly the points per test
cell that autograde_tests/fixtures/zero/expected_scores.json gives it, the solution full marks.
"""

from __future__ import annotations

import pytest

from autograde_tests.conftest import ZERO, ZERO_FIXTURES, ZERO_GRADED, expected_points

pytestmark = pytest.mark.slow


def _expected() -> dict[str, dict[str, int]]:
    return expected_points(ZERO_FIXTURES, ZERO_GRADED)


@pytest.mark.parametrize("name", sorted(_expected()))
def test_zero_submission_earns_exactly_its_expected_points(zero_graded_class, name):
    result = zero_graded_class.results[(ZERO, f"zero_{name}")]
    expected = _expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"


def test_full_marks_solution_needs_no_review(zero_graded_class):
    assert not zero_graded_class.results[(ZERO, "zero_solution")].needs_review
