"""Chapter 08's capstone: the loader's choices, the runs equal to one process (slow), and the capstone
fixtures not sent through the grading pipeline, each earning exactly its points against the checks."""

import json
import pathlib
from collections import Counter

import pytest
import torch
from torch import nn

from course_lib import capstone
from course_lib.capstone.loader import solution_cells
from course_lib.capstone.two_d import one_process_losses, run_your_pieces_2d
from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import load_py_fixture, solution_sources
from course_lib.grading.checks.ch08_capstone import layout, tied, visible

REPO = pathlib.Path(__file__).resolve().parents[2]
CH08 = REPO / "solutions" / "08_nd_parallelism" / "08_nd_parallelism.ipynb"
FIXTURES = REPO / "autograde_tests" / "fixtures" / "capstone"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
hidden = instructor_checks("ch08_capstone")
CELLS = {"test_capstone_groups": (("capstone_groups",), visible.check_capstone_groups,
                                  hidden.check_capstone_groups_hidden),
         "test_build_stage": (("build_stage",), visible.check_build_stage, hidden.check_build_stage_hidden),
         "test_capstone_loss": (("capstone_groups", "build_stage", "capstone_step"),
                                visible.check_capstone_loss, hidden.check_capstone_loss_hidden),
         "test_layout_fits": (("capstone_layout",), layout.check_layout_fits,
                              hidden.check_layout_fits_hidden),
         "test_layout_fast": (("capstone_layout",), layout.check_layout_fast,
                              hidden.check_layout_fast_hidden),
         "test_tied_weight": (("tied_step",), tied.check_tied_weight, hidden.check_tied_weight_hidden)}
CHECKED_HERE = sorted(set(EXPECTED["fixtures"]) - set(EXPECTED["graded_through_nbgrader"]))


def _chapter08_answers() -> tuple:
    """capstone_groups, build_stage and capstone_step as the solution notebook defines them."""
    names = ("mesh_coordinates", "mesh_groups", "capstone_groups", "build_stage", "capstone_step")
    space = {"torch": torch, "nn": nn, "math": __import__("math")}
    exec(solution_cells(CH08, names), space)   # noqa: S102 - the course's own reference answers
    return space["capstone_groups"], space["build_stage"], space["capstone_step"]


def test_the_release_notebooks_are_unanswered_so_every_piece_is_a_stand_in():
    pieces = capstone.load_pieces(REPO / "notebooks")
    assert set(pieces) == {"tensor_parallel", "pipeline", "data_parallel", "fsdp"}
    assert all(p.source is None and "unanswered" in p.origin for p in pieces.values()), pieces


def test_the_solution_notebooks_give_every_piece():
    pieces = capstone.load_pieces(REPO / "solutions")
    assert all(p.source is not None and p.origin.startswith("your own") for p in pieces.values()), pieces


def test_a_missing_notebook_is_said_so(tmp_path):
    pieces = capstone.load_pieces(tmp_path)
    assert all("no answer cells found" in p.origin for p in pieces.values())


def test_nothing_a_student_has_lays_out_the_capstone_groups():
    """The capstone's reference groups come from torch's DeviceMesh or instructor/checks, never course_lib."""
    course = "\n".join(p.read_text() for p in (REPO / "course_lib").rglob("*.py"))
    assert "expected_groups" not in course


def test_the_capstone_mesh_must_name_pp_dp_and_tp():
    with pytest.raises(ValueError, match="pp, dp and tp"):
        capstone.run_capstone({}, *_chapter08_answers(), mesh_shape=(2, 4), mesh_names=("dp", "tp"))


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


@pytest.mark.slow
def test_your_tensor_parallel_and_fsdp_on_a_2d_mesh_equal_one_process():
    run = run_your_pieces_2d(capstone.load_pieces(REPO / "solutions"), steps=3)
    assert run["losses"] == pytest.approx(one_process_losses(3), abs=1e-5)
    assert {dimension for dimension, *_ in run["traffic"]} == {"dp", "tp"}
    assert run_your_pieces_2d(capstone.load_pieces(REPO / "notebooks")) is None   # unanswered: no run


@pytest.mark.slow
@pytest.mark.parametrize("fixture", CHECKED_HERE)
def test_each_capstone_fixture_checked_here_earns_exactly_its_points(fixture):
    """A cell whose answers the fixture does not replace runs the solution's: it must expect the solution's
    points there, and is not run again (the 8-rank loss check is the chapter's slowest)."""
    replaced = load_py_fixture(FIXTURES / f"{fixture}.py")
    answers = {**solution_sources(__import__("nbformat").read(str(CH08), as_version=4)), **replaced}
    sources = ("import math\nimport torch", *answers.values())
    points = {}
    for cell, (names, visible_check, hidden_check) in CELLS.items():
        if not set(names) & set(replaced):
            points[cell] = EXPECTED["solution"][cell]
            continue
        functions = [StudentFunction(n, sources=sources) for n in names]
        passed = True
        for check in (visible_check, hidden_check):
            try:
                check(*functions)
            except AssertionError:
                passed = False
        points[cell] = EXPECTED["max_points"][cell] if passed else 0
    assert points == EXPECTED["fixtures"][fixture], (fixture, EXPECTED["why"][fixture])
