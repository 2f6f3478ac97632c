"""What a student reads in the graded notebook when a check fails: chapter 03's late all-reduce drawn against
the backward and a DDP built on torch's own refused and named; chapter 08's shortcuts refused by name and
chapter 07's first three cells graded each on its own (all in the shared run, conftest.graded_class). Their
points are held by test_grading_chapters.py; a deadlocked DDP, stopped and named, is checked directly
(tests/chapters/test_ch03_ddp_fixtures.py), as the probe class's deadlock goes through the pipeline."""

from __future__ import annotations

import re

import nbformat
import pytest

from course_lib.grading.settings import CODE_ROOT

pytestmark = pytest.mark.slow
DDP = "03_data_parallel"


def test_the_late_all_reduce_reaches_the_student_drawn_against_the_backward(graded_class):
    """The overlap cell's failure, as the student reads it in the graded notebook's feedback."""
    result = graded_class.results[(DDP, "ddp_after_backward")]
    notebook = graded_class.root / "grading" / "autograded" / "ddp_after_backward" / DDP / f"{DDP}.ipynb"
    text = notebook.read_text()
    assert result.cells["test_ddp_overlap"] == 0
    assert "after loss.backward() returned" in text and "your recorded step:" in text
    assert "backward " in text and "all_reduce " in text and "bytes" in text


def test_a_ddp_built_on_torchs_own_is_told_what_was_refused(graded_class):
    """Issue 27's shortcut: torch's DistributedDataParallel made visible with record_ddp_buckets."""
    result = graded_class.results[(DDP, "ddp_torch_ddp")]
    notebook = graded_class.root / "grading" / "autograded" / "ddp_torch_ddp" / DDP / f"{DDP}.ipynb"
    text = notebook.read_text()
    assert sum(result.cells.values()) == 0
    assert "DistributedDataParallel" in text and "which this exercise refuses" in text
ND = "08_nd_parallelism"


def _autograded(graded, student: str, assignment: str) -> str:
    return (graded.root / "grading" / "autograded" / student / assignment / f"{assignment}.ipynb").read_text()


def test_a_mesh_read_off_torchs_device_mesh_is_refused_by_name(graded_class):
    """Chapter 08's shortcut through torch's DeviceMesh: the student reads which module was refused."""
    text = _autograded(graded_class, "mesh_device_mesh_mapping", ND)
    assert "which this exercise refuses" in text and "torch.distributed.device_mesh" in text


def test_a_capstone_reading_course_lib_is_refused_by_name(graded_class):
    text = _autograded(graded_class, "mesh_capstone_reads_course_layout", ND)
    assert "which this exercise refuses" in text and "course_lib" in text


def test_chapter_07s_first_cells_are_graded_each_on_its_own(graded_class):
    """floor_shard loses only shard_parameters' points, padding_in_gathered only gather_parameters': each
    check hands its function the inputs it built (their points are held by test_grading_chapters.py)."""
    text = _autograded(graded_class, "zero_floor_shard", "07_zero_fsdp")
    assert "shard_parameters gave wrong shards" in text and "gather_parameters did not" not in text
    text = _autograded(graded_class, "zero_padding_in_gathered", "07_zero_fsdp")
    assert "gather_parameters did not rebuild the tensors" in text


def test_no_output_names_the_checkout_or_the_grading_runs_scratch_folder(graded_class):
    """Issue 58: what the feedback shows of every cell's outputs (tracebacks through course_lib, files the
    ranks wrote) reads relative to the course (autograder/course_paths.py), for every student of the shared
    run; a path a student's code merely spells (a glob, in its source) is theirs."""
    scratch = re.compile(r"/course-grading-[a-z0-9_]{8}/")
    graded = sorted((graded_class.root / "grading" / "autograded").glob("*/*/*.ipynb"))
    assert len(graded) > 40
    named = set()
    for path in graded:
        notebook = nbformat.read(path, as_version=4)
        outputs = nbformat.writes(nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell(outputs=cell.outputs) for cell in notebook.cells
            if cell.cell_type == "code"]))
        if f"{CODE_ROOT}/" in outputs or scratch.search(outputs):
            named.add(path.parent.parent.name)
    assert not named, f"outputs naming {CODE_ROOT} or the run's scratch folder: {sorted(named)}"
