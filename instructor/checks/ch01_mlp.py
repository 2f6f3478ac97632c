"""Hidden checks of chapter 01 (instructor-only): the manual backward pass on cases the student never saw.

Inputs are drawn at grading time from seeds taken from os.urandom, so reading these checks gives no
answers; every failure message names its seed so the case can be replayed with ``random_mlp_case``.

Each check takes the student's function, either the function object (in the notebook's kernel) or a
``StudentFunction`` built from the solution cell's source (isolated re-grading); every call runs in one
forked child (sandboxed under the judge) through ``map_isolated``, with autograd off and the exercise's
refusal armed, and only the gradients and the weights as the call left them come back. A check raises
AssertionError with a message for the student when it is wrong.

Test cells of solutions/01_mlp_by_hand/01_mlp_by_hand.ipynb and what their hidden part calls:

  grade_id ``test_manual_backward_course``  -> check_manual_backward_hidden_seeds(manual_backward)
  grade_id ``test_manual_backward_shapes``  -> check_manual_backward_hidden_shapes(manual_backward)
  grade_id ``test_manual_backward_batch_of_one`` -> check_manual_backward_hidden_batch_of_one(manual_backward)

The student's function is named ``manual_backward``; it may use the lesson's own imports.
"""

from __future__ import annotations

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch01_mlp.visible import (
    FUNCTION_NAME,
    REFUSAL,
    autograd_gradients,
    compare_gradients,
    gradients_by_hand,
    random_mlp_case,
    unchanged_weights,
)
from course_lib.models import HIDDEN_UNITS, IN_FEATURES, OUT_FEATURES

from ._seeds import fresh_rng


def _check_cases(manual_backward, cases) -> None:
    inputs, names = [], []
    for seed, batch, sizes, shift in cases:
        inputs.append(random_mlp_case(seed, batch, *sizes, hidden_bias_shift=shift))
        names.append(f"hidden case: batch {batch}, shapes {sizes[0]}->{sizes[1]}->{sizes[2]}, seed {seed}"
                     + (f", hidden biases shifted by {shift}" if shift else ""))
    results = gradients_by_hand(manual_backward, inputs, "a hidden case")
    for (x, y, params), (got, given), case in zip(inputs, results, names, strict=True):
        unchanged_weights(given, params, case)
        compare_gradients(got, autograd_gradients(x, y, params), params, case)
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases")


def check_manual_backward_hidden_seeds(manual_backward) -> None:
    """The course's shapes and batch size, new weights and data; one case with most ReLUs switched off."""
    rng = fresh_rng()
    sizes = (IN_FEATURES, HIDDEN_UNITS, OUT_FEATURES)
    cases = [(rng.randrange(2**31), 32, sizes, 0.0) for _ in range(3)]
    cases.append((rng.randrange(2**31), 32, sizes, -1.5))
    _check_cases(manual_backward, cases)


def check_manual_backward_hidden_shapes(manual_backward) -> None:
    """Layer sizes other than 6->4->2 (wide, narrow, a single output) and batch sizes other than 32."""
    rng = fresh_rng()
    cases = [(rng.randrange(2**31), rng.randint(2, 48),
              (rng.randint(1, 12), rng.randint(1, 12), rng.randint(1, 5)), 0.0) for _ in range(4)]
    cases.append((rng.randrange(2**31), rng.randint(2, 16), (rng.randint(2, 8), rng.randint(2, 8), 1), 0.0))
    _check_cases(manual_backward, cases)


def check_manual_backward_hidden_batch_of_one(manual_backward) -> None:
    """A batch of a single sample, where a sum over the batch and a squeeze are easy to confuse."""
    rng = fresh_rng()
    cases = [(rng.randrange(2**31), 1, (IN_FEATURES, HIDDEN_UNITS, OUT_FEATURES), 0.0),
             (rng.randrange(2**31), 1, (rng.randint(1, 9), rng.randint(1, 9), 1), 0.0),
             (rng.randrange(2**31), 1, (rng.randint(1, 9), rng.randint(1, 9), rng.randint(2, 5)), 0.0)]
    _check_cases(manual_backward, cases)


POINTS = {
    "test_manual_backward_course": 2,
    "test_manual_backward_shapes": 2,
    "test_manual_backward_batch_of_one": 1,
}
EXERCISE = Exercise(
    "ch01_mlp", "01_mlp_by_hand", answers=("manual_backward",),
    points=POINTS, fixtures="mlp", refusals=(REFUSAL,), on_ranks=False)
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_manual_backward_course": (check_manual_backward_hidden_seeds, ("manual_backward",)),
    "test_manual_backward_shapes": (check_manual_backward_hidden_shapes, ("manual_backward",)),
    "test_manual_backward_batch_of_one": (check_manual_backward_hidden_batch_of_one, ("manual_backward",)),
}
