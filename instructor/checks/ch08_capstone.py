"""Hidden checks of chapter 08's capstone (instructor-only): other meshes, more blocks, other data.

Test cells of solutions/08_nd_parallelism/08_nd_parallelism.ipynb, their points, and their hidden part:

  grade_id              points  hidden check
  test_capstone_groups     2    check_capstone_groups_hidden(capstone_groups)
  test_build_stage         2    check_build_stage_hidden(build_stage)
  test_capstone_loss       4    check_capstone_loss_hidden(capstone_groups, build_stage, capstone_step)

Student code runs only inside forked, sandboxed children (map_isolated, run_ranks). The expected points of
known-wrong submissions: autograde_tests/fixtures/capstone/expected_scores.json.
"""

from __future__ import annotations

import math

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch08_capstone import (
    REFUSAL,
    check_build_stage,
    check_capstone_loss,
    group_problems,
)

from ._seeds import fresh_seed

HIDDEN_MESHES = [((2, 2, 2), ("dp", "tp", "pp")), ((2, 2, 2), ("pp", "tp", "dp")),
                 ((4, 1, 2), ("dp", "pp", "tp")), ((1, 1, 1), ("pp", "dp", "tp")),
                 ((3, 2, 2), ("tp", "dp", "pp"))]


def check_capstone_groups_hidden(capstone_groups) -> None:
    student = as_student_function(capstone_groups, "capstone_groups", refusal=REFUSAL)
    calls = [(shape, names, rank) for shape, names in HIDDEN_MESHES for rank in range(math.prod(shape))]
    try:
        answers = map_isolated(student, [(rank, shape, names) for shape, names, rank in calls],
                               name="capstone_groups", timeout=60)
    except IsolatedCallError as error:
        raise AssertionError(f"capstone_groups failed on the hidden meshes: {error}") from None
    problems = []
    for (shape, names, rank), got in zip(calls, answers, strict=True):
        problems += group_problems(shape, names, rank, got)
    fail_with(problems, "capstone_groups gives a piece the wrong group on a hidden mesh")


def check_build_stage_hidden(build_stage) -> None:
    check_build_stage(as_student_function(build_stage, "build_stage", refusal=REFUSAL), layers=3, seed=11)


def check_capstone_loss_hidden(capstone_groups, build_stage, capstone_step) -> None:
    """3 steps, 4 micro-batches of one sequence per replica, data drawn from a seed chosen now (the 5-step
    run is tests/chapters/test_ch08_capstone.py; 3 keep the test cell inside the grader's cell timeout)."""
    if callable(capstone_step):
        # In the student's kernel (plain functions) the visible check above has just run 8 ranks; a second
        # run would push the test cell past the grader's 20 s cell limit on a loaded machine. The isolated
        # judge, whose verdict caps this cell's score, receives sources instead and runs the check below.
        return
    seed = fresh_seed(2)
    try:
        check_capstone_loss(capstone_groups, build_stage, capstone_step, steps=3, microbatches=4, seed=seed)
    except AssertionError as error:
        raise AssertionError(f"(data seed {seed}) {error}") from None
