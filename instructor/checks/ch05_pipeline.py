"""Hidden checks of chapter 05 (instructor-only): the 1F1B schedule and a pipeline stage run for real.

Part 1 asks the student's one_f_one_b for many (stages, microbatches) pairs, 1 to 8 stages, including
fewer micro-batches than stages and a single stage, some drawn at grading time from a seed taken from
os.urandom; the generator runs in a child process under the exercise's refusal (course_lib, whose
simulator holds the course's generator, and torch.distributed.pipelining, PyTorch's schedules). Part 2
runs the student's run_stage on 2, 3 and 4 real gloo ranks with the course's GPipe and 1F1B op lists,
on a batch drawn from the seed, and compares every gradient with single-process training computed here.
Every failure message names the seed. Every run has a short timeout: a deadlock costs points only.

Test cells of solutions/05_pipeline_parallel/05_pipeline_parallel.ipynb, their points, and their hidden part:

  grade_id                         points  hidden check
  test_one_f_one_b_dependencies       2    check_one_f_one_b_dependencies_hidden(one_f_one_b)
  test_one_f_one_b_memory             2    check_one_f_one_b_memory_hidden(one_f_one_b)
  test_one_f_one_b_makespan           2    check_one_f_one_b_makespan_hidden(one_f_one_b)
  test_run_stage_gpipe                2    check_run_stage_gpipe_hidden(run_stage)
  test_run_stage_1f1b                 2    check_run_stage_1f1b_hidden(run_stage)
  test_run_stage_traffic              2    check_run_stage_traffic_hidden(run_stage)
  test_run_stage_mismatch             1    check_run_stage_mismatch_hidden(run_stage)
                                     --
                                     13

Running refused code fails the check that met it, with feedback naming what was refused. The points of
known-wrong submissions: autograde_tests/fixtures/pipeline/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.ranks import REFUSAL as RUN_STAGE_REFUSAL
from course_lib.grading.checks.ch05_pipeline.ranks import (
    gradient_problems,
    mismatch_problems,
    run_mismatched,
    run_student,
    traffic_problems,
)
from course_lib.grading.checks.ch05_pipeline.visible import REFUSAL, generate_schedules, schedule_problems

from ._seeds import fresh_seed

FIXED_PAIRS = ((4, 8), (1, 1), (1, 5), (2, 1), (3, 2), (8, 3), (5, 5), (2, 9), (6, 12), (8, 16), (7, 1))
STAGE_COUNTS = (2, 3, 4)
TIMEOUT_S = 6           # per run; a correct step takes well under a second once the ranks are up
MISMATCH_TIMEOUT_S = 3
POINTS = {"test_one_f_one_b_dependencies": 2, "test_one_f_one_b_memory": 2, "test_one_f_one_b_makespan": 2,
          "test_run_stage_gpipe": 2, "test_run_stage_1f1b": 2, "test_run_stage_traffic": 2,
          "test_run_stage_mismatch": 1}
_CACHE: dict = {}       # one entry per exercise: the runs of the last function graded


def _with_seed(problems: list[str], seed: int) -> list[str]:
    return [f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)]


def _cached(exercise: str, student, compute):
    key = student.identity()
    entry = _CACHE.get(exercise)
    if entry is None or entry[0] != key:
        seed = fresh_seed()
        entry = _CACHE[exercise] = (key, compute(student, seed), seed, student)  # keeps the ids in key alive
    return entry[1], entry[2]


def _schedules(student, seed):
    rng = random.Random(seed)
    pairs = list(FIXED_PAIRS) + [(rng.randint(1, 8), rng.randint(1, 12)) for _ in range(6)]
    return generate_schedules(student, pairs, TIMEOUT_S)


def _part_one(one_f_one_b, aspect: str, what: str) -> None:
    student = as_student_function(one_f_one_b, "one_f_one_b", refusal=REFUSAL)
    run, seed = _cached("one_f_one_b", student, _schedules)
    fail_with(_with_seed(schedule_problems(run, aspect), seed), what)


def check_one_f_one_b_dependencies_hidden(one_f_one_b) -> None:
    """Every op once, backward after forward, and the stages never wait on each other forever."""
    _part_one(one_f_one_b, "dependencies", "one_f_one_b's ops cannot run in that order on hidden cases")


def check_one_f_one_b_memory_hidden(one_f_one_b) -> None:
    """Stage s never holds more than min(stages - s, microbatches) micro-batches of activations."""
    _part_one(one_f_one_b, "memory",
              "one_f_one_b holds more activations than 1F1B on hidden cases")


def check_one_f_one_b_makespan_hidden(one_f_one_b) -> None:
    """The simulated makespan equals 1F1B's for equal, uneven and communicating stages."""
    _part_one(one_f_one_b, "makespan", "one_f_one_b's simulated makespan is not 1F1B's on hidden cases")


def _stage_runs(student, seed):
    """Per kind, one run per stage count (up to the first that fails); micro-batch counts from the seed."""
    rng = random.Random(seed)

    def run_one(kind: str, stages: int):
        microbatches = rng.randint(1, stages - 1) if stages == 4 else rng.randint(stages, 6)
        return run_student(student, kind, stages, microbatches, seed, TIMEOUT_S)

    return {kind: runs_until_failure(lambda stages, kind=kind: run_one(kind, stages), STAGE_COUNTS)
            for kind in ("gpipe", "1f1b")}


def _part_two(run_stage, problems_of, kinds, what: str) -> None:
    student = as_student_function(run_stage, "run_stage", refusal=RUN_STAGE_REFUSAL)
    runs, seed = _cached("run_stage", student, _stage_runs)
    fail_with(_with_seed([p for kind in kinds for run in runs[kind] for p in problems_of(run)], seed), what)


def check_run_stage_gpipe_hidden(run_stage) -> None:
    """GPipe op lists on 2, 3 and 4 stages: loss and every gradient equal single-process training."""
    _part_two(run_stage, gradient_problems, ("gpipe",),
              "run_stage with GPipe op lists is wrong on hidden cases")


def check_run_stage_1f1b_hidden(run_stage) -> None:
    """1F1B op lists on 2, 3 and 4 stages (one with fewer micro-batches than stages): same gradients."""
    _part_two(run_stage, gradient_problems, ("1f1b",),
              "run_stage with 1F1B op lists is wrong on hidden cases")


def check_run_stage_traffic_hidden(run_stage) -> None:
    """Exactly the pipeline's messages per stage, sends in op order, for every hidden run."""
    _part_two(run_stage, traffic_problems, ("gpipe", "1f1b"), "run_stage's messages are not the pipeline's")


def check_run_stage_mismatch_hidden(run_stage) -> None:
    """A step runs with matching op lists, and stops (error or timeout) with lists that disagree."""
    student = as_student_function(run_stage, "run_stage", refusal=RUN_STAGE_REFUSAL)
    runs, seed = _cached("run_stage", student, _stage_runs)
    completed = runs["gpipe"][0]
    mismatched = run_mismatched(student, seed, MISMATCH_TIMEOUT_S) if completed.completed else completed
    fail_with(_with_seed(mismatch_problems(completed, mismatched), seed),
              "run_stage does not follow its op list")


EXERCISE = Exercise(
    "ch05_pipeline", "05_pipeline_parallel", answers=("one_f_one_b", "run_stage"),
    points=POINTS, fixtures="pipeline", refusals=(REFUSAL, RUN_STAGE_REFUSAL))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_one_f_one_b_dependencies": (check_one_f_one_b_dependencies_hidden, ("one_f_one_b",)),
    "test_one_f_one_b_memory": (check_one_f_one_b_memory_hidden, ("one_f_one_b",)),
    "test_one_f_one_b_makespan": (check_one_f_one_b_makespan_hidden, ("one_f_one_b",)),
    "test_run_stage_gpipe": (check_run_stage_gpipe_hidden, ("run_stage",)),
    "test_run_stage_1f1b": (check_run_stage_1f1b_hidden, ("run_stage",)),
    "test_run_stage_traffic": (check_run_stage_traffic_hidden, ("run_stage",)),
    "test_run_stage_mismatch": (check_run_stage_mismatch_hidden, ("run_stage",)),
}
