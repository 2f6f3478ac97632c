"""The visible checks of chapter 10's overlap and backward parts, as the notebook calls them.

Each ``check_*`` runs the student's answer on real ranks (``ranks.py``), asks ``judge.py`` what is wrong,
and raises one AssertionError listing it, or prints what passed. ``REFUSAL`` says what the backward may
not use.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch10_ring_attention.judge import kv_bytes
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase
from course_lib.grading.checks.ch10_ring_attention.visible import MEMORY_CASE, MEMORY_WORLD_SIZES
from course_lib.grading.checks.ch10_ring_attention.visible import REFUSAL as FORWARD_REFUSAL
from course_lib.grading.checks.ch10_ring_backward.judge import (
    NAMES,
    backward_memory_problems,
    backward_overlap_problems,
    backward_traffic_problems,
    backward_work_problems,
    grad_problems,
    overlap_problems,
)
from course_lib.grading.checks.ch10_ring_backward.ranks import run_backward, run_forward

__all__ = ["REFUSAL", "check_ring_attention_backward", "check_ring_attention_backward_dkdv",
           "check_ring_attention_backward_dq", "check_ring_attention_backward_memory",
           "check_ring_attention_backward_overlap", "check_ring_attention_backward_traffic",
           "check_ring_attention_backward_work", "check_ring_attention_overlap"]

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


def _backward_run(ring_attention_backward, cases=BACKWARD_CASES, world_size: int = WORLD_SIZE):
    student = as_student_function(ring_attention_backward, "ring_attention_backward", refusal=REFUSAL)
    return run_backward(student, world_size, cases, SEED, VISIBLE_TIMEOUT_S)


def check_ring_attention_backward(ring_attention_backward) -> None:
    """Visible test: dq, dk, dv equal autograd's through attention over the whole sequence."""
    fail_with(grad_problems(_backward_run(ring_attention_backward), NAMES),
              "ring_attention_backward gave wrong gradients")
    print(f"ring_attention_backward: dq, dk, dv equal autograd's on {WORLD_SIZE} ranks, no mask, causal and "
          "zig-zag")


def check_ring_attention_backward_dq(ring_attention_backward) -> None:
    """Visible test: dq, this rank's own queries' gradient, equals autograd's."""
    fail_with(grad_problems(_backward_run(ring_attention_backward), ("dq",)),
              "ring_attention_backward's dq is wrong")
    print(f"ring_attention_backward: dq equals autograd's on {WORLD_SIZE} ranks, no mask, causal and zig-zag")


def check_ring_attention_backward_dkdv(ring_attention_backward) -> None:
    """Visible test: dk and dv of this rank's own keys and values equal autograd's."""
    fail_with(grad_problems(_backward_run(ring_attention_backward), ("dk", "dv")),
              "ring_attention_backward's dk or dv is wrong")
    print(f"ring_attention_backward: dk and dv of each rank's own keys equal autograd's on {WORLD_SIZE} "
          "ranks, no mask, causal and zig-zag")


def check_ring_attention_backward_traffic(ring_attention_backward) -> None:
    """Visible test: a ring's bytes, K and V N-1 times and their gradients N times, to neighbours only."""
    fail_with(backward_traffic_problems(_backward_run(ring_attention_backward)),
              "ring_attention_backward's traffic is not a ring backward's")
    print("ring_attention_backward: K and V passed on N-1 times, dK and dV N times, to ring neighbours only")


def check_ring_attention_backward_work(ring_attention_backward) -> None:
    """Visible test: where the gradients are right, at most five products per block the mask leaves."""
    fail_with(backward_work_problems(_backward_run(ring_attention_backward)),
              "ring_attention_backward computes more than a ring backward")
    print("ring_attention_backward: at most five products per block the mask leaves")


def check_ring_attention_backward_overlap(ring_attention_backward) -> None:
    """Visible test: without the mask, every transfer but the gradients' trip home is posted before
    products and waited on after them."""
    run = _backward_run(ring_attention_backward, OVERLAP_CASES)
    fail_with(backward_overlap_problems(run),
              "ring_attention_backward does not hide its transfers behind its products")
    print(f"ring_attention_backward overlaps: on {WORLD_SIZE} ranks every transfer but the last trip home "
          "was posted before products and waited on after them")


def check_ring_attention_backward_memory(ring_attention_backward) -> None:
    """Visible test: the most new tensor memory a rank holds is the same on 3 and on 6 ranks."""
    runs = [_backward_run(ring_attention_backward, (MEMORY_CASE,), size) for size in MEMORY_WORLD_SIZES]
    fail_with(backward_memory_problems(runs, 0), "ring_attention_backward's memory grows with the ranks")
    peaks = [max(o.peak for o in run.outcomes[0]) for run in runs]
    fewest, most = MEMORY_WORLD_SIZES
    print(f"ring_attention_backward memory: at most {peaks[0]} bytes of new tensors held on {fewest} ranks, "
          f"{peaks[1]} on {most}, for a block of K and V of {kv_bytes(MEMORY_CASE)} bytes")
