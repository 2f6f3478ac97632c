"""Hidden checks of chapter 01 (instructor-only): the manual backward pass on cases the student never saw.

Inputs are drawn at grading time from seeds taken from os.urandom, so reading these checks gives no
answers; every failure message names its seed so the case can be replayed with ``random_mlp_case``.

Each check takes the student's function, either the function object (in the notebook's kernel) or a
``StudentFunction`` built from the solution cell's source (isolated re-grading: every call then runs in
one forked, sandboxed child through ``map_isolated`` and only the gradients come back), and raises
AssertionError with a message for the student when it is wrong.

Test cells of solutions/01_mlp_by_hand/01_mlp_by_hand.ipynb and what their hidden part calls:

  grade_id ``test_manual_backward_course``  -> check_manual_backward_hidden_seeds(manual_backward)
  grade_id ``test_manual_backward_shapes``  -> check_manual_backward_hidden_shapes(manual_backward)
  grade_id ``test_manual_backward_batch_of_one`` -> check_manual_backward_hidden_batch_of_one(manual_backward)

The student's function is named ``manual_backward``; it needs only the names STUDENT_PRELUDE supplies.
"""

from __future__ import annotations

import io
import tokenize

import torch

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.student_function import StudentFunction, as_student_function
from course_lib.grading.checks.ch01_mlp import autograd_gradients, compare_gradients, random_mlp_case
from course_lib.models import HIDDEN_UNITS, IN_FEATURES, OUT_FEATURES

from ._seeds import fresh_rng

FUNCTION_NAME = "manual_backward"
# Names that would hand the exercise back to autograd (comments and strings are not searched).
AUTOGRAD_NAMES = {"backward", "autograd", "enable_grad", "set_grad_enabled", "requires_grad",
                  "requires_grad_", "vjp", "jacrev", "jacfwd"}


def _code_names(source: str) -> set[str]:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return set()
    return {token.string for token in tokens if token.type == tokenize.NAME}


def _refuse_autograd(student: StudentFunction) -> None:
    used = sorted(_code_names(student.source_text()) & AUTOGRAD_NAMES)
    if used:
        raise AssertionError(f"manual_backward uses {', '.join(used)}: this exercise is the backward pass by"
                             " hand, from the formulas, with autograd switched off")


def _check_cases(manual_backward, cases) -> None:
    student = as_student_function(manual_backward, name=FUNCTION_NAME)
    _refuse_autograd(student)
    inputs, names = [], []
    for seed, batch, sizes, shift in cases:
        inputs.append(random_mlp_case(seed, batch, *sizes, hidden_bias_shift=shift))
        names.append(f"hidden case: batch {batch}, shapes {sizes[0]}->{sizes[1]}->{sizes[2]}, seed {seed}"
                     + (f", hidden biases shifted by {shift}" if shift else ""))
    calls = [(x.clone(), y.clone(), {k: v.clone() for k, v in params.items()}) for x, y, params in inputs]
    try:
        with torch.no_grad():  # forked children inherit the switch: autograd stays off there too
            results = map_isolated(student, calls, name=FUNCTION_NAME, timeout=60)
    except IsolatedCallError as error:
        raise AssertionError(f"{FUNCTION_NAME} failed on a hidden case: {error}") from None
    for (x, y, params), (_, _, given), got, case in zip(inputs, calls, results, names, strict=True):
        for name, value in params.items():
            if not torch.equal(given[name], value):
                raise AssertionError(f"{FUNCTION_NAME} changed params[{name!r}] in place: compute gradients "
                                     f"only, leave the weights as they were ({case})")
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
