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
  test_checkpoint_durable            2    check_durable_hidden(save_checkpoint)

round trip: ten to twelve saves on N ranks (versions past the ninth: their order is not their names'
alphabetical one), loaded on N (each rank its own last state) and on M > N (rank r gets what rank r % N
saved, which rank min(r, N - 1)'s is not from rank N on); an empty folder loads as None. atomic: the second
save (and, once, the first) killed half-way, once just after its last file is created and before its first
byte (a commit marker written in place is then empty); every rank then loads the same whole version, never
a mix, never the loss of the first. sigkill: SIGKILL between saves and inside a save (2 ranks), resumed:
losses and final weights equal the uninterrupted run's bit for bit, from the newest checkpoint complete at
the kill. sigterm: SIGTERM reaching rank 0 one step before rank 1: every rank saves the same step and
returns within the grace, and the run resumes exactly. new world size: killed on N ranks, resumed on M (no
dropout): the plain loop's losses and weights to rounding. durable: both
saves recorded on the ranks (every os.fsync/os.fdatasync/os.sync, file made and rename, with its time), the
first to a path that does not exist yet: every file a save wrote synced before the rename that publishes it,
every folder that gained an entry (the checkpoints folder's parent, in the first) synced before it too, and
the publishing folder synced after it, before the save returns (fsync(2); DCP syncs its files:
sync_files=True).
"""

from __future__ import annotations

import os
import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch09_checkpoint.durability import RecordedSave, sync_record
from course_lib.grading.checks.ch09_checkpoint.ranks import FileEvent
from course_lib.grading.checks.ch09_checkpoint.runs import (
    REFUSAL,
    atomic_problems,
    resume_problems,
    round_trip_problems,
)
from course_lib.grading.checks.ch09_checkpoint.training_job import TrainingJob
from course_lib.real.cluster.preemption import Preemption

from ._seeds import fresh_seed

POINTS = {"test_checkpoint_round_trip": 2, "test_checkpoint_atomic": 2, "test_resume_after_sigkill": 3,
          "test_resume_after_sigterm": 2, "test_resume_on_new_world_size": 2,
          "test_checkpoint_durable": 2}
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


# ---- durable: the save's files and folders synced before the rename that publishes it -------------------

def _said(event: FileEvent) -> str:
    what = {"fsync": "os.fsync", "fdatasync": "os.fdatasync", "sync": "os.sync()", "create": "made",
            "rename": "renamed"}[event.kind]
    folder = " (a folder)" if event.is_dir else ""
    return f"rank {event.rank} {what} {event.path or ''}{folder}".rstrip()


def _publication(events: list[FileEvent], after: dict, new: set[str]) -> FileEvent | None:
    """The rename that made the checkpoint visible: the last one into a name that is there after the save;
    without any rename, the last file the save created from Python."""
    renames = [e for e in events if e.kind == "rename" and e.path.split(" -> ")[-1] in after]
    if renames:
        return renames[-1]
    made = [e for e in events if e.kind == "create" and e.path in new]
    return made[-1] if made else None


def _appeared(events: list[FileEvent], path: str, inode: int, started: int) -> int:
    """When an entry was first seen: made, renamed into place, or synced (the save's start if never)."""
    seen = [e.t for e in events if (e.kind == "create" and e.path == path)
            or (e.kind == "rename" and e.path.split(" -> ")[-1] == path)
            or (e.kind in ("fsync", "fdatasync") and e.inode == inode)]
    return min(seen, default=started)


def _synced(events: list[FileEvent], inode: int, folder: bool, after_t: int, before_t: int) -> bool:
    return any(after_t <= e.t < before_t and (e.kind == "sync" or (
        e.kind in ("fsync", "fdatasync") and e.inode == inode and e.is_dir == folder)) for e in events)


def durability_problems(record: RecordedSave) -> list[str]:
    """Judge a recorded save: every file it wrote synced before the publication, every folder that gained
    an entry synced after that entry appeared and before the publication, the publishing folder after."""
    events, before, after = record.timeline(), record.before, record.after
    started = min(side.started for side in record.ranks.values())
    written = {p for p, (ino, size, mtime, is_dir) in after.items()
               if not is_dir and (p not in before or before[p][:3] != [ino, size, mtime])}
    new = {p for p, entry in after.items() if p != "." and (p not in before or before[p][0] != entry[0])}
    shown = [_said(e) for e in events if not (e.kind == "create" and e.path == ".")]
    where = (f"what {record.which} did, in order: " + ("; ".join(shown[:16]) or
             "no sync call, nothing made or renamed") + ("; ..." if len(shown) > 16 else ""))
    publication = _publication(events, after, new)
    if publication is None:
        return ["no rename put the checkpoint in place and no file was created from Python to mark it "
                "complete, so nothing orders the syncs before the moment it becomes visible", where]
    target = publication.path.split(" -> ")[-1]
    problems = []
    for path in sorted(written - {target} if publication.kind == "create" else written):
        if not _synced(events, after[path][0], False, started, publication.t):
            problems.append(f"{path} was not synced (os.fsync on the file) before the checkpoint was "
                            f"published ({_said(publication)}): after a crash of the machine the new "
                            "checkpoint can be complete by its name and cut in its bytes")
    for folder in sorted({os.path.dirname(p) or "." for p in new - {target}}):
        entries = [p for p in new - {target} if (os.path.dirname(p) or ".") == folder]
        appeared = max(_appeared(events, entry, after[entry][0], started) for entry in entries)
        if not _synced(events, after[folder][0], True, appeared, publication.t):
            problems.append(f"the folder {folder} gained {', '.join(sorted(entries)[:3])} but was not synced "
                            f"(os.fsync on the folder) between then and the publication: a file's fsync "
                            "does not make its name durable (fsync(2))")
    folder = os.path.dirname(target) or "."
    returned = record.ranks[publication.rank].returned
    if folder in after and not _synced(events, after[folder][0], True, publication.t + 1, returned + 1):
        problems.append(f"the folder {folder}, where the checkpoint was published ({_said(publication)}), "
                        "was not synced after it before save_checkpoint returned: a crash right after the "
                        "return can undo the publication")
    return problems[:3] + [where] if problems else []


def check_durable_hidden(save_checkpoint) -> None:
    seed = fresh_seed()
    rng = random.Random(seed)
    records, failure = sync_record(save_checkpoint, rng.choice((2, 3)), seed % 100_000, TIMEOUT_S)
    problems = [failure] if failure else next(
        ([f"{record.which}: {problem}" for problem in found] for record in records
         if (found := durability_problems(record))), [])
    fail_with(problems, f"save_checkpoint's checkpoint might not survive a machine crash (seed {seed})")


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
    "test_checkpoint_durable": (check_durable_hidden, ("save_checkpoint",)),
}
