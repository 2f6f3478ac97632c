"""A cell's time limit counted in the time the machine gave it, not in wall time.

On a busy machine (another grading run, other work: more runnable processes than cores) a correct cell
waits for a CPU and its wall time grows with the load. The clock charges a cell the wall time minus the
time its processes (the kernel and everything it started: the ranks) stood in the run queue waiting for
a core, read from Linux's /proc/<pid>/task/<tid>/schedstat. A sleeping or deadlocked cell waits for no
core, so it is charged in full; an endless loop is charged what the machine gives it; and no cell runs
longer than `stretch` times its limit in wall time, whatever the load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

# What the clock says about a running cell.
WITHIN = None        # under its limit: let it run
OVER_LIMIT = "limit"  # it has had its limit of the machine's time: the student's cell ran too long
TOO_BUSY = "busy"     # it reached `stretch` x its limit in wall time without having had its limit


def _children_of(proc: Path) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()   # after "pid (comm) ": state, ppid, ...
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def run_queue_waits(root_pid: int, proc: Path = Path("/proc")) -> dict[int, int]:
    """Nanoseconds each thread of root_pid and of its descendants has waited for a CPU so far."""
    children, waits, todo = _children_of(proc), {}, [root_pid]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            tasks = list((proc / str(pid) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                waits[int(task.name)] = int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return waits


class CellClock:
    """Started when a cell starts; `verdict()` (called every few seconds) says whether it may run on."""

    def __init__(self, limit: float, stretch: float, root_pid: int | None,
                 now: Callable[[], float] = time.monotonic,
                 waits: Callable[[int], dict[int, int]] = run_queue_waits):
        self.limit, self.stretch, self.root_pid = limit, stretch, root_pid
        self._now, self._waits = now, waits
        self.started = self._last = now()
        self.charged = 0.0
        self._seen = self._sample()

    def _sample(self) -> dict[int, int]:
        if self.root_pid is None:
            return {}
        try:
            return self._waits(self.root_pid)
        except OSError:
            return {}

    @property
    def wall(self) -> float:
        return self._last - self.started

    def verdict(self) -> str | None:
        """WITHIN, OVER_LIMIT or TOO_BUSY, after charging the time since the last call."""
        now, waits = self._now(), self._sample()
        interval = max(0.0, now - self._last)
        # The cell moves at the pace of its most delayed thread (ranks wait for each other).
        waited = max((ns - self._seen.get(tid, 0) for tid, ns in waits.items()), default=0) / 1e9
        self.charged += interval - min(interval, max(0.0, waited))
        self._last, self._seen = now, waits
        if self.charged >= self.limit:
            return OVER_LIMIT
        if self.wall >= self.stretch * self.limit:
            return TOO_BUSY
        return WITHIN

    def describe(self) -> str:
        return f"{self.charged:.0f} s of the machine's time in {self.wall:.0f} s"
