"""Chapter 03 through the whole grading pipeline: the solution, the unanswered release, the wrong DDPs.

Graded in the shared run (conftest.graded_class); each fixture must earn exactly the points per test
cell that autograde_tests/fixtures/ddp/expected_scores.json gives it, the solution full marks (the
fixtures that expected_scores.json's "not_in_shared_run" names are graded by
tests/chapters/test_ch03_ddp_fixtures.py).
"""

from __future__ import annotations

import json

import pytest

from autograde_tests.conftest import DDP_CHAPTER, DDP_FIXTURES

pytestmark = pytest.mark.slow


def _expected() -> dict[str, dict[str, int]]:
    table = json.loads((DDP_FIXTURES / "expected_scores.json").read_text())
    unanswered = {cell: 0 for cell in table["max_points"]}
    wrong = {name: points for name, points in table["fixtures"].items()
             if name not in table["not_in_shared_run"]}
    return {"solution": table["solution"], "release": unanswered, **wrong}


@pytest.mark.parametrize("name", sorted(_expected()))
def test_ddp_submission_earns_exactly_its_expected_points(graded_class, name):
    result = graded_class.results[(DDP_CHAPTER, f"ddp_{name}")]
    expected = _expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"


def test_full_marks_solution_needs_no_review(graded_class):
    assert not graded_class.results[(DDP_CHAPTER, "ddp_solution")].needs_review
