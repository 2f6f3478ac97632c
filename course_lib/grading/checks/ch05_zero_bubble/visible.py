"""Checks of chapter 05's zero-bubble exercise, ZB-H1 (Qi et al. 2024): the student's F/B/W op lists.

The student's generator runs in a child under the exercise's refusal (course_lib and
torch.distributed.pipelining); the judging side plays the returned ops on the course simulator with a
split backward: "B" the input gradient, "W" the weight gradient. Nothing here builds a ZB-H1 schedule:
the makespan is held to the bubble the paper states, and a failure draws the student's own timeline
above a bar as long as ZB-H1's makespan.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.visible import (
    PIPELINING,
    generate_schedules,
    pair_problems,
)
from course_lib.grading.checks.ch05_zero_bubble.judge import ASPECTS, NAME, VISIBLE_TIMES

REFUSAL = Refusal(NAME, modules=PIPELINING,
                  why="the exercise is to work out where the weight gradients go yourself")
VISIBLE_PAIRS = ((4, 8), (3, 3), (2, 1), (1, 4), (4, 5))
VISIBLE_TIMEOUT_S = 20


def _visible(zero_bubble_h1, aspect: str, what: str) -> None:
    student = as_student_function(zero_bubble_h1, NAME, refusal=REFUSAL)
    run = generate_schedules(student, VISIBLE_PAIRS, VISIBLE_TIMEOUT_S)
    fail_with(pair_problems(run, ASPECTS[aspect], NAME), what, limit=2)


def check_zero_bubble_h1_dependencies(zero_bubble_h1) -> None:
    """Visible test: every F, B and W once, in an order the stages can run together."""
    _visible(zero_bubble_h1, "dependencies", "zero_bubble_h1's ops cannot run in that order")
    print(f"{NAME}: every dependency holds for (stages, microbatches) in {list(VISIBLE_PAIRS)}")


def check_zero_bubble_h1_memory(zero_bubble_h1) -> None:
    """Visible test: no stage holds more activations than 1F1B's stage 0."""
    _visible(zero_bubble_h1, "memory", "zero_bubble_h1 holds more activations than 1F1B")
    print(f"{NAME}: no stage holds more than min(stages, microbatches) micro-batches, as in 1F1B")


def check_zero_bubble_h1_makespan(zero_bubble_h1) -> None:
    """Visible test: the simulated makespan reaches ZB-H1's bubble, (p-1)(F+B-W), for three (F, B, W)."""
    _visible(zero_bubble_h1, "makespan", "zero_bubble_h1's simulated makespan misses ZB-H1's")
    print(f"{NAME}: the simulated makespan reaches m(F+B+W) + (p-1)(F+B-W) for (F, B, W) in "
          f"{list(VISIBLE_TIMES)}")

