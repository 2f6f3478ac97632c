"""The rank's side of a deliberate preemption: announce steps, strike at the planned one, watch the files.

``run_preempted`` arms every rank with ``arm`` before the rank function starts; the function (or the
training job it is handed) calls ``step_reached(step, note)`` after each step. That call tells the parent,
and at the planned step carries out the preemption: SIGKILL to every rank, SIGTERM to this rank, or the
arming of a kill inside the next save (a file-size limit, or a count of file-name changes that an audit
hook watches under the checkpoint folder). Every change of a file name there is reported as it happens.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from dataclasses import dataclass, field

# Audit events that change what a folder holds (os.replace raises "os.rename"; os.unlink "os.remove").
CHANGE_EVENTS = ("open", "os.rename", "os.remove", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.symlink",
                 "os.link", "os.truncate")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
MAX_MESSAGE_BYTES = 4000   # below PIPE_BUF: a message from one rank is never cut by another's


@dataclass(frozen=True)
class Preemption:
    """One deliberate failure. ``kind``: "sigkill" (every rank, once a rank reaches ``step``), "sigterm"
    (each rank as it reaches ``step``, or ``step + 1`` for ``late_ranks``), "file_bytes" (a rank dies as
    a file it writes after ``step`` grows past ``amount`` bytes), "file_change" (rank ``rank`` dies just
    before its ``amount``-th file-name change under the folder after ``step``; with ``torn``, just after
    it, at its first write: a file that change opened is left created or emptied, and no byte written)."""

    kind: str
    step: int
    amount: int = 0
    rank: int = 0
    late_ranks: tuple[int, ...] = ()
    grace_s: float = 5.0     # sigterm: how long the ranks may take to stop before they are killed
    settle_s: float = 0.5    # file kinds: how long the other ranks go on before the group is killed
    torn: bool = False       # file_change: die after the change, at the rank's next write to a file

    KINDS = ("sigkill", "sigterm", "file_bytes", "file_change")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise ValueError(f"Preemption kind must be one of {self.KINDS}, not {self.kind!r}")
        if self.kind.startswith("file") and self.amount < 1:
            raise ValueError(f"a {self.kind} preemption needs amount >= 1 (bytes, or which change)")

    def strikes_at(self, rank: int) -> int:
        """The step at which this rank is struck (or armed)."""
        return self.step + (1 if rank in self.late_ranks else 0)

    def describe(self) -> str:
        if self.kind == "sigkill":
            return f"SIGKILL to every rank as soon as one reached step {self.step}"
        if self.kind == "sigterm":
            who = "rank" if len(self.late_ranks) == 1 else "ranks"
            late = (f" ({who} {', '.join(map(str, self.late_ranks))} one step later, at {self.step + 1})"
                    if self.late_ranks else "")
            return f"SIGTERM to each rank when it reached step {self.step}{late}"
        return f"SIGKILL in the save after step {self.step}: {self.how()}"

    def how(self) -> str:
        """How a kill inside a save struck (file kinds)."""
        struck = (f"a rank died as a file it wrote grew past {self.amount} bytes" if self.kind == "file_bytes"
                  else f"rank {self.rank} died just after its change number {self.amount} to a file name, "
                       "at its first write to a file" if self.torn
                  else f"rank {self.rank} died just before its change number {self.amount} to a file name")
        return f"{struck}, the others were killed {self.settle_s:g} s later"


@dataclass
class _Armed:
    rank: int
    plan: Preemption | None
    folder: str | None
    events_fd: int
    step: int = 0
    counting: bool = False
    changes: int = 0
    busy: bool = field(default=False)   # the audit hook's own calls do not count


_ARMED: _Armed | None = None


def send(*message) -> None:
    """One message to the parent (a JSON list on one line); silently dropped if the parent is gone."""
    if _ARMED is None:
        return
    data = (json.dumps(message)[:MAX_MESSAGE_BYTES] + "\n").encode()
    try:
        os.write(_ARMED.events_fd, data)
    except OSError:
        pass


def arm(rank: int, plan: Preemption | None, folder: str | None, events_fd: int) -> None:
    """In a rank, before the rank function runs: report changes under ``folder``; carry out ``plan``."""
    global _ARMED
    _ARMED = _Armed(rank, plan, os.path.abspath(folder) if folder else None, events_fd)
    sys.dont_write_bytecode = True     # a .pyc written after a file-size limit would kill the wrong write
    if folder:
        sys.addaudithook(_audit)


def step_reached(step: int, note: str = "") -> None:
    """Called by a rank after each step: reports it, and strikes if this is the planned step."""
    armed = _ARMED
    if armed is None:
        return
    armed.step = step
    send("step", armed.rank, int(step), str(note))
    plan = armed.plan
    if plan is None or step != plan.strikes_at(armed.rank):
        return
    if plan.kind == "sigkill":
        send("struck", armed.rank, step)
        os.killpg(os.getpgrp(), signal.SIGKILL)
    elif plan.kind == "sigterm":
        send("struck", armed.rank, step)
        os.kill(os.getpid(), signal.SIGTERM)    # a handler the rank installed runs right after this line
    elif plan.kind == "file_bytes":
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)   # Python ignores it: restore the kill
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (plan.amount, hard))
    elif armed.rank == plan.rank:
        armed.counting, armed.changes = True, 0


def _changed_path(event: str, args) -> str | None:
    """The path an audited call is about to change, or None when it changes nothing (a read)."""
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, 0))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if not writes or isinstance(path, int):
            return None
    else:
        path = args[0] if args else None
    if path is None or isinstance(path, int):
        return None
    try:
        return os.path.abspath(os.fsdecode(os.fspath(path)))
    except TypeError:
        return None


def _audit(event: str, args) -> None:
    armed = _ARMED
    if event not in CHANGE_EVENTS or armed is None or armed.busy:
        return
    armed.busy = True
    try:
        path = _changed_path(event, args)
        if path is None or not (path == armed.folder or path.startswith(armed.folder + os.sep)):
            return
        relative = os.path.relpath(path, armed.folder)
        send("change", armed.rank, armed.step, event, relative)
        if armed.counting:
            armed.changes += 1
            if armed.changes == armed.plan.amount:
                send("struck", armed.rank, armed.step)
                if armed.plan.torn:      # the change happens; the next write that grows a file kills
                    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
                    resource.setrlimit(resource.RLIMIT_FSIZE, (0, hard))
                    armed.counting = False
                else:
                    os.kill(os.getpid(), signal.SIGKILL)
    finally:
        armed.busy = False
