"""Chapter 08's capstone: the loader's choices, and the 8-rank run equal to one process (slow)."""

import pathlib
from collections import Counter

import pytest
import torch
from torch import nn

from course_lib import capstone
from course_lib.capstone.loader import solution_cells
from course_lib.grading.checks.ch08_capstone import expected_groups

REPO = pathlib.Path(__file__).resolve().parents[2]
CH08 = REPO / "solutions" / "08_nd_parallelism" / "08_nd_parallelism.ipynb"


def _chapter08_answers() -> tuple:
    """capstone_groups, build_stage and capstone_step as the solution notebook defines them."""
    names = ("mesh_coordinates", "mesh_groups", "capstone_groups", "build_stage", "capstone_step")
    space = {"torch": torch, "nn": nn, "math": __import__("math")}
    exec(solution_cells(CH08, names), space)   # noqa: S102 - the course's own reference answers
    return space["capstone_groups"], space["build_stage"], space["capstone_step"]


def test_the_release_notebooks_are_unanswered_so_every_piece_is_a_stand_in():
    pieces = capstone.load_pieces(REPO / "notebooks")
    assert all(p.source is None and "unanswered" in p.origin for p in pieces.values()), pieces


def test_the_solution_notebooks_give_every_piece():
    pieces = capstone.load_pieces(REPO / "solutions")
    assert all(p.source is not None and p.origin.startswith("your own") for p in pieces.values()), pieces


def test_a_missing_notebook_is_said_so(tmp_path):
    pieces = capstone.load_pieces(tmp_path)
    assert all("no answer cells found" in p.origin for p in pieces.values())


def test_expected_groups_follow_torch_row_major_grid():
    assert expected_groups((2, 2, 2), ("pp", "dp", "tp"), 5) == {
        "pipeline": [1, 5], "data_parallel": [5, 7], "tensor_parallel": [4, 5]}


@pytest.mark.slow
@pytest.mark.parametrize("source", ["solutions", "stand-ins"])
def test_capstone_loss_equals_single_process_training_for_5_steps_on_8_ranks(source):
    loaded = capstone.load_pieces(REPO / "solutions") if source == "solutions" else {}
    run = capstone.run_capstone(loaded, *_chapter08_answers(), steps=5)
    origins = run["ranks"][0]["origins"]
    assert all(("your own" in o) == (source == "solutions") for o in origins.values()), origins
    assert run["losses"] == pytest.approx(capstone.single_process_losses(5), abs=1e-5)
    if source == "solutions":   # the notebook's claim: TP talks most often, then the pipeline, DP least
        calls = Counter(e[0] for e in run["ranks"][0]["traffic"] if e[1] != "broadcast")
        assert calls["tp"] > calls["pp"] > calls["dp"] == 5, calls   # one gradient all-reduce per step
