"""Hidden checks of chapter 06's vocabulary-parallel cross-entropy (instructor-only).

The student's loss runs on 1, 2, 3 and 4 real gloo ranks under the exercise's refusal (course_lib, DTensor
and the functional collectives), on logits and targets drawn at grading time from a seed taken from
os.urandom: vocabularies that do not divide by the rank count, slices of random uneven widths, one token
and several, float32 and float64, and logits large enough that exp overflows in float32 without the
maximum subtracted; the float64 case's backward starts from a drawn upstream gradient (a scaled loss), not
1. Every expected value is F.cross_entropy on the whole logits, computed here in float64; each failure
message names the seed.

Test cells of solutions/06_tensor_parallel/06_tensor_parallel.ipynb, their points, and their hidden part:

  grade_id                              points  hidden check
  test_vocab_parallel_loss_values          2    check_vocab_parallel_loss_values_hidden(your loss)
  test_vocab_parallel_loss_gradients       2    check_vocab_parallel_loss_gradients_hidden(your loss)
  test_vocab_parallel_loss_traffic         2    check_vocab_parallel_loss_traffic_hidden(your loss)

Traffic: on every run with two ranks or more, only all-reduces, and the same bytes for two vocabularies of
different sizes over the same tokens (the logits never cross the ranks); a failure draws both recordings
beside what is expected. The expected points of known-wrong submissions:
autograde_tests/fixtures/vocab_parallel/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch06_vocab_loss.visible import (
    NAME,
    REFUSAL,
    LossCase,
    gradient_problems,
    run_losses,
    traffic_problems,
    value_problems,
)

from ._seeds import fresh_seed

WORLD_SIZES = (4, 2, 1, 3)       # the usual case first, so a wrong loss fails fast
TIMEOUT_S = 20
POINTS = {"test_vocab_parallel_loss_values": 2, "test_vocab_parallel_loss_gradients": 2,
          "test_vocab_parallel_loss_traffic": 2}
_CACHE: dict = {}                # the runs of the last function graded, for its three checks


def _widths(rng: random.Random, vocab: int, world_size: int) -> tuple:
    """Slice widths of at least one class each, uneven, summing to ``vocab``."""
    cuts = sorted(rng.sample(range(1, vocab), world_size - 1)) if world_size > 1 else []
    bounds = [0, *cuts, vocab]
    return tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))


def hidden_cases(rng: random.Random, world_size: int) -> list[LossCase]:
    """Two vocabularies over the same tokens (the traffic pair), large logits, float64, one token."""
    tokens = rng.randint(2, 8)
    small = rng.choice([v for v in range(world_size + 2, 24) if v % world_size or world_size == 1])
    large = small + world_size * rng.randint(5, 9) + 1
    cases = [LossCase(tokens, small, splits=_widths(rng, small, world_size)),
             LossCase(tokens, large, splits=_widths(rng, large, world_size)),
             LossCase(rng.randint(2, 6), rng.randint(world_size, 30), scale=rng.uniform(1.0, 5.0),
                      offset=rng.uniform(100.0, 200.0)),
             LossCase(rng.randint(2, 6), rng.randint(world_size, 30), "float64",
                      upstream=rng.choice((0.25, 3.0, 1024.0))),      # a scaled loss: AMP, accumulation
             LossCase(1, rng.randint(world_size, 30))]
    return cases


def _runs(student):
    key = student.identity()
    if _CACHE.get("key") != key:
        seed = fresh_seed(5)
        rng = random.Random(seed)

        def run_one(world_size: int):
            return run_losses(student, world_size, hidden_cases(rng, world_size), seed, TIMEOUT_S)

        runs = runs_until_failure(run_one, WORLD_SIZES)
        _CACHE.clear()
        _CACHE.update(key=key, seed=seed, runs=runs, student=student)   # keeps the ids in key alive
    return _CACHE


def _check(candidate, judge, what: str) -> None:
    run = _runs(as_student_function(candidate, NAME, refusal=REFUSAL))
    problems = [p for one in run["runs"] for p in judge(one)]
    fail_with([f"{p}\n  (hidden test seed {run['seed']})" for p in dict.fromkeys(problems)], what, limit=3)


def check_vocab_parallel_loss_values_hidden(vocab_parallel_cross_entropy) -> None:
    """Every rank's loss equals F.cross_entropy on the whole logits, for every hidden case."""
    _check(vocab_parallel_cross_entropy, value_problems,
           f"{NAME} is not the cross-entropy of the whole logits on hidden cases")


def check_vocab_parallel_loss_gradients_hidden(vocab_parallel_cross_entropy) -> None:
    """Every rank's gradient is its slice of F.cross_entropy's gradient, for every hidden case."""
    _check(vocab_parallel_cross_entropy, gradient_problems,
           f"{NAME}'s gradient is not F.cross_entropy's on hidden cases")


def check_vocab_parallel_loss_traffic_hidden(vocab_parallel_cross_entropy) -> None:
    """All-reduces only, the same bytes for two vocabularies over the same tokens (2 to 4 ranks)."""
    _check(vocab_parallel_cross_entropy, lambda run: traffic_problems(run) if run.world_size > 1 else [],
           f"{NAME} moves more than per-token values on hidden cases")


EXERCISE = Exercise(
    "ch06_vocab_loss", "06_tensor_parallel", answers=("vocab_parallel_cross_entropy",),
    points=POINTS, fixtures="vocab_parallel", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_vocab_parallel_loss_values": (
        check_vocab_parallel_loss_values_hidden, ("vocab_parallel_cross_entropy",)),
    "test_vocab_parallel_loss_gradients": (
        check_vocab_parallel_loss_gradients_hidden, ("vocab_parallel_cross_entropy",)),
    "test_vocab_parallel_loss_traffic": (
        check_vocab_parallel_loss_traffic_hidden, ("vocab_parallel_cross_entropy",)),
}
