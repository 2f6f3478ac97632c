"""Hidden checks of chapter 03 (instructor-only): the DDP wrapper, trained on real gloo ranks.

Every model and batch is drawn from a seed taken at grading time (os.urandom) and named in each failure
message; expected values are computed here, in the judging process: single-process training on the
whole batch, and torch's DistributedDataParallel on the same data (in ranks that run no student code).
Every run has a timeout, so a DDP that deadlocks costs the points of that part and never hangs the grader.

Test cells of solutions/03_data_parallel/03_data_parallel.ipynb, their points, and their hidden check:

  grade_id                    points  hidden check
  test_ddp_broadcast             2    check_ddp_broadcast_hidden(DDP)
  test_ddp_gradients             4    check_ddp_gradients_hidden(DDP)
  test_ddp_frozen_and_tied       2    check_ddp_frozen_and_tied_hidden(DDP)
  test_ddp_unused_parameters     2    check_ddp_unused_hidden(DDP)
  test_ddp_overlap               2    check_ddp_overlap_hidden(DDP)
  test_ddp_buckets               2    check_ddp_buckets_hidden(DDP)
  test_ddp_overlap_buckets       2    check_ddp_overlap_buckets_hidden(DDP)
  test_ddp_one_rank              1    check_ddp_one_rank_hidden(DDP)
                                 --
                                 17

What each one demands:
- broadcast: after DDP(model), every rank (2 and 4 ranks) holds rank 0's parameters and buffers, even
  though each rank built its model from its own seed; ddp.module is the model; ddp(x) is model(x).
- gradients: the course MLP and a transformer block on 2, 3 and 4 ranks, with one bucket, several and
  one per parameter: every step's gradients equal single-process training on the whole batch, and the
  final weights equal it (and, on 3 ranks, torch's DistributedDataParallel's).
- frozen and tied: the same values for a model with a frozen layer and a tied weight, and exactly the
  trainable parameters' bytes all-reduced per step (a tied weight once, a frozen one never).
- unused parameters: a layer the forward never uses (2 and 3 ranks): no hang, values right.
- overlap: each step's first all-reduce starts before loss.backward() returns (the training runs above).
- buckets: in the same runs, every step all-reduces one tensor per bucket of exactly the bytes the
  contract's bucketing gives (reverse parameter order, closed before bucket_size_mb MiB is passed).
- overlap with buckets: where the contract makes several buckets, each step's first all-reduce starts
  before the step's last gradient is ready (not merely before backward() returns).
- one rank: plain training, and not a single communication call.
Every run arms the exercise's refusal (course_lib.grading.checks.ch03_ddp.visible.REFUSAL): a DDP that runs
torch's own DDP, DataParallel, replicate(), FSDP1 or any course_lib code scores 0 on each part it reaches.
The expected points of known-wrong submissions: autograde_tests/fixtures/ddp/expected_scores.json.
"""

from __future__ import annotations

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch03_ddp.buckets import bucket_problems, early_overlap_problems
from course_lib.grading.checks.ch03_ddp.judge import (
    broadcast_problems,
    overlap_problems,
    silence_problems,
    value_problems,
    volume_problems,
)
from course_lib.grading.checks.ch03_ddp.ranks import DDPCase, run_student
from course_lib.grading.checks.ch03_ddp.visible import REFUSAL

from ._seeds import fresh_seed

TIMEOUT_S = 15   # per run of all cases on one world size; the reference needs about 1 s
TORCH_WORLD_SIZE = 3   # torch DDP trains the same cases on this world size too (its runs cost time)
POINTS = {"test_ddp_broadcast": 2, "test_ddp_gradients": 4, "test_ddp_frozen_and_tied": 2,
          "test_ddp_unused_parameters": 2, "test_ddp_overlap": 2, "test_ddp_buckets": 2,
          "test_ddp_overlap_buckets": 2, "test_ddp_one_rank": 1}
# bucket_size_mb: one bucket, several (the MLP's 52-byte limit makes 3 of 40, 16 and 96 bytes; the
# block's 1 kB weights pair up), one per parameter
TRAINING_CASES = (DDPCase("course MLP", 25.0), DDPCase("course MLP", None), DDPCase("course MLP", 0.00005),
                  DDPCase("transformer block", 0.003), DDPCase("transformer block", 25.0))
_REPORTS: dict = {}   # the training runs, shared by the gradient and overlap checks (one entry at a time)


def _with_seed(problems: list[str], seed: int) -> list[str]:
    return [f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)]


def _runs(DDP, world_sizes, cases, seed, kind="train"):  # noqa: N803 - the student's class
    student = as_student_function(DDP, "DDP", refusal=REFUSAL)
    return runs_until_failure(
        lambda world_size: run_student(student, world_size, cases, seed, TIMEOUT_S, kind), world_sizes)


def _training_runs(DDP):  # noqa: N803
    student = as_student_function(DDP, "DDP", refusal=REFUSAL)
    key = (id(student.function), tuple(student.sources))
    if key not in _REPORTS:
        _REPORTS.clear()
        seed = fresh_seed()
        _REPORTS[key] = (_runs(student, (2, 3, 4), TRAINING_CASES, seed), seed, student)
    runs, seed, _ = _REPORTS[key]   # the student object stays referenced, so its id stays its own
    return runs, seed


def check_ddp_broadcast_hidden(DDP) -> None:  # noqa: N803
    seed = fresh_seed()
    problems = [p for run in _runs(DDP, (2, 4), [], seed, "broadcast") for p in broadcast_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP's construction is wrong on hidden cases")


def check_ddp_gradients_hidden(DDP) -> None:  # noqa: N803
    runs, seed = _training_runs(DDP)
    problems = [p for run in runs
                for p in value_problems(run, compare_with_torch=run.world_size == TORCH_WORLD_SIZE,
                                        timeout=TIMEOUT_S)]
    fail_with(_with_seed(problems, seed), "DDP's gradients are wrong on hidden cases")


def check_ddp_frozen_and_tied_hidden(DDP) -> None:  # noqa: N803
    seed = fresh_seed()
    cases = [DDPCase("frozen and tied", 25.0), DDPCase("frozen and tied", None)]
    problems = [p for run in _runs(DDP, (2, 4), cases, seed)
                for p in value_problems(run, compare_with_torch=run.world_size == 2, timeout=TIMEOUT_S)
                + volume_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP mishandles frozen or tied parameters on hidden cases")


def check_ddp_unused_hidden(DDP) -> None:  # noqa: N803
    seed = fresh_seed()
    cases = [DDPCase("unused layer", 25.0), DDPCase("unused layer", None)]
    problems = [p for run in _runs(DDP, (2, 3), cases, seed)
                for p in value_problems(run, compare_with_torch=run.world_size == 2, timeout=TIMEOUT_S)]
    fail_with(_with_seed(problems, seed), "DDP fails when a parameter gets no gradient")


def check_ddp_overlap_hidden(DDP) -> None:  # noqa: N803
    runs, seed = _training_runs(DDP)
    problems = [p for run in runs for p in overlap_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP does not overlap communication with the backward")


def check_ddp_buckets_hidden(DDP) -> None:  # noqa: N803
    runs, seed = _training_runs(DDP)
    problems = [p for run in runs for p in bucket_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP's buckets are wrong on hidden cases")


def check_ddp_overlap_buckets_hidden(DDP) -> None:  # noqa: N803
    runs, seed = _training_runs(DDP)
    problems = [p for run in runs for p in early_overlap_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP's buckets do not start communicating early on hidden cases")


def check_ddp_one_rank_hidden(DDP) -> None:  # noqa: N803
    seed = fresh_seed()
    cases = [DDPCase("course MLP", 25.0), DDPCase("transformer block", None)]
    problems = [p for run in _runs(DDP, (1,), cases, seed)
                for p in value_problems(run, compare_with_torch=False) + silence_problems(run)]
    fail_with(_with_seed(problems, seed), "DDP on 1 rank is wrong")


EXERCISE = Exercise(
    "ch03_ddp", "03_data_parallel", answers=("DDP",),
    points=POINTS, fixtures="ddp", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_ddp_broadcast": (check_ddp_broadcast_hidden, ("DDP",)),
    "test_ddp_gradients": (check_ddp_gradients_hidden, ("DDP",)),
    "test_ddp_frozen_and_tied": (check_ddp_frozen_and_tied_hidden, ("DDP",)),
    "test_ddp_unused_parameters": (check_ddp_unused_hidden, ("DDP",)),
    "test_ddp_overlap": (check_ddp_overlap_hidden, ("DDP",)),
    "test_ddp_buckets": (check_ddp_buckets_hidden, ("DDP",)),
    "test_ddp_overlap_buckets": (check_ddp_overlap_buckets_hidden, ("DDP",)),
    "test_ddp_one_rank": (check_ddp_one_rank_hidden, ("DDP",)),
}
