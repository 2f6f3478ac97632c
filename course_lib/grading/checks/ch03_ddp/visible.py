"""The visible checks of chapter 03's DDP exercise, as the notebook calls them: run on real ranks, judge.

Each ``check_ddp_*`` runs the student's DDP on real gloo ranks (``ch03_ddp_ranks``) under the exercise's
``REFUSAL``, asks the judges (``ch03_ddp_judge``, ``ch03_ddp_buckets``) what is wrong, and raises one
AssertionError listing it, or prints what passed.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import RankRun, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch03_ddp.buckets import bucket_problems, early_overlap_problems
from course_lib.grading.checks.ch03_ddp.judge import (
    broadcast_problems,
    overlap_problems,
    silence_problems,
    value_problems,
    volume_problems,
)
from course_lib.grading.checks.ch03_ddp.ranks import DDPCase, run_student

# torch's own data parallelism, in every form that would do the exercise: DDP (and its C++ reducer, which
# these modules drive), its communication hooks, DataParallel, composable replicate() (plain and over
# FSDP2), and FSDP1, whose NO_SHARD strategy is DDP; and, as for every exercise, course_lib (the models the
# checks hand the answer, in ch03_ddp_models.py, act for it).
REFUSAL = Refusal(
    "your DDP",
    modules=("torch.nn.parallel.distributed", "torch.nn.parallel.data_parallel",
             "torch.distributed.algorithms.ddp_comm_hooks", "torch.distributed._composable.replicate",
             "torch.distributed._composable.replicate_with_fsdp", "torch.distributed.fsdp"),
    why="the exercise is to write DDP yourself, its hooks, buckets and overlap; torch's DDP is what "
        "section 5 compares yours with")

VISIBLE_TIMEOUT_S, VISIBLE_SEED = 10, 2024
# Several buckets of the course MLP (6->4->2: 96, 16, 32 and 8 bytes) and of the transformer block
BUCKET_CASES = (DDPCase("course MLP", 0.00005), DDPCase("transformer block", 0.003))


def _visible(DDP, world_size, cases, kind="train") -> RankRun:  # noqa: N803 - the student's class
    student = as_student_function(DDP, "DDP", refusal=REFUSAL)
    return run_student(student, world_size, cases, VISIBLE_SEED, VISIBLE_TIMEOUT_S, kind)


def check_ddp_broadcast(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: DDP(model) gives every rank rank 0's parameters and buffers."""
    fail_with(broadcast_problems(_visible(DDP, world_size, [], "broadcast")), "DDP's construction is wrong")
    print(f"DDP: after construction all {world_size} ranks hold rank 0's parameters and buffers")


def check_ddp_gradients(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: the course MLP trained 5 steps equals single-process training and torch's DDP."""
    cases = [DDPCase("course MLP", 25.0), DDPCase("course MLP", None)]
    fail_with(value_problems(_visible(DDP, world_size, cases)), "DDP's gradients are wrong")
    print(f"DDP: on {world_size} ranks, one bucket and one per parameter, every step's gradients and the "
          "final weights equal single-process training and torch's DistributedDataParallel")


def check_ddp_frozen_and_tied(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: a frozen layer is never reduced, a tied weight once; values still right."""
    run = _visible(DDP, world_size, [DDPCase("frozen and tied", 25.0)])
    fail_with(value_problems(run) + volume_problems(run), "DDP mishandles frozen or tied parameters")
    print("DDP: frozen parameters untouched and never all-reduced, the tied weight all-reduced once")


def check_ddp_unused(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: a layer that never gets a gradient does not hang the ranks."""
    fail_with(value_problems(_visible(DDP, world_size, [DDPCase("unused layer", 25.0)])),
              "DDP fails when a parameter gets no gradient")
    print("DDP: a parameter without a gradient counts as zero; no rank waits forever")


def check_ddp_overlap(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: communication starts while the backward is still running."""
    run = _visible(DDP, world_size, [DDPCase("transformer block", None), DDPCase("course MLP", 25.0)])
    fail_with(overlap_problems(run), "DDP does not overlap communication with the backward")
    print("DDP: in every step the first all-reduce started before loss.backward() returned")


def check_ddp_buckets(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: one all-reduce per bucket, each of its bucket's bytes, for small bucket sizes."""
    fail_with(bucket_problems(_visible(DDP, world_size, BUCKET_CASES)), "DDP's buckets are wrong")
    print("DDP: one all-reduce per bucket, each bucket's bytes as bucket_size_mb makes them")


def check_ddp_overlap_buckets(DDP, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: with several buckets, the first all-reduce starts before the last gradient is ready."""
    fail_with(early_overlap_problems(_visible(DDP, world_size, BUCKET_CASES)),
              "DDP's buckets do not start communicating early")
    print("DDP: with several buckets, the first all-reduce started before the step's last gradient was ready")


def check_ddp_one_rank(DDP) -> None:  # noqa: N803
    """Visible test: on one rank, DDP trains like the plain model and sends nothing."""
    run = _visible(DDP, 1, [DDPCase("course MLP", 25.0)])
    fail_with(value_problems(run, compare_with_torch=False) + silence_problems(run), "DDP on 1 rank is wrong")
    print("DDP: on 1 rank, plain training and no communication")
