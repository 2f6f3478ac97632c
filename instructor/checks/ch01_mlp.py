"""Hidden checks of chapter 01 (instructor-only): the manual backward pass on cases the student never saw.

Inputs are drawn at grading time from seeds taken from os.urandom, so reading these checks gives no
answers; every failure message names its seed so the case can be replayed with ``random_mlp_case``.

Each gradient is a graded part of its own (a student with dL/dW2 right and dL/dW1 wrong keeps dL/dW2's
points). Every part runs the same hidden cases: the course's shapes with new weights and data (one with
most ReLUs off), other layer and batch sizes, batches of one sample, and a case whose hidden
pre-activations are exactly 0 for one sample (ReLU's derivative there is PyTorch's 0). Each check takes
the student's function, either the function object (in the notebook's kernel) or a ``StudentFunction``
built from the solution cell's source (isolated re-grading); every call runs in one forked child
(sandboxed under the judge) through ``map_isolated``, with autograd off and the exercise's refusal armed,
and only the gradients, the input and the weights as the call left them come back. A part is lost when
its gradient is wrong or when the call changed, in place, the tensor it is the gradient of.

Test cells of solutions/01_mlp_by_hand/01_mlp_by_hand.ipynb and what their hidden part calls:

  grade_id ``test_manual_backward_W2`` -> check_manual_backward_hidden_W2(manual_backward)
  grade_id ``test_manual_backward_b2`` -> check_manual_backward_hidden_b2(manual_backward)
  grade_id ``test_manual_backward_W1`` -> check_manual_backward_hidden_W1(manual_backward)
  grade_id ``test_manual_backward_b1`` -> check_manual_backward_hidden_b1(manual_backward)
  grade_id ``test_manual_backward_x``  -> check_manual_backward_hidden_x(manual_backward)

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
    unchanged_inputs,
)
from course_lib.models import HIDDEN_UNITS, IN_FEATURES, OUT_FEATURES

from ._seeds import fresh_rng


def _hidden_cases() -> list:
    """(seed, batch, (in, hidden, out), hidden bias shift): course shapes, other shapes, batches of one."""
    rng = fresh_rng()
    course = (IN_FEATURES, HIDDEN_UNITS, OUT_FEATURES)
    cases = [(rng.randrange(2**31), 32, course, 0.0) for _ in range(2)]
    cases.append((rng.randrange(2**31), 32, course, -1.5))  # most ReLUs switched off
    cases += [(rng.randrange(2**31), rng.randint(2, 48),
               (rng.randint(1, 12), rng.randint(2, 12), rng.randint(2, 5)), 0.0) for _ in range(3)]
    cases.append((rng.randrange(2**31), rng.randint(2, 16), (rng.randint(2, 8), rng.randint(2, 8), 1), 0.0))
    cases += [(rng.randrange(2**31), 1, course, 0.0),
              (rng.randrange(2**31), 1, (rng.randint(1, 9), rng.randint(2, 9), rng.randint(2, 5)), 0.0)]
    return cases


def with_preactivations_at_zero(x, y, params):
    """The case with the first sample one-hot (its input k is 1, the rest 0) and half the hidden biases
    set to -W1[:, k]: those units' pre-activations are exactly 0 for it (each product is exact, and x + -x
    is 0 in any order of summation), where ReLU's derivative is PyTorch's 0, not 1. The input's weights
    still reach dL/dW1 (its input is 1), so the rule shows in dW1, db1 and dx."""
    x, params = x.clone(), {key: value.clone() for key, value in params.items()}
    k = x.shape[1] // 2
    x[0] = 0.0
    x[0, k] = 1.0
    half = params["W1"].shape[0] // 2 + 1
    params["b1"][:half] = -params["W1"][:half, k]
    return x, y, params


def _check_part(manual_backward, name: str) -> None:
    cases = _hidden_cases()
    inputs, labels = [], []
    for seed, batch, sizes, shift in cases:
        inputs.append(random_mlp_case(seed, batch, *sizes, hidden_bias_shift=shift))
        labels.append(f"hidden case: batch {batch}, shapes {sizes[0]}->{sizes[1]}->{sizes[2]}, seed {seed}"
                      + (f", hidden biases shifted by {shift}" if shift else ""))
    seed = fresh_rng().randrange(2**31)
    inputs.append(with_preactivations_at_zero(*random_mlp_case(seed, 8, IN_FEATURES, HIDDEN_UNITS,
                                                               OUT_FEATURES)))
    labels.append(f"hidden case: batch 8, the course's shapes, seed {seed}, the first sample's hidden "
                  "pre-activations exactly 0 on half the units (ReLU's derivative there is 0, as PyTorch's)")
    results = gradients_by_hand(manual_backward, inputs, "a hidden case")
    for (x, y, params), (got, given), label in zip(inputs, results, labels, strict=True):
        tensors = {**params, "x": x}
        unchanged_inputs(given, tensors, label, (name,))
        compare_gradients(got, autograd_gradients(x, y, params), tensors, label, (name,))
    print(f"{FUNCTION_NAME}'s dL/d{name} passed {len(inputs)} hidden cases")


def check_manual_backward_hidden_W2(manual_backward) -> None:
    """dL/dW2, the output layer's weight gradient (section 4 derives it)."""
    _check_part(manual_backward, "W2")


def check_manual_backward_hidden_b2(manual_backward) -> None:
    """dL/db2, the output layer's bias gradient (section 4 derives it)."""
    _check_part(manual_backward, "b2")


def check_manual_backward_hidden_W1(manual_backward) -> None:
    """dL/dW1: through W2, the ReLU and the hidden layer (the student's derivation)."""
    _check_part(manual_backward, "W1")


def check_manual_backward_hidden_b1(manual_backward) -> None:
    """dL/db1: through W2 and the ReLU, summed over the batch (the student's derivation)."""
    _check_part(manual_backward, "b1")


def check_manual_backward_hidden_x(manual_backward) -> None:
    """dL/dx, what a pipeline stage sends back (the student's derivation)."""
    _check_part(manual_backward, "x")


POINTS = {
    "test_manual_backward_W2": 1,
    "test_manual_backward_b2": 1,
    "test_manual_backward_W1": 2,
    "test_manual_backward_b1": 1,
    "test_manual_backward_x": 2,
}
EXERCISE = Exercise(
    "ch01_mlp", "01_mlp_by_hand", answers=("manual_backward",),
    points=POINTS, fixtures="mlp", refusals=(REFUSAL,), on_ranks=False)
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_manual_backward_W2": (check_manual_backward_hidden_W2, ("manual_backward",)),
    "test_manual_backward_b2": (check_manual_backward_hidden_b2, ("manual_backward",)),
    "test_manual_backward_W1": (check_manual_backward_hidden_W1, ("manual_backward",)),
    "test_manual_backward_b1": (check_manual_backward_hidden_b1, ("manual_backward",)),
    "test_manual_backward_x": (check_manual_backward_hidden_x, ("manual_backward",)),
}
