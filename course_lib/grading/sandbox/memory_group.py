"""One student's memory bounded as a whole (issue 53): a memory cgroup per grading command of a student,
made under the grader's own, that every process of the command joins before it execs: nbgrader with its
kernel and ranks, then (one after the other, so never together) the judge with its children.

Limits per process (RLIMIT_AS: the policy's 4 GiB, nbgrader's 2 GiB) and per tmpfs (512 MiB each) leave
the sum open: a student's eight ranks, its kernel and its private /tmp together could hold many times one
limit. The group's limit (``SandboxPolicy.student_memory_bytes``) counts all of it, the tmpfs pages its
processes write included; past it the kernel's OOM killer ends one of them (the cell's note says "the
kernel died (a crash, os._exit or the memory limit)").

As root only, and where the grader's memory cgroup can have children with a limit: cgroup v1's memory
hierarchy (a child of the grader's own group), or v2 where the grader's group delegates the memory
controller to its children. Elsewhere ``student_group`` yields None and the limits stay per process
(docs/grading.md says so).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from pathlib import Path

from course_lib.grading.sandbox.policy import running_as_root
from course_lib.real.plumbing.processes import run_command

PREFIX = "course-student-"
# Run as root before the rest of the command: joins the group, then execs the command (which inherits it).
JOIN_THEN_EXEC = ("import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
                  "os.execv(sys.argv[2], sys.argv[2:])")
_GROUPS: dict[int, Path] = {}     # sandbox uid -> its group's folder, while the student is graded
_LOCK = threading.Lock()


def _mounts(mountinfo: Path) -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, file system type, super options) of each mount in /proc/self/mountinfo."""
    mounts = []
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) >= 5 and len(after) >= 3:
            mounts.append((fields[3], fields[4], after[0], set(after[2].split(","))))
    return mounts


def own_memory_group(cgroup: Path = Path("/proc/self/cgroup"),
                     mountinfo: Path = Path("/proc/self/mountinfo")) -> tuple[str, Path] | None:
    """("v1" or "v2", the folder of this process's memory cgroup), where children with a memory limit can
    be made under it; None where they cannot (no memory controller, or v2 without it delegated)."""
    try:
        lines, mounts = cgroup.read_text().splitlines(), _mounts(mountinfo)
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v1 = "memory" in controllers.split(",")
        if not v1 and controllers:
            continue
        for root, point, fstype, options in mounts:
            if (fstype, v1) in (("cgroup", True), ("cgroup2", False)) and (not v1 or "memory" in options):
                relative = os.path.relpath(path, root) if path.startswith(root) else None
                if relative is None or relative.startswith(".."):
                    continue
                folder = Path(point) / relative
                if v1:
                    return "v1", folder
                delegated = folder / "cgroup.subtree_control"
                if delegated.is_file() and "memory" in delegated.read_text().split():
                    return "v2", folder
    return None


def _limit(version: str, group: Path, limit: int) -> None:
    if version == "v1":
        (group / "memory.limit_in_bytes").write_text(str(limit))
        swap = group / "memory.memsw.limit_in_bytes"   # memory and swap together: no escape into swap
        if swap.exists():
            with contextlib.suppress(OSError):
                swap.write_text(str(limit))
    else:
        (group / "memory.max").write_text(str(limit))
        swap = group / "memory.swap.max"
        if swap.exists():
            swap.write_text("0")


@functools.lru_cache(maxsize=8)
def can_join(version: str, parent: Path) -> bool:
    """Whether a process can be made to join a limited group under ``parent`` here (a delegation boundary
    or a cgroup file system's rules may refuse the move): tried once per grading process, with ``true``."""
    group = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        group.mkdir(exist_ok=True)
        _limit(version, group, 64 * 2**20)
        joining = [sys.executable, "-I", "-S", "-c", JOIN_THEN_EXEC, str(group / "cgroup.procs"), "/bin/true"]
        return run_command(joining, 30)[0] == 0
    except OSError:
        return False
    finally:
        _remove(group)


@contextlib.contextmanager
def student_group(uid: int, limit: int | None, found=own_memory_group):
    """While a student is graded (as root), a memory cgroup of ``limit`` bytes that ``joined`` commands of
    this uid enter; yields its folder, or None where none can be made (then nothing changes)."""
    where = found() if running_as_root() and limit else None
    group = None
    if where is not None and can_join(*where):
        version, parent = where
        group = parent / f"{PREFIX}{uid}"
        try:
            group.mkdir(exist_ok=True)
            _limit(version, group, limit)
        except OSError:
            _remove(group)
            group = None
    if group is not None:
        with _LOCK:
            _GROUPS[uid] = group
    try:
        yield group
    finally:
        if group is not None:
            with _LOCK:
                _GROUPS.pop(uid, None)
            _remove(group)


def joined(command: list[str], uid: int | None) -> list[str]:
    """command, entering the memory group of ``uid`` first where one is open (unchanged otherwise)."""
    group = _GROUPS.get(uid) if uid is not None else None
    if group is None:
        return list(command)
    return [sys.executable, "-I", "-S", "-c", JOIN_THEN_EXEC, str(group / "cgroup.procs"), *command]


def _remove(group: Path, within: float = 5.0) -> None:
    """rmdir the group once its last process is gone (killed by then: kill_processes_of_uid)."""
    deadline = time.monotonic() + within
    while group.exists():
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
