"""Sandbox uid ranges leased per grading run, so two runs on one machine (two `make grade`s, the tasks
of a Slurm array on one node) never run student code under the same uid and kill each other's kernels.

A lease is an flock on one file per block of BLOCK uids, held for the whole run: the kernel drops it
when the run ends, crashed or not, so a lease never goes stale. As root the folder is root's alone (0700):
a sandbox uid cannot open a lease file, let alone hold its lock. A block some process still runs under
(a kernel left by a run that did not use leases) is skipped as well.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 100
HIGHEST_UID = 65000           # below nobody (65534) and the 16-bit uids some tools still assume
LEASE_DIR_ENV = "COURSE_GRADING_UID_LEASES"


def lease_dir() -> Path:
    """/run when we may write there (root), else the temporary folder; COURSE_GRADING_UID_LEASES wins."""
    chosen = os.environ.get(LEASE_DIR_ENV)
    if chosen:
        return Path(chosen)
    base = Path("/run") if os.access("/run", os.W_OK) else Path(os.environ.get("TMPDIR", "/tmp"))
    return base / "course-grading-uids"


@dataclass
class UidLease:
    """uids first .. first + count - 1 are this run's until release() (or the process ends)."""

    first: int
    count: int
    _files: list = field(default_factory=list, repr=False)

    def release(self) -> None:
        for handle in self._files:
            handle.close()  # closing the file drops its flock
        self._files.clear()

    def __enter__(self) -> UidLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def uids_in_use(low: int, high: int) -> set[int]:
    """uids in [low, high) that some process on this machine runs as."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            if low <= uid < high:
                found.add(uid)
    return found


def _lock_block(folder: Path, block: int):
    handle = open(folder / f"uids-{block * BLOCK}.lock", "a")  # noqa: SIM115 (held for the lease)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def lease(first: int, count: int, folder: Path | None = None) -> UidLease:
    """The lowest free range of `count` uids from `first` up (kept as is when free)."""
    if count < 1:
        raise ValueError(f"a uid lease needs at least one uid, not {count}")
    folder = folder or lease_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and folder.stat().st_uid == 0:
        # Student code (another uid) must not even open a lease file: an flock it held would block every
        # grading run that starts meanwhile. The namespaces' private /run hides them as well.
        folder.chmod(0o700)
    # One scan at a time: two runs that each hold a block the other wants would otherwise both let go
    # and leapfrog each other up to HIGHEST_UID.
    with open(folder / "scan.lock", "a") as scanning:
        fcntl.flock(scanning, fcntl.LOCK_EX)
        return _first_free_range(folder, first, count)


def _first_free_range(folder: Path, first: int, count: int) -> UidLease:
    start = first
    while start + count - 1 <= HIGHEST_UID:
        taken, busy_block = [], None
        for block in range(start // BLOCK, (start + count - 1) // BLOCK + 1):
            handle = _lock_block(folder, block)
            if handle is None:
                busy_block = block
                break
            taken.append(handle)
        if busy_block is None:
            running = uids_in_use(start, start + count)
            if not running:
                return UidLease(start, count, taken)
            busy_block = max(running) // BLOCK
        for handle in taken:
            handle.close()
        start = (busy_block + 1) * BLOCK
    raise RuntimeError(f"no free range of {count} sandbox uids between {first} and {HIGHEST_UID}: other "
                       f"grading runs hold them (lease files in {folder}). Wait for them, or grade fewer "
                       f"submissions at once (--assignment), or start lower with --first-uid")
