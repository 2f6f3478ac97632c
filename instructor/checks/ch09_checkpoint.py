"""Hidden checks of chapter 09 (instructor-only): a preemption-safe, reshardable checkpoint on real ranks.

Cases and kill points are drawn at grading time from a fresh seed, named in every failure message: the
states saved, the world sizes (1 to 5), save_every, the step each kill strikes at, how far a killed save
got (a file cut after a drawn number of bytes, a drawn rename, removal or creation never made, or the
save's last file opened for writing left empty).

  grade_id                        points  hidden check
  test_checkpoint_round_trip         2    check_round_trip_hidden(save_checkpoint, load_checkpoint)
  test_checkpoint_atomic             2    check_atomic_hidden(save_checkpoint, load_checkpoint)
  test_resume_after_sigkill          3    check_resume_after_sigkill_hidden(train)
  test_resume_after_sigterm          2    check_resume_after_sigterm_hidden(train)
  test_resume_on_new_world_size      2    check_resume_on_new_world_size_hidden(train)

round trip: ten to twelve saves on N ranks (versions past the ninth: their order is not their names'
alphabetical one), loaded on N (each rank its own last state) and on M > N (rank r gets what rank r % N
saved, which rank min(r, N - 1)'s is not from rank N on); an empty folder loads as None. atomic: the second
save (and, once, the first) killed half-way, once just after its last file is created and before its first
byte (a commit marker written in place is then empty); every rank then loads the same whole version, never
a mix, never the loss of the first. sigkill: SIGKILL between saves and inside a save (2 ranks), resumed:
losses and final weights equal the uninterrupted run's bit for bit, from the newest checkpoint complete at
the kill. sigterm: SIGTERM reaching rank 0 one step before rank 1: every rank saves the same step and
returns within the grace, and the run resumes exactly. new world size: killed on N ranks, resumed on M (no
dropout): the plain loop's losses and weights to rounding.
"""

from __future__ import annotations

import random

from course_lib.dist.preemption import Preemption
from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch09_checkpoint.runs import (
    REFUSAL,
    atomic_problems,
    resume_problems,
    round_trip_problems,
)
from course_lib.grading.checks.ch09_checkpoint.training_job import TrainingJob

from ._seeds import fresh_seed

POINTS = {"test_checkpoint_round_trip": 2, "test_checkpoint_atomic": 2, "test_resume_after_sigkill": 3,
          "test_resume_after_sigterm": 2, "test_resume_on_new_world_size": 2}
TIMEOUT_S = 60
STEPS_PER_EPOCH = TrainingJob("-").steps_per_epoch   # 5: no checkpoint the checks resume from ends an epoch


def _settings(rng, seed: int, **changes) -> dict:
    return dict({"seed": seed % 100_000, "save_every": rng.choice((3, 4))}, **changes)


def _between_saves(rng, save_every: int) -> int:
    """A step after the first save, not a save step: the run resumes from the middle of an epoch."""
    total = TrainingJob.total_steps
    return rng.choice([s for s in range(save_every + 1, total) if s % save_every])


def _file_kills(rng, profile, step: int) -> list[Preemption]:
    """Kills inside the save after ``step``: a file cut after a drawn number of bytes, and a drawn one of the
    renames, removals or creations that rank makes there (when it makes any from Python)."""
    plans = []
    if profile.largest_file > 1:
        plans.append(Preemption("file_bytes", step, amount=rng.randint(1, profile.largest_file - 1)))
    counts = profile.change_counts(step)
    if counts:
        rank = rng.choice(sorted(counts))
        plans.append(Preemption("file_change", step, amount=rng.randint(1, counts[rank]), rank=rank))
    return plans


def check_round_trip_hidden(save_checkpoint, load_checkpoint) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    world_size = rng.choice((2, 3, 4))
    new_world_size = rng.choice([n for n in (3, 4, 5) if n > world_size])   # rank N loads rank 0's state
    problems = round_trip_problems(save_checkpoint, load_checkpoint, world_size, new_world_size,
                                   seed % 100_000, TIMEOUT_S, saves=rng.randint(10, 12))
    fail_with(problems, f"load_checkpoint does not give back what save_checkpoint saved (seed {seed})")


def check_atomic_hidden(save_checkpoint, load_checkpoint) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)

    def choose(profile):
        torn = profile.torn_last_open(1)        # bytes, change, and the last file left empty (or a change)
        second = _file_kills(rng, profile, 1) + ([torn] if torn else _file_kills(rng, profile, 1)[1:])
        first = _file_kills(rng, profile, 0)
        return second + ([rng.choice(first)] if first else [])

    problems = atomic_problems(save_checkpoint, load_checkpoint, rng.choice((2, 3)), seed % 100_000, choose,
                               TIMEOUT_S)
    fail_with(problems, f"a save killed half-way left a checkpoint that should not be loaded (seed {seed})")


def check_resume_after_sigkill_hidden(train) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    settings = _settings(rng, seed)
    every = settings["save_every"]

    def choose(profile):
        in_save = rng.choice([c for c in range(2 * every, TrainingJob.total_steps, every)])
        return [Preemption("sigkill", _between_saves(rng, every)), *_file_kills(rng, profile, in_save)]

    problems = resume_problems(train, settings, 2, 2, choose, True, TIMEOUT_S)
    fail_with(problems, f"train(job) does not continue exactly after a SIGKILL (seed {seed})")


def check_resume_after_sigterm_hidden(train) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    settings = _settings(rng, seed)
    steps = [s for s in range(2, TrainingJob.total_steps - 1)
             if s % STEPS_PER_EPOCH and (s + 1) % STEPS_PER_EPOCH]

    def choose(profile):
        return [Preemption("sigterm", rng.choice(steps), late_ranks=(1,), grace_s=TrainingJob.grace_s)]

    problems = resume_problems(train, settings, 2, 2, choose, True, TIMEOUT_S)
    fail_with(problems, f"train(job) does not stop cleanly on SIGTERM (seed {seed})")


def check_resume_on_new_world_size_hidden(train) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    pairs = rng.sample([(2, 3), (3, 2), (4, 2), (2, 1), (1, 3)], 2)
    problems = []
    for world_size, new_world_size in pairs:
        settings = _settings(rng, seed, dropout=0.0)
        kill = Preemption("sigkill", _between_saves(rng, settings["save_every"]))
        problems += resume_problems(train, settings, world_size, new_world_size,
                                    lambda profile, kill=kill: [kill], False, TIMEOUT_S)
    fail_with(problems, f"train(job) does not resume on another number of ranks (seed {seed})")


EXERCISE = Exercise(
    "ch09_checkpoint", "09_on_the_cluster", answers=("save_checkpoint", "load_checkpoint", "train"),
    points=POINTS, fixtures="checkpoint", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_checkpoint_round_trip": (check_round_trip_hidden, ("save_checkpoint", "load_checkpoint")),
    "test_checkpoint_atomic": (check_atomic_hidden, ("save_checkpoint", "load_checkpoint")),
    "test_resume_after_sigkill": (check_resume_after_sigkill_hidden, ("train",)),
    "test_resume_after_sigterm": (check_resume_after_sigterm_hidden, ("train",)),
    "test_resume_on_new_world_size": (check_resume_on_new_world_size_hidden, ("train",)),
}
