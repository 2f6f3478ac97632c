"""Chapter 09's durability scenario: two saves on real ranks, each recorded (every sync call, file made
and rename, with its time, and the folder before and after), the first to a path that does not exist yet.
The visible check prints the records; the instructor's hidden check judges them.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.grading.attempt.judge_runner import values_as
from course_lib.grading.checks.ch09_checkpoint.judge import run_failure
from course_lib.grading.checks.ch09_checkpoint.ranks import (
    CHECKPOINTS,
    FileEvent,
    SaveRecord,
    scratch_folder,
    sync_record_side,
)
from course_lib.grading.checks.ch09_checkpoint.runs import students
from course_lib.real.cluster.preemption import run_preempted

__all__ = ["SAVES", "RecordedSave", "sync_record"]


@dataclass(frozen=True)
class RecordedSave:
    """One of two saves, recorded on every rank (``sync_record_side``): which one, each rank's SaveRecord,
    and the folder's listing before and after it (path -> [inode, size, mtime_ns, is a folder])."""

    ranks: dict[int, SaveRecord]
    before: dict
    after: dict
    which: str = "the second save"

    def timeline(self) -> list[FileEvent]:
        """Every rank's events in the order they happened (one monotonic clock for the machine)."""
        events = [FileEvent(t, kind, path, inode, is_dir, rank) for rank, side in self.ranks.items()
                  for t, kind, path, inode, is_dir in side.events]
        return sorted(events, key=lambda event: (event.t, event.rank))


SAVES = (f"the first save (to {CHECKPOINTS}/, which did not exist yet)", "the second save")


def sync_record(save, world_size: int, seed: int,
                timeout: float) -> tuple[list[RecordedSave] | None, str | None]:
    """Two saves on ``world_size`` ranks, each recorded (``sync_record_side``): every rank's sync calls,
    writes and renames with their times, and the folder before and after. Judged by the hidden check."""
    (save,) = students(save_checkpoint=save)
    with scratch_folder() as folder:
        run = run_preempted(sync_record_side, world_size, save, folder, seed, timeout=timeout)
    failure = run_failure(run, f"saving twice on {world_size} ranks, both saves recorded (seed {seed})")
    if failure:
        return None, failure
    ranks = dict(sorted(values_as(run, SaveRecord, per_case=True).items()))
    return [RecordedSave(ranks={rank: saves[index] for rank, saves in ranks.items()},
                         before=ranks[0][index].before, after=ranks[0][index].after, which=which)
            for index, which in enumerate(SAVES)], None
