"""Chapter 09's visible checks: a preemption-safe, reshardable checkpoint (save_checkpoint, load_checkpoint,
and the resume logic of train) on real ranks, killed by real signals at fixed points.

The instructor's hidden checks run the same scenarios (ch09_checkpoint_runs) with cases and kill points
drawn at grading time. Everything an answer may not use is in ``REFUSAL``.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch09_checkpoint.durability import sync_record
from course_lib.grading.checks.ch09_checkpoint.runs import (
    REFUSAL,
    SaveProfile,
    atomic_problems,
    resume_problems,
    round_trip_problems,
)
from course_lib.grading.checks.ch09_checkpoint.training_job import TrainingJob
from course_lib.real.cluster.preemption import Preemption

__all__ = ["REFUSAL", "TrainingJob", "check_checkpoint_atomic", "check_checkpoint_round_trip",
           "check_checkpoint_durable", "check_resume_after_sigkill", "check_resume_after_sigterm",
           "check_resume_on_new_world_size", "save_kills"]

VISIBLE_SEED = 7
VISIBLE_TIMEOUT_S = 30
VISIBLE_SETTINGS = {"seed": VISIBLE_SEED, "save_every": 3}


def save_kills(profile: SaveProfile, step: int, fraction: float = 0.5, change: int = -1) -> list[Preemption]:
    """Kills inside the save after ``step``: a file cut at ``fraction`` of the largest file's size, and
    (when the save renames, removes or creates files from Python) the ``change``-th such change on the rank
    that makes the most."""
    plans = []
    if profile.largest_file > 1:
        plans.append(Preemption("file_bytes", step, amount=max(1, int(profile.largest_file * fraction))))
    counts = profile.change_counts(step)
    if counts:
        rank = max(sorted(counts), key=counts.get)
        number = counts[rank] + 1 + change if change < 0 else min(change, counts[rank])
        plans.append(Preemption("file_change", step, amount=max(1, number), rank=rank))
    return plans


def check_checkpoint_round_trip(save_checkpoint, load_checkpoint, world_size: int = 2) -> None:
    """Visible test: what a rank saved comes back, on the same number of ranks and on one rank."""
    problems = round_trip_problems(save_checkpoint, load_checkpoint, world_size, 1, VISIBLE_SEED,
                                   VISIBLE_TIMEOUT_S)
    fail_with(problems, "load_checkpoint does not give back what save_checkpoint saved")
    print(f"save_checkpoint/load_checkpoint: {world_size} ranks saved twice; each got its own last state "
          "back, one rank got rank 0's, and an empty folder gave None")


def check_checkpoint_atomic(save_checkpoint, load_checkpoint, world_size: int = 2) -> None:
    """Visible test: a save killed half-way leaves the previous checkpoint (or the new one) whole."""
    def choose(profile):
        return save_kills(profile, 1) + save_kills(profile, 0)[:1]

    problems = atomic_problems(save_checkpoint, load_checkpoint, world_size, VISIBLE_SEED, choose,
                               VISIBLE_TIMEOUT_S)
    fail_with(problems, "a save killed half-way left a checkpoint that should not be loaded")
    print("save_checkpoint: killed in the middle of a save (a file cut half-way, a rename never made), "
          "the next load_checkpoint gave a whole checkpoint on every rank")


def check_resume_after_sigkill(train, world_size: int = 2) -> None:
    """Visible test: killed between saves and inside a save, then resumed: the same losses and weights, bit
    for bit."""
    def choose(profile):
        return [Preemption("sigkill", 5)] + save_kills(profile, 6)[:1]

    problems = resume_problems(train, VISIBLE_SETTINGS, world_size, world_size, choose, True,
                               VISIBLE_TIMEOUT_S)
    fail_with(problems, "train(job) does not continue exactly after a SIGKILL")
    print(f"train: SIGKILL after step 5 and inside the save of step 6 on {world_size} ranks; each resumed "
          "run reported the uninterrupted run's losses and ended with its weights, bit for bit")


def check_resume_after_sigterm(train, world_size: int = 2) -> None:
    """Visible test: SIGTERM (rank 0 at step 7, rank 1 one step later): save, return, resume exactly."""
    def choose(profile):
        return [Preemption("sigterm", 7, late_ranks=tuple(range(1, world_size)), grace_s=TrainingJob.grace_s)]

    problems = resume_problems(train, VISIBLE_SETTINGS, world_size, world_size, choose, True,
                               VISIBLE_TIMEOUT_S)
    fail_with(problems, "train(job) does not stop cleanly on SIGTERM")
    print("train: SIGTERM reached rank 0 after step 7 and rank 1 a step later; every rank saved the same "
          "step and returned, and the resumed run continued exactly")


def check_resume_on_new_world_size(train, world_size: int = 2, new_world_size: int = 1) -> None:
    """Visible test: killed on 2 ranks, resumed on 1: it trains on as the plain loop does (no dropout)."""
    settings = dict(VISIBLE_SETTINGS, dropout=0.0)

    def choose(profile):
        return [Preemption("sigkill", 8)]

    problems = resume_problems(train, settings, world_size, new_world_size, choose, False, VISIBLE_TIMEOUT_S)
    fail_with(problems, f"train(job) killed on {world_size} ranks does not resume on {new_world_size}")
    print(f"train: killed on {world_size} ranks after step 8, resumed on {new_world_size}: the same losses "
          "and final weights as the plain loop, to rounding")


def check_checkpoint_durable(save_checkpoint, world_size: int = 2) -> None:
    """Visible test: two saves on real ranks, each recorded; prints what each synced, made and renamed, in
    order. It judges nothing but that the saves ran: the hidden check judges the order (see the chapter)."""
    records, failure = sync_record(save_checkpoint, world_size, VISIBLE_SEED, VISIBLE_TIMEOUT_S)
    fail_with([failure] if failure else [], "save_checkpoint could not be recorded")
    for record in records:
        events = record.timeline()
        start = events[0].t if events else 0
        print(f"save_checkpoint on {world_size} ranks, {record.which}: its syncs, the files and folders it "
              "made and its renames, in order (paths under the folder that holds checkpoints/)")
        for event in events:
            print(f"  {(event.t - start) / 1e6:8.3f} ms  rank {event.rank}  {event.kind:9} {event.path or ''}"
                  f"{'/' if event.is_dir else ''}")
