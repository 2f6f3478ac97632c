"""Preempting real ranks on purpose: ``run_preempted`` runs a rank function as ``run_ranks`` does, and fails
it the way clusters do, at a planned point: SIGKILL or SIGTERM at a step, or SIGKILL in the middle of a save.

The ranks announce their steps (``step_reached``) and every file-name change under a watched folder over
a pipe, so the caller gets what happened before the kill, from ranks that never returned. Nothing a
rank does is trusted beyond plain data: values come back through the weights-only loader.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import time
from dataclasses import dataclass, field

from ..launch.rank_group import RankGroup
from ..launch.rank_outcome import RankDied, RankRaised, RankReturned
from ..launch.runner import _check_arguments, _hung
from ..plumbing.backend import resolve_backend
from .preemption_rank import Preemption, arm, step_reached

__all__ = ["FileChange", "PreemptedRun", "Preemption", "run_preempted", "step_reached"]


@dataclass(frozen=True)
class FileChange:
    """A change of a file name under the watched folder, by ``rank``, after it reported ``step``."""

    rank: int
    step: int
    event: str          # the audit event: open (for writing), os.rename, os.remove, os.mkdir, ...
    path: str           # relative to the folder


@dataclass
class PreemptedRun:
    """What a preempted (or unpreempted) run did. ``outcomes[rank]``: "returned", or how it ended."""

    world_size: int
    preemption: Preemption | None
    values: dict[int, object] = field(default_factory=dict)
    outcomes: dict[int, str] = field(default_factory=dict)
    tracebacks: dict[int, str] = field(default_factory=dict)   # of ranks that raised
    steps: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    changes: list[FileChange] = field(default_factory=list)
    struck: bool = False
    grace_expired: bool = False
    error: str | None = None     # a failure that was not the preemption (a rank raised first, a hang)

    @property
    def all_returned(self) -> bool:
        return len(self.values) == self.world_size

    def last_step(self, rank: int = 0) -> int:
        return self.steps.get(rank, [(0, "")])[-1][0]


def _rank_body(rank, world_size, fn, watch, *args):
    """Runs in each rank: arm the preemption, then the rank function."""
    read_fd, events_fd, plan, folder = watch
    os.close(read_fd)
    arm(rank, plan, folder, events_fd)
    return fn(rank, world_size, *args)


class _Events:
    """The parent's end of the ranks' message pipe: complete JSON lines, garbage ignored."""

    def __init__(self, read_fd: int):
        self.fd, self.pending = read_fd, b""
        os.set_blocking(read_fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(read_fd, selectors.EVENT_READ)

    def read(self, wait_s: float = 0.0) -> list[list]:
        messages = []
        if not self.selector.select(wait_s):
            return messages
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, list) and message and isinstance(message[0], str):
                messages.append(message)
        return messages

    def close(self) -> None:
        self.selector.close()
        os.close(self.fd)


def _record(run: PreemptedRun, messages: list[list]) -> None:
    for message in messages:
        try:
            if message[0] == "step":
                run.steps.setdefault(int(message[1]), []).append((int(message[2]), str(message[3])))
            elif message[0] == "change":
                run.changes.append(FileChange(int(message[1]), int(message[2]), str(message[3]),
                                              str(message[4])))
            elif message[0] == "struck":
                run.struck = True
        except (IndexError, TypeError, ValueError):
            continue


def _describe(outcome) -> str:
    if isinstance(outcome, RankReturned):
        return "returned"
    if isinstance(outcome, RankDied):
        return outcome.why
    return f"raised {outcome.type_name}: {outcome.message}"


def run_preempted(fn, world_size: int, *args, preemption: Preemption | None = None, folder=None,
                  timeout: float = 60, backend: str = "gloo") -> PreemptedRun:
    """``fn(rank, world_size, *args)`` on forked ranks, failed as ``preemption`` plans (None: not at all).

    ``folder``: where file-name changes are watched (and reported in ``.changes``). Values come back as
    plain data only. A rank that raises or dies before the preemption struck, or ranks that do not end
    within ``timeout``, end the run with ``.error`` set; everything the call started is killed on return.
    """
    _check_arguments(fn, world_size, timeout)
    backend = resolve_backend(backend, world_size)
    run = PreemptedRun(world_size, preemption)
    read_fd, write_fd = os.pipe()
    events, ranks = _Events(read_fd), RankGroup(world_size, plain_results=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(max(128, 2 * world_size))
        watch = (read_fd, write_fd, preemption, str(folder) if folder else None)
        ranks.start(_rank_body, (fn, watch, *args), backend, listener, group_timeout_s=2 * timeout + 60)
        listener.close()
        os.close(write_fd)
        write_fd = -1
        _follow(run, ranks, events, time.monotonic() + timeout, timeout)
    finally:
        listener.close()
        if write_fd >= 0:
            os.close(write_fd)
        try:
            ranks.release_and_reap() if run.all_returned else ranks.kill_all()
        finally:
            ranks.close()
            events.close()
    return run


def _follow(run: PreemptedRun, ranks: RankGroup, events: _Events, deadline: float, timeout: float) -> None:
    """Pump the ranks until all ended; strike deadlines (grace, settle) and the timeout are enforced here."""
    plan, kill_at = run.preemption, None
    while len(ranks.results) < run.world_size:
        _record(run, events.read(0.02))
        failed = ranks.pump(0.03)
        _record(run, events.read())
        if failed is not None and not run.struck and plan is not None and plan.kind == "file_bytes":
            # the first rank noticed may be a peer that lost its connection: look at every rank
            run.struck = any(_died_of(outcome, signal.SIGXFSZ) for outcome in ranks.results.values())
        if failed is not None and not run.struck:
            when = " before the planned preemption" if plan is not None else ""
            run.error = f"rank {failed} failed{when}: {_describe(ranks.results[failed])}"
            ranks.kill_all()
            break
        if run.struck and kill_at is None:
            kill_at = time.monotonic() + (plan.grace_s if plan.kind == "sigterm" else plan.settle_s)
        now = time.monotonic()
        if kill_at is not None and now > kill_at and len(ranks.results) < run.world_size:
            run.grace_expired = plan.kind == "sigterm"
            ranks.kill_all()
            ranks.pump(0.0)
            break
        if now > deadline:
            run.error = str(_hung(ranks, timeout))
            break
    ranks.drain_output(0.0)
    _record(run, events.read())
    for rank in range(run.world_size):
        outcome = ranks.results.get(rank)
        run.outcomes[rank] = _describe(outcome) if outcome is not None else "killed after the preemption"
        died = isinstance(outcome, RankDied)
        signalled = re.search(r"killed by signal (\w+)", outcome.why) if died else None
        if run.struck and signalled:
            run.outcomes[rank] = f"killed by {signalled.group(1)} (the planned preemption)"
        if isinstance(outcome, RankReturned):
            run.values[rank] = outcome.value
        elif isinstance(outcome, RankRaised):
            run.tracebacks[rank] = outcome.traceback_text


def _died_of(outcome, signum: int) -> bool:
    return isinstance(outcome, RankDied) and signal.Signals(signum).name in outcome.why
