"""Whether this process runs a lesson for the grader: `make grade`'s kernel sets GRADED_RUN_ENV, for the
lesson and every rank it starts. Kept free of torch, so that the kernel launcher can name it cheaply.

In a graded run the timing harness (timing_harness.py) measures briefly: a grader busy with other
students measures nothing worth having, a class pays for every student's lesson (chapter 02's measuring
cells were 20 of its 29 s), and no graded cell reads a measurement (tests/real/test_graded_run.py).
"""

from __future__ import annotations

import os

GRADED_RUN_ENV = "COURSE_GRADED_RUN"


def graded_run() -> bool:
    """Whether this process runs a lesson for the grader (see GRADED_RUN_ENV)."""
    return os.environ.get(GRADED_RUN_ENV) == "1"
