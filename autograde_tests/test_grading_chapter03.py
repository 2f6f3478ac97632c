"""Chapter 03 through the whole grading pipeline: the solution, the unanswered release and the wrong DDPs
named in conftest.DDP_GRADED (tests/chapters/test_ch03_ddp_fixtures.py checks the others directly).

Graded in chapter 03's own run (conftest.ddp_graded_class), in the sandbox (3 GiB address space per
process, 4 gloo ranks forked from the kernel); each must earn exactly the points per test cell that
autograde_tests/fixtures/ddp/expected_scores.json gives it, the solution full marks.
"""

from __future__ import annotations

import pytest

from autograde_tests.conftest import DDP, DDP_FIXTURES, DDP_GRADED, expected_points

pytestmark = pytest.mark.slow


def _expected() -> dict[str, dict[str, int]]:
    return expected_points(DDP_FIXTURES, DDP_GRADED)


@pytest.mark.parametrize("name", sorted(_expected()))
def test_ddp_submission_earns_exactly_its_expected_points(ddp_graded_class, name):
    result = ddp_graded_class.results[(DDP, f"ddp_{name}")]
    expected = _expected()[name]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{name}: {result.notes}"


def test_full_marks_solution_needs_no_review(ddp_graded_class):
    assert not ddp_graded_class.results[(DDP, "ddp_solution")].needs_review


def test_the_late_all_reduce_reaches_the_student_drawn_against_the_backward(ddp_graded_class):
    """The overlap cell's failure, as the student reads it in the graded notebook's feedback."""
    result = ddp_graded_class.results[(DDP, "ddp_after_backward")]
    notebook = ddp_graded_class.root / "grading" / "autograded" / "ddp_after_backward" / DDP / f"{DDP}.ipynb"
    text = notebook.read_text()
    assert result.cells["test_ddp_overlap"] == 0
    assert "after loss.backward() returned" in text and "your recorded step:" in text
    assert "backward " in text and "all_reduce " in text and "bytes" in text


def test_a_deadlocked_ddp_is_stopped_and_named(ddp_graded_class):
    notebook = ddp_graded_class.root / "grading" / "autograded" / "ddp_unused_deadlock" / DDP / f"{DDP}.ipynb"
    assert "did not finish on 2 ranks" in notebook.read_text()
