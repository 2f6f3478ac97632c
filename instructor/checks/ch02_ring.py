"""Hidden checks of chapter 02 (instructor-only): the ring reduce-scatter, all-gather and all-reduce.

Each check runs the student's function on real gloo ranks for world sizes 1, 2, 3, 4, 5 and 8, on
lengths smaller than, equal to, and not divisible by the world size, in float32/float64/int64 (and, for
the all-reduce, a 2-D tensor and non-contiguous views). Input values and some lengths are drawn at
grading time from a seed taken from os.urandom; every expected value is computed here, in the judging
process, never by the student's code. Each failure message names the seed.

A check accepts the function itself (in the notebook's kernel) or a ``StudentFunction`` built from the
solution cells' sources (isolated re-grading; ``.resolve()`` runs only inside the rank processes).
Every run has a short timeout, so a deadlocking submission fails with an explanation and never hangs
the grader; once a submission has hung, the later all-reduce checks fail at once without re-running it.

Test cells of solutions/02_collectives/02_collectives.ipynb, their points, and what their hidden part calls:

  grade_id                              points  hidden check
  test_ring_reduce_scatter                 3    check_ring_reduce_scatter_hidden(ring_reduce_scatter)
  test_ring_all_gather                     3    check_ring_all_gather_hidden(ring_all_gather)
  test_ring_all_reduce_values              3    check_ring_all_reduce_hidden(ring_all_reduce)
  test_ring_all_reduce_traffic             2    check_ring_all_reduce_traffic_hidden(ring_all_reduce)
  test_ring_all_reduce_no_collectives      2    check_ring_all_reduce_no_collectives_hidden(ring_all_reduce)
  test_ring_all_reduce_no_deadlock         2    check_ring_all_reduce_no_deadlock_hidden(ring_all_reduce)
                                          --
                                          15

What each one demands (every check fails if the function raises, hangs or calls a collective):
- reduce-scatter: chunk ``rank`` of ``torch.tensor_split(tensor, N)`` holds the sum over ranks; exactly
  N-1 sends, all to the right neighbour, at most (N-1)/N of the bytes plus one element per step.
- all-gather: starting with only chunk ``rank`` valid, every chunk ends equal to its owner's; same traffic.
- all-reduce values: every rank's tensor (any shape, strided views too) holds the sum, in place, and
  elements outside a view are untouched.
- all-reduce traffic: 2(N-1) sends to the right neighbour only, at most 2(N-1)/N of the bytes + 1 element
  per step (values are not judged here, so the pattern earns its points on its own).
- no collectives: the right sum (in place or returned) with every collective forbidden.
- no deadlock: the right sum on a 1 MB tensor on 4 ranks within the timeout (and no hang before).
The expected points of known-wrong submissions: autograde_tests/fixtures/ring/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import failures, runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import StudentFunction, as_student_function
from course_lib.grading.checks.ch02_ring.judge import forbidden_problems, traffic_problems, value_problems
from course_lib.grading.checks.ch02_ring.ranks import RingCase, run_student
from course_lib.grading.checks.ch02_ring.visible import REFUSAL

from ._seeds import fresh_seed

WORLD_SIZES = (4, 3, 8, 5, 2, 1)   # the usual case first: a wrong ring fails fast
TIMEOUT_S = 10                     # per run of all cases on one world size; a correct ring needs < 1 s
LARGE_LENGTH = 2**18 + 3           # 1 MB of float32: big enough that only a real exchange finishes
POINTS = {"test_ring_reduce_scatter": 3, "test_ring_all_gather": 3, "test_ring_all_reduce_values": 3,
          "test_ring_all_reduce_traffic": 2, "test_ring_all_reduce_no_collectives": 2,
          "test_ring_all_reduce_no_deadlock": 2}
_REPORTS: dict = {}                # the all-reduce runs, shared by its four checks (one entry at a time)


def flat_cases(world_size: int, rng: random.Random) -> list[RingCase]:
    """1-D contiguous cases: shorter than, equal to, not divisible by and divisible by the world size."""
    n = world_size
    odd = n * rng.randint(1, 4) + rng.randint(1, max(n - 1, 1))
    return [RingCase((max(n - 1, 1),), "float32"), RingCase((n,), "int64"), RingCase((odd,), "float64"),
            RingCase((4 * n,), "float32"), RingCase((2 * n + 1,), "int64")]


def all_reduce_cases(world_size: int, rng: random.Random) -> list[RingCase]:
    """The flat cases, a 2-D tensor, and non-contiguous views (a column of a wider buffer)."""
    n = world_size
    return flat_cases(n, rng) + [RingCase((3, n + 2), "float32"),
                                 RingCase((2 * n + 1,), "float64", strided=True),
                                 RingCase((2, n + 1), "int64", strided=True)]


def _runs(student: StudentFunction, kind: str, cases_for, seed: int) -> list:
    """One run per world size (all cases in one run_ranks call); stops at the first that raises or hangs."""
    rng = random.Random(seed)

    def run_one(world_size: int):
        return run_student(student, kind, world_size, cases_for(world_size, rng), seed, TIMEOUT_S)

    return runs_until_failure(run_one, WORLD_SIZES)


def _with_seed(problems: list[str], seed: int) -> list[str]:
    return [f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)]


def _all_reduce_report(ring_all_reduce) -> tuple[list, int]:
    student = as_student_function(ring_all_reduce, "ring_all_reduce", refusal=REFUSAL)
    key = student.identity()
    if key not in _REPORTS:
        _REPORTS.clear()
        seed = fresh_seed()
        _REPORTS[key] = (_runs(student, "all_reduce", all_reduce_cases, seed), seed, student)
    runs, seed, _ = _REPORTS[key]  # the student object stays referenced, so the ids in the key stay its own
    return runs, seed


def check_ring_reduce_scatter_hidden(ring_reduce_scatter) -> None:
    """Values of the owned chunk and the ring's traffic, for every world size and case."""
    student = as_student_function(ring_reduce_scatter, "ring_reduce_scatter", refusal=REFUSAL)
    seed = fresh_seed()
    problems = []
    for run in _runs(student, "reduce_scatter", flat_cases, seed):
        problems += value_problems(run, "reduce_scatter") + traffic_problems(run, "reduce_scatter")
    fail_with(_with_seed(problems, seed), "ring_reduce_scatter is wrong on hidden cases")


def check_ring_all_gather_hidden(ring_all_gather) -> None:
    """Every chunk arrives everywhere, with the ring's traffic, for every world size and case."""
    student, seed = as_student_function(ring_all_gather, "ring_all_gather", refusal=REFUSAL), fresh_seed()
    problems = []
    for run in _runs(student, "all_gather", flat_cases, seed):
        problems += value_problems(run, "all_gather") + traffic_problems(run, "all_gather")
    fail_with(_with_seed(problems, seed), "ring_all_gather is wrong on hidden cases")


def check_ring_all_reduce_hidden(ring_all_reduce) -> None:
    """The sum on every rank, in place, for every world size, length, dtype and layout."""
    runs, seed = _all_reduce_report(ring_all_reduce)
    problems = [p for run in runs for p in value_problems(run, "all_reduce")]
    fail_with(_with_seed(problems, seed), "ring_all_reduce gives wrong values on hidden cases")


def check_ring_all_reduce_traffic_hidden(ring_all_reduce) -> None:
    """Right neighbour only, exactly 2(N-1) messages, at most 2(N-1)/N of the bytes (+1 element a step)."""
    runs, seed = _all_reduce_report(ring_all_reduce)
    problems = [p for run in runs for p in traffic_problems(run, "all_reduce")]
    fail_with(_with_seed(problems, seed), "ring_all_reduce's traffic is not a ring's on hidden cases")


def check_ring_all_reduce_no_collectives_hidden(ring_all_reduce) -> None:
    """A correct sum (in place or returned) reached with every collective forbidden."""
    runs, seed = _all_reduce_report(ring_all_reduce)
    problems = [p for run in runs
                for p in forbidden_problems(run) + value_problems(run, "all_reduce", need_in_place=False)]
    fail_with(_with_seed(problems, seed), "ring_all_reduce must be a working all-reduce made only of "
                                          "send/recv/isend/irecv")


def check_ring_all_reduce_no_deadlock_hidden(ring_all_reduce) -> None:
    """No hang on any hidden case, and a correct sum of a 1 MB tensor on 4 ranks within the timeout."""
    runs, seed = _all_reduce_report(ring_all_reduce)
    hung = failures(run for run in runs if run.hung)
    if not hung:
        student = as_student_function(ring_all_reduce, "ring_all_reduce", refusal=REFUSAL)
        large = run_student(student, "all_reduce", 4, [RingCase((LARGE_LENGTH,), "float32")], seed, TIMEOUT_S)
        hung = value_problems(large, "all_reduce", need_in_place=False)
    fail_with(_with_seed(hung, seed), "ring_all_reduce did not finish correctly on every rank")


EXERCISE_CELLS = ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce")


EXERCISE = Exercise(
    "ch02_ring", "02_collectives", answers=("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce"),
    points=POINTS, fixtures="ring", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_ring_reduce_scatter": (check_ring_reduce_scatter_hidden, ("ring_reduce_scatter",)),
    "test_ring_all_gather": (check_ring_all_gather_hidden, ("ring_all_gather",)),
    "test_ring_all_reduce_values": (check_ring_all_reduce_hidden, ("ring_all_reduce",)),
    "test_ring_all_reduce_traffic": (check_ring_all_reduce_traffic_hidden, ("ring_all_reduce",)),
    "test_ring_all_reduce_no_collectives": (
        check_ring_all_reduce_no_collectives_hidden, ("ring_all_reduce",)),
    "test_ring_all_reduce_no_deadlock": (check_ring_all_reduce_no_deadlock_hidden, ("ring_all_reduce",)),
}
