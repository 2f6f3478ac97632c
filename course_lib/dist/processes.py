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


def exec_python(arguments: list[str]) -> None:
    """Replace this process (same pid) with a fresh interpreter running ``python ARGUMENTS``."""
    os.execv(sys.executable, [sys.executable, *arguments])


class Sessions:
    """Commands run each in its own session (so a timeout kills all it started), tracked while they run.

    ``kill_all`` ends every session still running (an interrupted grading run) and returns their tags,
    for the caller to clean up after them (the grader kills what is left under each sandbox uid).
    """

    def __init__(self):
        self._live: dict[subprocess.Popen, object] = {}
        self._lock = threading.Lock()

    def run(self, command: list[str], cwd, env: dict | None, timeout: float, tag=None,
            limit_name: str = "its time limit") -> tuple[bool, str]:
        """(exited with 0, stdout and stderr together); the session is killed after ``timeout`` seconds,
        and the output then starts by saying so, naming the limit ``limit_name``."""
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        with self._lock:
            self._live[process] = tag
        try:
            output, _ = process.communicate(timeout=timeout)
            return process.returncode == 0, output
        except subprocess.TimeoutExpired:
            _kill_session(process.pid)
            output, _ = process.communicate()
            return False, f"stopped after {timeout:g} s ({limit_name})\n{output}"
        finally:
            with self._lock:
                self._live.pop(process, None)

    def kill_all(self) -> list:
        with self._lock:
            live = dict(self._live)
        for process in live:
            _kill_session(process.pid)
        return list(live.values())


def _kill_session(session_id: int) -> None:
    try:
        os.killpg(session_id, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_processes_of_uid(uid: int) -> None:
    """SIGKILL every process running as ``uid`` (what sandboxed code left behind, detached children too).

    Only as root, and never for this process's own uid: without root the sandbox has no uid of its own.
    """
    if os.geteuid() != 0 or uid == os.getuid():
        return
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
