"""Hidden checks of chapter 08's capstone (instructor-only): other meshes, more blocks, other data.

Test cells of solutions/08_nd_parallelism/08_nd_parallelism.ipynb, their points, and their hidden part:

  grade_id              points  hidden check
  test_capstone_groups     2    check_capstone_groups_hidden(capstone_groups)
  test_build_stage         2    check_build_stage_hidden(build_stage)
  test_capstone_loss       4    check_capstone_loss_hidden(capstone_groups, build_stage, capstone_step)
  test_layout_fits         2    check_layout_fits_hidden(capstone_layout)
  test_layout_fast         3    check_layout_fast_hidden(capstone_layout)
  test_tied_weight         3    check_tied_weight_hidden(tied_step)

The expected groups are enumerated here (ch08_mesh.enumerate_layout), never in course_lib. The loss runs on
an asymmetric mesh (4 data-parallel replicas, 2 stages, no tensor parallelism) whose data follows torch's
own mesh, so tensor- and data-parallel groups swapped fail. The layout is judged on other jobs: smaller
nodes, a model that fits with data parallelism alone, a 128K vocabulary. The tied weight runs on a mesh with
tensor parallelism and no data parallelism, the pipeline innermost (a rank's copies 3 ranks apart, its
tensor-parallel partner 4 apart), on weights and data drawn from a seed chosen now. Student code runs only in
children, under the capstone's Refusal. The expected points of known-wrong submissions:
autograde_tests/fixtures/capstone/expected_scores.json.
"""

from __future__ import annotations

import math

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch08_capstone.layout import VISIBLE_JOBS, check_layout_fast, check_layout_fits
from course_lib.grading.checks.ch08_capstone.tied import check_tied_weight
from course_lib.grading.checks.ch08_capstone.visible import (
    PIECE_OF_DIMENSION,
    REFUSAL,
    check_build_stage,
    check_capstone_loss,
)
from course_lib.grading.checks.ch08_mesh.visible import judge_calls, student_answers

from ._seeds import fresh_seed
from .ch08_mesh import enumerate_layout

HIDDEN_MESHES = [((2, 2, 2), ("dp", "tp", "pp")), ((2, 2, 2), ("pp", "tp", "dp")),
                 ((4, 1, 2), ("dp", "pp", "tp")), ((1, 1, 1), ("pp", "dp", "tp")),
                 ((3, 2, 2), ("tp", "dp", "pp"))]
LOSS_MESH = ((2, 4, 1), ("pp", "dp", "tp"))
TIED_MESH = ((2, 1, 4), ("tp", "dp", "pp"))
# (layers, hidden, heads, seq_len, vocab, nodes, gpus_per_node, global_batch), beside the visible two
HIDDEN_JOBS = VISIBLE_JOBS + ((32, 4096, 32, 4096, 32000, 4, 4, 64), (24, 2048, 16, 2048, 32000, 4, 4, 64),
                              (48, 6144, 48, 4096, 50000, 2, 8, 64), (80, 8192, 64, 8192, 128256, 8, 8, 128))


def check_capstone_groups_hidden(capstone_groups) -> None:
    calls, expected = [], []
    for shape, names in HIDDEN_MESHES:
        layout = enumerate_layout(shape, names)
        for rank in range(math.prod(shape)):
            calls.append((rank, shape, names))
            expected.append({PIECE_OF_DIMENSION[n]: layout[rank]["groups"][n] for n in names})
    outcomes = student_answers({"capstone_groups": capstone_groups},
                               [("capstone_groups", args) for args in calls], "capstone_groups", REFUSAL)
    judge_calls("capstone_groups", calls, outcomes, expected,
                "capstone_groups gives a piece the wrong group on a hidden mesh")


def check_build_stage_hidden(build_stage) -> None:
    check_build_stage(build_stage, layers=3, seed=11)


def check_capstone_loss_hidden(capstone_groups, build_stage, capstone_step) -> None:
    """3 steps on the asymmetric mesh, 2 micro-batches per replica, data drawn from a seed chosen now."""
    if callable(capstone_groups):
        # In the student's kernel (plain functions) the visible check above has just run 8 ranks; a second
        # run would push the test cell past the grader's cell limit on a loaded machine. The isolated
        # judge, whose verdict caps this cell's score, receives sources instead and runs the check below.
        return
    seed = fresh_seed(2)
    try:
        check_capstone_loss(capstone_groups, build_stage, capstone_step, steps=3, microbatches=2, seed=seed,
                            mesh=LOSS_MESH)
    except AssertionError as error:
        raise AssertionError(f"(data seed {seed}) {error}") from None


def check_layout_fits_hidden(capstone_layout) -> None:
    check_layout_fits(capstone_layout, jobs=HIDDEN_JOBS)


def check_layout_fast_hidden(capstone_layout) -> None:
    check_layout_fast(capstone_layout, jobs=HIDDEN_JOBS)


def check_tied_weight_hidden(tied_step) -> None:
    """3 steps on TIED_MESH (TP 2, DP 1, PP 4, the pipeline innermost), weights and data from a fresh seed."""
    seed = fresh_seed(2)
    try:
        check_tied_weight(tied_step, mesh=TIED_MESH, steps=3, seed=seed)
    except AssertionError as error:
        raise AssertionError(f"(seed {seed}) {error}") from None


POINTS = {"test_capstone_groups": 2, "test_build_stage": 2, "test_capstone_loss": 4, "test_layout_fits": 2,
          "test_layout_fast": 3, "test_tied_weight": 3}
EXERCISE = Exercise(
    "ch08_capstone", "08_nd_parallelism",
    answers=("capstone_groups", "build_stage", "capstone_step", "capstone_layout", "tied_step"),
    points=POINTS, fixtures="capstone", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_capstone_groups": (check_capstone_groups_hidden, ("capstone_groups",)),
    "test_build_stage": (check_build_stage_hidden, ("build_stage",)),
    "test_capstone_loss": (check_capstone_loss_hidden, ("capstone_groups", "build_stage", "capstone_step")),
    "test_layout_fits": (check_layout_fits_hidden, ("capstone_layout",)),
    "test_layout_fast": (check_layout_fast_hidden, ("capstone_layout",)),
    "test_tied_weight": (check_tied_weight_hidden, ("tied_step",)),
}
