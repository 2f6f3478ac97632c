"""What a student reads in the graded notebook when a check fails: chapter 03's late all-reduce drawn against
the backward, a deadlocked DDP stopped and named, and a DDP built on torch's own refused and named
(graded in chapter 03's own run, conftest.ddp_graded_class; their points are held by
test_grading_chapters.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
DDP = "03_data_parallel"


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


def test_a_ddp_built_on_torchs_own_is_told_what_was_refused(ddp_graded_class):
    """Issue 27's shortcut: torch's DistributedDataParallel made visible with record_ddp_buckets."""
    result = ddp_graded_class.results[(DDP, "ddp_torch_ddp")]
    notebook = ddp_graded_class.root / "grading" / "autograded" / "ddp_torch_ddp" / DDP / f"{DDP}.ipynb"
    text = notebook.read_text()
    assert sum(result.cells.values()) == 0
    assert "DistributedDataParallel" in text and "which this exercise refuses" in text
