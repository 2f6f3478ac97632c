"""The visible checks of chapter 10's overlap and backward parts, as the notebook calls them.

Each ``check_*`` runs the student's answer on real ranks (``ranks.py``), asks ``judge.py`` what is wrong,
and raises one AssertionError listing it, or prints what passed. ``REFUSAL`` says what the backward may
not use.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase
from course_lib.grading.checks.ch10_ring_attention.visible import REFUSAL as FORWARD_REFUSAL
from course_lib.grading.checks.ch10_ring_backward.judge import (
    NAMES,
    backward_traffic_problems,
    backward_work_problems,
    grad_problems,
    overlap_problems,
)
from course_lib.grading.checks.ch10_ring_backward.ranks import run_backward, run_forward

__all__ = ["REFUSAL", "check_ring_attention_backward", "check_ring_attention_backward_traffic",
           "check_ring_attention_overlap"]

REFUSAL = Refusal(
    "your ring attention's backward",
    modules=FORWARD_REFUSAL.modules,
    why=("the exercise is to write the ring's backward yourself: torch's context parallel "
         "(_templated_ring_attention_backward) would pass the blocks and their gradients round for you, and "
         "its functional collectives are collectives, which this exercise forbids"),
    allowed=("real/record/compute_log.py",))
VISIBLE_TIMEOUT_S = 20
SEED = 2024
WORLD_SIZE = 4
OVERLAP_CASES = (AttentionCase(1, 2, 8, 16),)
BACKWARD_CASES = (AttentionCase(1, 2, 4, 8), AttentionCase(1, 2, 4, 8, causal=True),
                  AttentionCase(1, 2, 4, 8, causal=True, layout="zigzag"),
                  AttentionCase(2, 1, 3, 5, "float32", causal=True))


def check_ring_attention_overlap(ring_attention) -> None:
    """Visible test: every transfer is posted before products and waited on after them."""
    student = as_student_function(ring_attention, "ring_attention", refusal=FORWARD_REFUSAL)
    run = run_forward(student, WORLD_SIZE, OVERLAP_CASES, SEED, VISIBLE_TIMEOUT_S)
    fail_with(overlap_problems(run), "ring_attention does not hide its transfers behind its products")
    print(f"ring_attention overlaps: on {WORLD_SIZE} ranks every transfer was posted before products and "
          "waited on after them")


def _backward_run(ring_attention_backward):
    student = as_student_function(ring_attention_backward, "ring_attention_backward", refusal=REFUSAL)
    return run_backward(student, WORLD_SIZE, BACKWARD_CASES, SEED, VISIBLE_TIMEOUT_S)


def check_ring_attention_backward(ring_attention_backward) -> None:
    """Visible test: dq, dk, dv equal autograd's through attention over the whole sequence."""
    fail_with(grad_problems(_backward_run(ring_attention_backward), NAMES),
              "ring_attention_backward gave wrong gradients")
    print(f"ring_attention_backward: dq, dk, dv equal autograd's on {WORLD_SIZE} ranks, no mask, causal and "
          "zig-zag")


def check_ring_attention_backward_traffic(ring_attention_backward) -> None:
    """Visible test: a ring's bytes (K and V N-1 times, their gradients N times) and five products a block."""
    run = _backward_run(ring_attention_backward)
    fail_with(backward_traffic_problems(run) + backward_work_problems(run),
              "ring_attention_backward's traffic or work is not a ring backward's")
    print("ring_attention_backward: K and V passed on N-1 times, dK and dV N times, to ring neighbours "
          "only; at most five products per block the mask leaves")
