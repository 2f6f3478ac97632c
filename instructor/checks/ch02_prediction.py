"""Hidden checks of chapter 02's prediction exercise (instructor-only): gloo's all-reduce time on links,
sizes, rank counts and segment sizes drawn at grading time, from the student's own formula.

Test cells of solutions/02_collectives/02_collectives.ipynb and what their hidden part calls:

  grade_id ``test_predict_gloo_all_reduce``  -> check_predict_hidden(predict_gloo_all_reduce)
  grade_id ``test_predict_gloo_own_formula`` -> check_predict_own_formula(predict_gloo_all_reduce)
"""

from __future__ import annotations

import inspect
import random

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch02_prediction import FUNCTION_NAME, compare_prediction

from ._seeds import fresh_seed
from .ch01_mlp import _code_names

POINTS = {"test_predict_gloo_all_reduce": 3, "test_predict_gloo_own_formula": 1}

# Names that would hand the formula back to the course's simulator (comments and strings not searched).
LIBRARY_NAMES = {"course_lib", "collective_time", "predict_all_reduce", "ring_segments", "_segmented_ring",
                 "importlib", "__import__", "globals", "eval", "exec", "sys", "builtins"}


# Always tried: an empty buffer, a tiny one, and a segment count that must be rounded up to whole chunks.
FIXED_CASES = [(0, 5, 3e-5, 2e9, 1 << 20), (100, 7, 1e-5, 1e10, 1 << 20), (7 << 20, 3, 1e-5, 1e9, 1 << 20)]


def _cases(rng: random.Random) -> list[tuple]:
    cases = list(FIXED_CASES)
    for _ in range(12):
        segment = rng.choice([1 << 16, 1 << 20, 300_000, 4 << 20])
        nbytes = rng.choice([0, rng.randint(1, 4096), rng.randint(1, 64) * segment + rng.randint(0, 999),
                             rng.uniform(1e3, 2e9)])
        latency, bandwidth = 10 ** rng.uniform(-6, -3), 10 ** rng.uniform(8, 11)
        cases.append((nbytes, rng.randint(2, 12), latency, bandwidth, segment))
    return cases


def _predictions(predict, cases) -> list:
    student = as_student_function(predict, name=FUNCTION_NAME)
    try:
        return map_isolated(student, cases, name=FUNCTION_NAME, timeout=30)
    except IsolatedCallError as error:
        raise AssertionError(f"{FUNCTION_NAME} failed on a hidden case: {error}") from None


def check_predict_hidden(predict) -> None:
    """New links, sizes (empty, tiny, whole segments and not), 2 to 12 ranks and other segment sizes."""
    seed = fresh_seed(8)
    cases = _cases(random.Random(seed))
    for got, case in zip(_predictions(predict, cases), cases, strict=True):
        compare_prediction(got, case, f"hidden test seed {seed}")
    print(f"{FUNCTION_NAME} passed {len(cases)} hidden cases")


def _defining_source(predict) -> str:
    """The cell(s) that define the function (isolated grading), or the function's own source (kernel)."""
    student = as_student_function(predict, name=FUNCTION_NAME)
    if student.sources:
        return "\n".join(s for s in student.sources if f"def {FUNCTION_NAME}" in s)
    try:
        return inspect.getsource(student.function)
    except (OSError, TypeError):
        return ""


def check_predict_own_formula(predict) -> None:
    """Right values from the student's own formula: the course's simulator may not compute it for them."""
    used = sorted(_code_names(_defining_source(predict)) & LIBRARY_NAMES)
    if used:
        raise AssertionError(f"{FUNCTION_NAME} uses {', '.join(used)}: write the alpha-beta formula "
                             "yourself, from math alone, without the course's simulator")
    check_predict_hidden(predict)
