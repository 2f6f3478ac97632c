"""The parent's side of one ``run_ranks`` call: fork the ranks, pump their pipes, notice ends, reap.

``RankGroup`` holds the pids, pipes, output relays and the outcomes received so far; ``runner`` decides
what to do with them (return, raise the first failure, or report a hang).
"""

from __future__ import annotations

import os
import pickle
import selectors
import signal
import socket
import sys
import threading
import time

from ..plumbing import plain
from ..plumbing.processes import kill_and_reap
from ._child import ChildJob, RankPipes, run_child
from .rank_outcome import RankDied, RankOutcome, RankRaised, from_wire
from .relay import Relay

_STACK_DUMP_WAIT_S = 2.0
_EXIT_GRACE_S = 1.0
_FORK_LOCK = threading.Lock()


class RankGroup:
    """The parent's view of one call: pids, pipes, output relays and the results received so far."""

    def __init__(self, world_size: int, plain_results: bool = False):
        self.world_size = world_size
        self.plain_results = plain_results
        self.pipes = [RankPipes.create() for _ in range(world_size)]
        self.pids: list[int] = []
        self.pgid = 0
        self.selector = selectors.DefaultSelector()
        self.result_bytes = {rank: bytearray() for rank in range(world_size)}
        self.results: dict[int, RankOutcome] = {}
        self.exited: dict[int, tuple[int, int]] = {}
        self.reaped: set[int] = set()

    def all_fds(self) -> list[int]:
        return [fd for p in self.pipes for fd in (*p.child_ends(), *p.parent_ends())]

    def start(self, fn, args, backend, listener: socket.socket, group_timeout_s: float) -> None:
        with _FORK_LOCK:  # one call forks at a time, so no rank inherits another call's write ends
            self._fork_all(fn, args, backend, listener, group_timeout_s)

    def _fork_all(self, fn, args, backend, listener: socket.socket, group_timeout_s: float) -> None:
        port = listener.getsockname()[1]
        all_fds = tuple(self.all_fds())
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for rank in range(self.world_size):
            pid = os.fork()
            if pid == 0:
                run_child(ChildJob(rank, self.world_size, fn, args, backend, self.pipes[rank], all_fds,
                                   listener.fileno(), port, self.pgid, group_timeout_s, self.plain_results))
            self.pids.append(pid)
            self.pgid = self.pgid or pid
            try:
                os.setpgid(pid, self.pgid)  # also done by the child: whichever runs first wins the race
            except OSError:
                pass
        for pipes in self.pipes:
            for fd in pipes.child_ends():
                os.close(fd)
        for rank, pipes in enumerate(self.pipes):
            self.selector.register(pipes.out[0], selectors.EVENT_READ, ("out", rank, Relay(rank, False)))
            self.selector.register(pipes.err[0], selectors.EVENT_READ, ("err", rank, Relay(rank, True)))
            self.selector.register(pipes.result[0], selectors.EVENT_READ, ("result", rank, None))

    def pump(self, wait_s: float) -> int | None:
        """Reads whatever is ready; returns the rank of a newly failed rank, if any."""
        failed = None
        for key, _ in self.selector.select(max(wait_s, 0.0)):
            kind, rank, relay = key.data
            data = os.read(key.fd, 65536)
            if data and kind == "result":
                self.result_bytes[rank] += data
                if self._result_complete(rank) and self._finish_result(rank):
                    failed = rank if failed is None else failed
            elif data:
                relay.feed(data)
            else:
                self.selector.unregister(key.fd)
                if relay is not None:
                    relay.close()
                elif rank not in self.results and self.result_bytes[rank]:
                    self.results[rank] = RankDied("the rank stopped while sending its result")
                    failed = rank if failed is None else failed
        failed = self._reap(failed)
        return failed

    def _result_complete(self, rank: int) -> bool:
        """Results are length-prefixed: a concurrent call's ranks may hold our pipe open, so no EOF."""
        raw = self.result_bytes[rank]
        return rank not in self.results and len(raw) >= 8 and len(raw) - 8 >= _length(raw)

    def _finish_result(self, rank: int) -> bool:
        """Decodes a complete result; True when the rank failed."""
        self.selector.unregister(self.pipes[rank].result[0])
        payload = bytes(self.result_bytes[rank][8:])
        try:
            self.results[rank] = from_wire(plain.decode(payload) if self.plain_results
                                           else pickle.loads(payload))
        except Exception as error:  # noqa: BLE001 - a class this process cannot import, or not plain data
            reason = ("it is not plain data, and with plain_results=True nothing else is read"
                      if self.plain_results else str(error))
            self.results[rank] = RankRaised(
                type(error).__name__, f"the value rank {rank} returned could not be read here: {reason}",
                "return plain values (numbers, strings, lists, dicts, tensors)\n")
        return self.results[rank].failed

    def _reap(self, failed: int | None) -> int | None:
        """Notices ranks that ended, without reaping them: a zombie keeps the process group id ours."""
        for rank, pid in enumerate(self.pids):
            if rank in self.exited or rank in self.reaped:
                continue
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if info is not None and info.si_pid == pid:
                self.exited[rank] = (info.si_code, info.si_status)
                if rank not in self.results:
                    self.results[rank] = RankDied(_describe_exit(info.si_code, info.si_status))
                    failed = rank if failed is None else failed
        return failed

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        dumps = {rank: b"" for rank in ranks}
        for rank in ranks:
            try:
                os.kill(self.pids[rank], signal.SIGUSR1)
            except ProcessLookupError:
                pass
        deadline, last_data = time.monotonic() + _STACK_DUMP_WAIT_S, time.monotonic()
        stack_selector = selectors.DefaultSelector()
        for rank in ranks:
            stack_selector.register(self.pipes[rank].stack[0], selectors.EVENT_READ, rank)
        while time.monotonic() < deadline:
            if all(dumps.values()) and time.monotonic() - last_data > 0.1:
                break
            for key, _ in stack_selector.select(0.05):
                dumps[key.data] += os.read(key.fd, 65536)
                last_data = time.monotonic()
        stack_selector.close()
        return {rank: text.decode("utf-8", errors="replace") for rank, text in dumps.items()}

    def kill_all(self) -> None:
        """SIGKILL the whole process group (ranks and anything they started), then reap the ranks."""
        unreaped = [rank for rank in range(len(self.pids)) if rank not in self.reaped]
        kill_and_reap([self.pids[rank] for rank in unreaped], self.pgid)
        self.reaped.update(unreaped)

    def release_and_reap(self) -> None:
        """Tell finished ranks they may exit, give them a moment, then make sure none is left."""
        for pipes in self.pipes:
            try:
                os.write(pipes.control[1], b"x")  # a byte, not EOF: other calls' ranks may share the pipe
            except OSError:
                pass
        deadline = time.monotonic() + _EXIT_GRACE_S
        while len(self.exited.keys() | self.reaped) < len(self.pids) and time.monotonic() < deadline:
            self.pump(0.01)
        self.kill_all()

    def _output_open(self) -> bool:
        return any(key.data[0] != "result" for key in self.selector.get_map().values())

    def drain_output(self, wait_s: float = 0.2) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self._output_open():
            for key, _ in self.selector.select(0.02):
                kind, _, relay = key.data
                if kind == "result":
                    continue
                data = os.read(key.fd, 65536)
                if data:
                    relay.feed(data)
                else:
                    self.selector.unregister(key.fd)
                    relay.close()
        for key in list(self.selector.get_map().values()):
            if key.data[2] is not None:
                key.data[2].close()

    def close(self) -> None:
        self.selector.close()
        for pipes in self.pipes:
            for fd in pipes.parent_ends():
                _close_quietly(fd)


def _length(header: bytearray) -> int:
    return int.from_bytes(header[:8], "little")


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _describe_exit(code: int, status: int) -> str:
    if code in (os.CLD_KILLED, os.CLD_DUMPED):
        name = signal.Signals(status).name if status in signal.Signals._value2member_map_ else str(status)
        hint = " (often: out of memory)" if status == signal.SIGKILL else ""
        return f"the process was killed by signal {name}{hint} before returning"
    return f"the process exited with code {status} before returning (os._exit or sys.exit?)"
