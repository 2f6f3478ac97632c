"""Chapter 09's checks, rank side: what each rank runs (the student's save/load/train), and the data it uses.

States to save are rebuilt from a seed on both sides (the judge never needs them sent); every rank
function returns plain data only. ``scratch_folder`` makes a folder the ranks can write to even when the
grader's sandbox runs them under another uid.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.refusals import check_not_refused
from course_lib.grading.sandbox.policy import POLICY_ENV, SandboxPolicy
from course_lib.real.cluster.preemption import step_reached

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.int64)


def make_state(seed: int, rank: int, version: int) -> dict:
    """A checkpoint-like state: shared entries (the same on every rank) and this rank's own (its RNG)."""
    shared = torch.Generator().manual_seed(seed * 31 + version)
    own = torch.Generator().manual_seed(seed * 31 + version + 7919 * (rank + 1))
    dtype = DTYPES[seed % len(DTYPES)]
    weights = {f"layer{i}.weight": (torch.randn(3 + i, 2 + seed % 3, generator=shared) * 50).to(dtype)
               for i in range(2)}
    step = torch.tensor(float(version))
    optimizer = {"state": {0: {"step": step, "exp_avg": torch.randn(4, generator=shared)},
                           1: {"step": step.clone(), "exp_avg": torch.randn(0, generator=shared)}},
                 "param_groups": [{"lr": 0.05, "betas": [0.9, 0.999], "params": [0, 1]}]}
    return {"model": weights, "optimizer": optimizer, "step": version * 3, "note": f"version {version}",
            "rank": rank, "rng": torch.randint(0, 255, (16,), generator=own, dtype=torch.uint8),
            "position": {"epoch": version // 2, "batch": float(version) / 4}}


@contextmanager
def scratch_folder():
    """A fresh empty folder (removed afterwards) that the ranks may write to, sandboxed or not."""
    policy_text = os.environ.get(POLICY_ENV)
    policy = SandboxPolicy.from_json(policy_text) if policy_text else None
    base = policy.home if policy and policy.home and os.path.isdir(policy.home) else None
    folder = tempfile.mkdtemp(prefix="course-ch09-", dir=base)
    if policy and os.geteuid() == 0:
        os.chown(folder, policy.uid, policy.gid)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _plain(value):
    """The loaded value as plain data (tensors copied; objects the transport cannot carry named)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key if isinstance(key, (str, int)) else repr(key): _plain(item)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class RoundTripOutcome:
    """One rank's round trip: what loading an empty folder gave ("not asked" when none was given) and
    what loading the folder gave after its saves (plain data)."""

    empty: object
    loaded: object


@dataclass(frozen=True)
class LoadOutcome:
    """What load_checkpoint gave from one folder: the state (plain data), or what it raised (as text)."""

    state: object = None
    raised: str | None = None


@dataclass(frozen=True)
class SaveRecord:
    """One rank's recorded save: its events ([monotonic ns, kind, path relative to the folder, inode, is a
    folder] each; kind an os sync call's name, "create" or "rename"), when the save started and returned,
    and (rank 0; None elsewhere) the folder's listing before and after it (``folder_listing``)."""

    events: list
    started: int
    returned: int
    before: dict | None
    after: dict | None


@dataclass(frozen=True)
class FileEvent:
    """One recorded event of a save, on one rank: a sync call (os.fsync, os.fdatasync: of ``inode``; os.sync),
    a file or folder made, or a rename ("old -> new"), at ``t`` ns on the machine's monotonic clock."""

    t: int
    kind: str
    path: str
    inode: int
    is_dir: bool
    rank: int


def round_trip_side(rank, world_size, save, load, folder, seed, empty_folder, versions):
    """Load from an empty folder; save each version in turn; load what the folder then holds."""
    save_checkpoint, load_checkpoint = save.resolve(), load.resolve()
    outcome = {"empty": _plain(load_checkpoint(empty_folder)) if empty_folder else "not asked"}
    for version in range(1, versions + 1):
        save_checkpoint(make_state(seed, rank, version), folder)
    outcome["loaded"] = _plain(load_checkpoint(folder))
    check_not_refused()
    return outcome


def save_versions_side(rank, world_size, save, folder, seed, versions):
    """Save version 1, 2, ... in turn, announcing step v - 1 before saving version v (where kills strike)."""
    save_checkpoint = save.resolve()
    for version in range(1, versions + 1):
        step_reached(version - 1)
        save_checkpoint(make_state(seed, rank, version), folder)
    step_reached(versions)
    check_not_refused()
    return True


def load_side(rank, world_size, load, folders):
    """What load_checkpoint gives this rank from each folder: {"state": ...} or {"raised": its error}."""
    load_checkpoint = load.resolve()
    loaded = []
    for folder in folders:
        try:
            loaded.append({"state": _plain(load_checkpoint(folder))})
        except Exception as error:  # noqa: BLE001 - a checkpoint that cannot be read is judged, not fatal
            loaded.append({"raised": f"{type(error).__name__}: {error}"[:300]})
    check_not_refused()
    return loaded


def train_side(rank, world_size, student, job):
    """The student's train(job) from a seeded RNG; the final weights of the model it returns."""
    train = student.resolve()
    torch.manual_seed(job.rank_seed(rank))
    model = train(job)
    check_not_refused()
    module = getattr(model, "module", model)
    if not isinstance(module, nn.Module):
        return f"train(job) returned {type(model).__name__}, not the model"
    return {name: tensor.detach().clone() for name, tensor in module.state_dict().items()}


# ---- durability: what a save syncs, and when (recorded here; judged by the instructor's hidden check) ----

SYNC_CALLS = ("fsync", "fdatasync", "sync")
_ENTRY_EVENTS = {"open": "create", "os.mkdir": "create", "os.rename": "rename"}


class SyncRecorder:
    """Records, with CLOCK_MONOTONIC times (one clock for every process of the machine), each os.fsync,
    os.fdatasync and os.sync a save makes, the files it opens for writing, the folders it makes, and its
    renames (os.rename and os.replace both raise the "os.rename" audit event)."""

    def __init__(self, folder: str):
        self.folder, self.events, self.on = os.path.realpath(folder), [], False
        self.originals = {name: getattr(os, name) for name in SYNC_CALLS if hasattr(os, name)}

    def _relative(self, path) -> str | None:
        try:
            path = os.path.realpath(os.fsdecode(os.fspath(path)))
        except (TypeError, ValueError):
            return None
        inside = path == self.folder or path.startswith(self.folder + os.sep)
        return os.path.relpath(path, self.folder) if inside else None

    def _synced(self, name: str, fd=None) -> None:
        if not self.on:
            return
        if fd is None:
            self.events.append([time.monotonic_ns(), name, "", -1, False])
            return
        try:
            number = fd if isinstance(fd, int) else fd.fileno()
            status = os.fstat(number)
            where = self._relative(os.readlink(f"/proc/self/fd/{number}"))
        except (OSError, TypeError, ValueError, AttributeError):
            return
        self.events.append([time.monotonic_ns(), name, where, status.st_ino, stat.S_ISDIR(status.st_mode)])

    def install(self) -> None:
        """Wrap os's sync calls, and watch the audit events (on from then on, recording while ``on``)."""
        for name, original in self.originals.items():
            def wrapper(*args, _name=name, _original=original):
                result = _original(*args)
                self._synced(_name, args[0] if args else None)
                return result
            setattr(os, name, wrapper)
        sys.addaudithook(self._audit)

    def rebind(self, namespace) -> None:
        """Names in ``namespace`` bound to an unwrapped sync call (``from os import fsync``): the wrapper."""
        if not isinstance(namespace, dict):
            return
        for key, value in list(namespace.items()):
            for name, original in self.originals.items():
                if value is original:
                    namespace[key] = getattr(os, name)

    def _audit(self, event: str, args) -> None:
        kind = _ENTRY_EVENTS.get(event)
        if not self.on or kind is None:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, 0))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if not writes or isinstance(path, int) or path is None:
                return
            paths = [path]
        else:
            paths = [p for p in tuple(args)[:2 if kind == "rename" else 1] if not isinstance(p, int)]
        relative = [self._relative(p) for p in paths]
        if all(r is not None for r in relative) and relative:
            self.events.append([time.monotonic_ns(), kind, " -> ".join(relative), -1, False])


def folder_listing(folder: str) -> dict[str, list]:
    """Every entry under ``folder``: relative path -> [inode, size, mtime_ns, is a folder]."""
    listing = {".": [os.stat(folder).st_ino, 0, 0, True]}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                status = os.lstat(path)
            except OSError:
                continue
            listing[os.path.relpath(path, folder)] = [status.st_ino, status.st_size, status.st_mtime_ns,
                                                      stat.S_ISDIR(status.st_mode)]
    return listing


CHECKPOINTS = "checkpoints"   # the save's path under the recorded folder: not there before the first save


def sync_record_side(rank, world_size, save, folder, seed):
    """Save version 1 to ``folder``/checkpoints, which does not exist yet, then version 2, each recorded:
    this rank's sync calls, writes and renames in order, when its save started and returned, and (rank 0)
    the folder's listing before and after it. One record per save, the first save's first."""
    recorder = SyncRecorder(folder)
    recorder.install()
    save_checkpoint = save.resolve()
    recorder.rebind(getattr(save_checkpoint, "__globals__", None))
    path, saves = os.path.join(folder, CHECKPOINTS), []
    for version in (1, 2):
        torch.distributed.barrier()
        before = folder_listing(folder) if rank == 0 else None
        torch.distributed.barrier()
        recorder.events, recorder.on, started = [], True, time.monotonic_ns()
        save_checkpoint(make_state(seed, rank, version), path)
        returned, recorder.on = time.monotonic_ns(), False
        torch.distributed.barrier()
        after = folder_listing(folder) if rank == 0 else None
        saves.append({"events": recorder.events, "started": started, "returned": returned, "before": before,
                      "after": after})
    check_not_refused()
    return saves
