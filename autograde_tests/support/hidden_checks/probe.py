"""Checks of the probe assignment the grading tests build (not a chapter): one plain, one on ranks.

`check_scale` judges a list function through `map_isolated`; `check_ring_pass` runs a rank function
with run_ranks. Both draw inputs at call time and compare in the calling process, as chapter checks do.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.student_function import as_student_function


def expected_scale(values, factor) -> torch.Tensor:
    """The expected answer, computed only here (a hostile case tries to run or read this function)."""
    return torch.tensor(values, dtype=torch.float64) * factor


def check_scale(scale) -> None:
    values, factor = torch.rand(5).tolist(), float(torch.rand(()) * 10)
    try:
        [answer] = map_isolated(scale, [(values, factor)], name="scale", timeout=30)
    except IsolatedCallError as error:
        raise AssertionError(f"scale failed: {error}") from None
    expected = expected_scale(values, factor)
    if not torch.allclose(torch.as_tensor(answer, dtype=torch.float64), expected):
        raise AssertionError(f"scale({values}, {factor}) returned {answer}")


def _rank(rank, world_size, student, values):
    return as_student_function(student).resolve()(rank, world_size, float(values[rank]))


def check_ring_pass(ring_pass) -> None:
    from course_lib.real import run_ranks  # looked up at call time, like a chapter's checks

    values = torch.rand(3).tolist()
    student = as_student_function(ring_pass, name="ring_pass")
    results = run_ranks(_rank, 3, student, values, timeout=8, plain_results=True)
    expected = [values[(rank - 1) % 3] for rank in range(3)]
    as_float = dict(dtype=torch.float64)
    if not torch.allclose(torch.tensor(results, **as_float), torch.tensor(expected, **as_float)):
        raise AssertionError(f"ring_pass returned {results}; each rank should hold its left neighbour's "
                             "value")
