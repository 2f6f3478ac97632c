"""The process primitives every starter in course_lib shares: reap, a call in a fresh child, sessions, exec.

``run_ranks`` builds on ``kill_and_reap``; the grader's isolated calls use ``call_in_fresh_child``, its
sandboxes ``exec_python``, its nbgrader and judge runs ``Sessions`` and its clean-up after a student
``kill_processes_of_uid``: the fork, exec, kill and reap code of course_lib lives here.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path


class ChildLimitError(RuntimeError):
    """A fresh child ran past its time limit or sent back more bytes than allowed."""


_FORKED_CHILD = False


def in_forked_child() -> bool:
    """Whether this process is a rank or a fresh child forked by course_lib (where a check runs student
    code, and may set process-wide guards it would never set in a notebook's kernel)."""
    return _FORKED_CHILD


def mark_forked_child() -> None:
    global _FORKED_CHILD
    _FORKED_CHILD = True


def kill_and_reap(pids: Iterable[int], pgid: int = 0) -> None:
    """SIGKILL the process group ``pgid`` (when given) and then each pid, and wait for each pid.

    The group is signalled before any member is reaped, so its id cannot have been reused meanwhile;
    each pid is killed on its own too, in case it had not joined the group yet.
    """
    pids = list(pids)
    if pgid and pids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _read_all(read_fd: int, timeout: float, max_bytes: int) -> bytes:
    chunks, size, deadline = [], 0, time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ChildLimitError(f"did not return within {timeout:g} s (an endless loop or a deadlock?)")
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise ChildLimitError(f"returned more than {max_bytes // 1024**2} MiB")
        chunks.append(chunk)


def _child_body(work: Callable[[], bytes], write_fd: int) -> None:
    """Runs in the child: never returns, so the parent's code (and its atexit hooks) never runs twice."""
    try:
        mark_forked_child()
        payload = work()
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(0)


def call_in_fresh_child(work: Callable[[], bytes], timeout: float, max_bytes: int) -> bytes:
    """The bytes ``work()`` returns when run in a forked child; b"" when the child died first.

    Nothing the child does reaches this process except those bytes. Raises ChildLimitError when the
    child has not finished after ``timeout`` seconds or sends more than ``max_bytes``; the child is
    killed and reaped on every path. ``work`` should catch its own errors and encode them.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child_body(work, write_fd)
    os.close(write_fd)
    try:
        return _read_all(read_fd, timeout, max_bytes)
    finally:
        os.close(read_fd)
        kill_and_reap([pid])


def fresh_python_output(code: str, timeout: float = 120) -> str:
    """What a fresh, isolated (``-I``) interpreter of this environment prints for ``code``, run from /."""
    return subprocess.run([sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True,
                          timeout=timeout).stdout.strip()


def run_command(command: list[str], timeout: float) -> tuple[int, str]:
    """Run ``command`` to its end: (its exit status, what it wrote on stderr); a command that cannot start
    or outlasts ``timeout`` seconds is a failure (status 1) whose stderr says why."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 1, str(error)
    return done.returncode, done.stderr


def exec_python(arguments: list[str]) -> None:
    """Replace this process (same pid) with a fresh interpreter running ``python ARGUMENTS``."""
    os.execv(sys.executable, [sys.executable, *arguments])


KEEP_OUTPUT_BYTES = 1 << 20   # the tail of a command's output Sessions.run keeps
PIPE_GRACE_S = 1.0            # after the command exits, how long its output pipe may stay open


class Sessions:
    """Commands run each in its own session (so a timeout kills all it started), tracked while they run.

    ``kill_all`` ends every session still running (an interrupted grading run) and returns their tags,
    for the caller to clean up after them (the grader kills what is left under each sandbox uid).
    """

    def __init__(self):
        self._live: dict[subprocess.Popen, object] = {}
        self._lock = threading.Lock()

    def run(self, command: list[str], cwd, env: dict | None, timeout: float, tag=None,
            limit_name: str = "its time limit", keep_bytes: int = KEEP_OUTPUT_BYTES) -> tuple[bool, str]:
        """(exited with 0, the last ``keep_bytes`` of stdout and stderr together); the session is killed
        after ``timeout`` seconds, and the output then starts by saying so, naming the limit ``limit_name``.

        Output is read as it comes and only its tail is kept, so a flood costs no memory here; a
        descendant that still holds the pipe after the command exited (or past the limit) is not waited
        for: what the session left is killed with it."""
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        with self._lock:
            self._live[process] = tag
        try:
            tail, timed_out = _read_tail(process, timeout, keep_bytes)
        finally:
            _kill_session(process.pid)   # before the wait: the group's id cannot have been reused yet
            process.wait()
            process.stdout.close()
            with self._lock:
                self._live.pop(process, None)
        output = tail.decode("utf-8", "replace")
        if timed_out:
            return False, f"stopped after {timeout:g} s ({limit_name})\n{output}"
        return process.returncode == 0, output

    def kill_all(self) -> list:
        with self._lock:
            live = dict(self._live)
        for process in live:
            _kill_session(process.pid)
        return list(live.values())


def _read_tail(process: subprocess.Popen, timeout: float, keep_bytes: int) -> tuple[bytes, bool]:
    """(the last keep_bytes the process wrote, whether it ran past timeout), reading as output comes."""
    fd = process.stdout.fileno()
    tail = bytearray()
    deadline = time.monotonic() + timeout
    exited_at = None
    while True:
        now = time.monotonic()
        if process.poll() is not None:
            exited_at = exited_at or now
            if now - exited_at > PIPE_GRACE_S:
                return bytes(tail[-keep_bytes:]), False   # a descendant holds the pipe: not our wait
        elif now >= deadline:
            return bytes(tail[-keep_bytes:]), True
        ready, _, _ = select.select([fd], [], [], max(0.0, min(0.2, deadline - now)))
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if process.poll() is None and time.monotonic() < deadline:
                try:
                    process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    return bytes(tail[-keep_bytes:]), True
            return bytes(tail[-keep_bytes:]), process.poll() is None
        tail += chunk
        if len(tail) > 2 * keep_bytes:
            del tail[:-keep_bytes]


def _kill_session(session_id: int) -> None:
    try:
        os.killpg(session_id, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_processes_of_uid(uid: int, within: float = 10.0) -> int:
    """SIGKILL every process running as ``uid`` (what sandboxed code left behind, detached children too),
    again and again until none is left (a daemon that re-forks between two passes) or ``within`` seconds
    have passed; returns how many are still running (0 but for a fork storm outrunning the loop).

    Only as root, and never for this process's own uid: without root the sandbox has no uid of its own.
    """
    if os.geteuid() != 0 or uid == os.getuid():
        return 0
    deadline = time.monotonic() + within
    while True:
        found = _signal_uid(uid)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def _signal_uid(uid: int) -> int:
    """SIGKILL each live process of uid once; how many were found (zombies, already dead, not counted)."""
    found = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid or _is_zombie(entry):
                continue
            os.kill(int(entry.name), signal.SIGKILL)
            found += 1
        except (OSError, ProcessLookupError):
            continue
    return found


def _is_zombie(entry: Path) -> bool:
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))
