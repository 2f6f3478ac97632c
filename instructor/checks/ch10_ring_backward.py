"""Hidden checks of chapter 10's ring attention graded on its overlap and with its backward (instructor-only).

Test cells of solutions/10_context_parallel/10_context_parallel.ipynb, their points, and their hidden call:

  grade_id                            points  hidden check
  test_ring_attention_overlap            2    check_ring_attention_overlap_hidden(ring_attention)
  test_ring_backward_dq                  2    check_ring_backward_dq_hidden(ring_attention_backward)
  test_ring_backward_dkdv                3    check_ring_backward_dkdv_hidden(ring_attention_backward)
  test_ring_backward_traffic             2    check_ring_backward_traffic_hidden(ring_attention_backward)
  test_ring_backward_work                1    check_ring_backward_work_hidden(ring_attention_backward)
  test_ring_backward_overlap             2    check_ring_backward_overlap_hidden(ring_attention_backward)
  test_ring_backward_memory              2    check_ring_backward_memory_hidden(ring_attention_backward)
                                        --
                                        14

- overlap: without a mask on 2 to 4 ranks, every point-to-point call of the forward is posted before some
  of its products and waited on after them (the order of the rank's recorded calls and products, not the
  clock); a ring that receives, then computes, fails, with its timeline drawn beside one that overlaps;
- dq, dkdv: against autograd through attention over the whole sequence in float64 (float32 too), on 1 to
  8 ranks, no mask, causal and zig-zag, given the exact output and log-sum-exp of each row;
- traffic: ring neighbours only, exactly K and V's bytes N-1 times and their gradients' N times, no
  collective;
- work: where the gradients are right, at most five products per block the mask leaves (a log-sum-exp
  recomputed from scratch costs a sixth);
- backward overlap: without the mask, on 2 to 8 ranks, where the gradients are right, every transfer of K
  and V and of dK and dV posted before some products and waited on after them, but the gradients' last
  trip home (the last isend and irecv posted, after the last block); a backward that posts and waits
  before computing fails, with its timeline drawn beside one that overlaps;
- backward memory: where the gradients are right, the most new tensor memory a rank holds on the same
  chunk without the mask does not grow from 3 to 8 ranks (by more than a block of K and V): a backward
  that keeps every block it receives holds the whole K and V.
Sizes are drawn at grading time from a seed taken from os.urandom and named in every failure.
The expected points of known-wrong submissions: autograde_tests/fixtures/ring_attention/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase
from course_lib.grading.checks.ch10_ring_attention.visible import REFUSAL as FORWARD_REFUSAL
from course_lib.grading.checks.ch10_ring_backward.judge import (
    backward_memory_problems,
    backward_overlap_problems,
    backward_traffic_problems,
    backward_work_problems,
    grad_problems,
    overlap_problems,
)
from course_lib.grading.checks.ch10_ring_backward.ranks import run_backward, run_forward
from course_lib.grading.checks.ch10_ring_backward.visible import MEMORY_CASE, REFUSAL

from ._seeds import fresh_seed

# per run, as the forward's: the reference backward took ~10 s on 8 ranks at a load of 10 on 2 cores, and
# once more than 20 s at 12 (a hang costs it once: the parts after it fail at once)
TIMEOUT_S = 30
POINTS = {"test_ring_attention_overlap": 2, "test_ring_backward_dq": 2, "test_ring_backward_dkdv": 3,
          "test_ring_backward_traffic": 2, "test_ring_backward_work": 1, "test_ring_backward_overlap": 2,
          "test_ring_backward_memory": 2}
OVERLAP_SIZES = (4, 3, 2)
BACKWARD_SIZES = (4, 3, 8, 2, 1)
MEMORY_INDEX = 4          # where backward_cases puts MEMORY_CASE
_REPORTS: dict = {}      # one submission's runs, shared by its checks (one entry at a time)


def _sizes(rng: random.Random, chunk: int) -> tuple[int, int, int, int]:
    return rng.randint(1, 2), rng.randint(1, 3), chunk, rng.randint(2, 12)


def backward_cases(rng: random.Random) -> list[AttentionCase]:
    """Drawn cases, then the memory case, the same on every world size (at MEMORY_INDEX)."""
    return [AttentionCase(*_sizes(rng, rng.randint(1, 6))),
            AttentionCase(*_sizes(rng, rng.randint(1, 6)), causal=True),
            AttentionCase(*_sizes(rng, 2 * rng.randint(1, 3)), causal=True, layout="zigzag"),
            AttentionCase(*_sizes(rng, rng.randint(2, 5)), "float32", causal=True), MEMORY_CASE]


def _runs(answer, name: str, refusal, run, sizes, cases) -> tuple[list, int]:
    student = as_student_function(answer, name, refusal=refusal)
    key = student.identity()
    if key not in _REPORTS:
        seed = fresh_seed()
        rng = random.Random(seed)
        runs = runs_until_failure(lambda world_size: run(student, world_size, cases(rng), seed, TIMEOUT_S),
                                  sizes)
        _REPORTS.clear()
        _REPORTS[key] = (runs, seed)
    return _REPORTS[key]


def _backward(ring_attention_backward):
    return _runs(ring_attention_backward, "ring_attention_backward", REFUSAL, run_backward, BACKWARD_SIZES,
                 backward_cases)


def _fail(problems: list[str], seed: int, what: str) -> None:
    fail_with([f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], what)


def check_ring_attention_overlap_hidden(ring_attention) -> None:
    """Without a mask, on 2 to 4 ranks: every transfer posted before products and waited on after them."""
    def cases(rng):
        return [AttentionCase(*_sizes(rng, rng.randint(4, 9))), AttentionCase(1, 2, 8, 16, "float32")]
    runs, seed = _runs(ring_attention, "ring_attention", FORWARD_REFUSAL, run_forward, OVERLAP_SIZES, cases)
    _fail([p for run in runs for p in overlap_problems(run)], seed,
          "ring_attention does not hide its transfers behind its products on hidden cases")


def check_ring_backward_dq_hidden(ring_attention_backward) -> None:
    """dq against autograd's, 1 to 8 ranks, no mask, causal and zig-zag, float64 and float32."""
    runs, seed = _backward(ring_attention_backward)
    _fail([p for run in runs for p in grad_problems(run, ("dq",))], seed,
          "ring_attention_backward's dq is wrong on hidden cases")


def check_ring_backward_dkdv_hidden(ring_attention_backward) -> None:
    """dk and dv against autograd's, each on the rank that owns those keys."""
    runs, seed = _backward(ring_attention_backward)
    _fail([p for run in runs for p in grad_problems(run, ("dk", "dv"))], seed,
          "ring_attention_backward's dk or dv is wrong on hidden cases")


def check_ring_backward_traffic_hidden(ring_attention_backward) -> None:
    """Ring neighbours only; K and V's bytes N-1 times and their gradients' N times; no collective."""
    runs, seed = _backward(ring_attention_backward)
    _fail([p for run in runs for p in backward_traffic_problems(run)], seed,
          "ring_attention_backward's traffic is not a ring backward's on hidden cases")


def check_ring_backward_work_hidden(ring_attention_backward) -> None:
    """Where the gradients are right: five products per block the mask leaves, at most."""
    runs, seed = _backward(ring_attention_backward)
    _fail([p for run in runs for p in backward_work_problems(run)], seed,
          "ring_attention_backward computes more than a ring backward on hidden cases")


def check_ring_backward_overlap_hidden(ring_attention_backward) -> None:
    """Without the mask, where the gradients are right: every transfer but the last trip home hidden behind
    products."""
    runs, seed = _backward(ring_attention_backward)
    _fail([p for run in runs for p in backward_overlap_problems(run)], seed,
          "ring_attention_backward does not hide its transfers behind its products on hidden cases")


def check_ring_backward_memory_hidden(ring_attention_backward) -> None:
    """The same chunk on 3 to 8 ranks, where the gradients are right: memory that does not grow with N."""
    runs, seed = _backward(ring_attention_backward)
    _fail(backward_memory_problems(runs, MEMORY_INDEX), seed,
          "ring_attention_backward holds more memory on more ranks on hidden cases")


EXERCISE_CELLS = ("ring_attention_backward",)

EXERCISE = Exercise(
    "ch10_ring_backward", "10_context_parallel", answers=("ring_attention", "ring_attention_backward"),
    points=POINTS, fixtures="ring_attention", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_ring_attention_overlap": (check_ring_attention_overlap_hidden, ("ring_attention",)),
    "test_ring_backward_dq": (check_ring_backward_dq_hidden, ("ring_attention_backward",)),
    "test_ring_backward_dkdv": (check_ring_backward_dkdv_hidden, ("ring_attention_backward",)),
    "test_ring_backward_traffic": (check_ring_backward_traffic_hidden, ("ring_attention_backward",)),
    "test_ring_backward_work": (check_ring_backward_work_hidden, ("ring_attention_backward",)),
    "test_ring_backward_overlap": (check_ring_backward_overlap_hidden, ("ring_attention_backward",)),
    "test_ring_backward_memory": (check_ring_backward_memory_hidden, ("ring_attention_backward",)),
}
