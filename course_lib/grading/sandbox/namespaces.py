"""Each student's grading processes (nbgrader with its kernel, the isolated judge) in namespaces of their own.

As root, `isolated` wraps a command in bubblewrap (`bwrap`, Debian's package): a PID namespace that
dies whole with the command (a daemon that re-forks and detaches dies with it), a network with loopback
only (ranks talk over loopback), a private /tmp, /var/tmp and /dev/shm, capped and gone afterwards, and a
private, empty /run (the host's sockets, locks and the grader's uid leases stay out of reach), and every
other unix socket of the host masked. The command
is exec'ed with only the course's environment (policy.KEPT_NAMES): a process forked from it, which runs
student code, finds no grader's secret even in the memory it inherited. Without bubblewrap, as root,
grading is refused (`IsolationUnavailable` says what to install).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from course_lib.grading.sandbox.policy import KEPT_NAMES, KEPT_PREFIXES, MiB, running_as_root
from course_lib.real.plumbing.processes import run_command

PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")   # each a fresh tmpfs per student, gone with the namespace
PRIVATE_BYTES = 512 * MiB                         # the size of each
# /run holds the host's sockets (dbus, a database's, a container runtime's), /run/lock and the grader's own
# uid leases: the namespace gets an empty one of its own (/var/run and /var/lock point into it).
PRIVATE_RUN_BYTES = 1 * MiB
# Every other unix socket of the host with a path (a database's under /var/lib, an agent's in a home folder)
# is listed in /proc/net/unix, the grader's network namespace's table, and masked with /dev/null: connect()
# to a socket does not care that its file system is read-only, only that the inode is a socket. The cap
# bounds bubblewrap's command line; a host with more sockets than that keeps the rest reachable (noted).
MAX_MASKED_SOCKETS = 1000
HOST_SOCKETS = Path("/proc/net/unix")
# Exec'ed first, as root: it execs the rest of the command with only the course's variables, so that the
# initial environment on the stack of every later process (the judge, whose forked children run student
# code) never held the grader's tokens; scrubbing os.environ afterwards would leave them in memory.
COURSE_ENVIRONMENT_ONLY = (
    f"import os, sys; names, prefixes = {sorted(KEPT_NAMES)!r}, {KEPT_PREFIXES!r}; "
    "os.execve(sys.argv[1], sys.argv[1:], "
    "{k: v for k, v in os.environ.items() if k in names or k.startswith(prefixes)})")
# Name lookups in the namespace read /etc/hosts only: with no network but loopback, DNS cannot answer, and
# torch's store would warn on stderr that the peer's name "cannot be retrieved" (that costs a test cell).
NSSWITCH = Path("/run/course-grading/nsswitch.conf")
INSTALL = ("install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora/RHEL: "
           "`dnf install bubblewrap`)")


class IsolationUnavailable(RuntimeError):
    """As root, a student's grading processes cannot be put in namespaces of their own: do not grade."""


def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if not found:
        raise IsolationUnavailable(
            "make grade runs as root, and as root it gives each student its own PID, network and /tmp "
            f"namespaces with bubblewrap, which is not installed: {INSTALL}. Nobody was graded.")
    return found


def _private_below(path: str) -> str | None:
    """The private folder (a fresh tmpfs in the namespace) that path lies in, if any."""
    return next((d for d in PRIVATE_DIRS if path == d or path.startswith(d + os.sep)), None)


def _kept(paths) -> list[str]:
    """The existing paths among paths (and their real paths) that lie in a private folder, outermost only."""
    found = set()
    for path in paths:
        for candidate in {os.path.abspath(path), os.path.realpath(path)}:
            if os.path.exists(candidate) and _private_below(candidate) and candidate not in PRIVATE_DIRS:
                found.add(candidate)
    kept: list[str] = []
    for path in sorted(found):
        if not any(path.startswith(done + os.sep) for done in kept):
            kept.append(path)
    return kept


def _code_paths() -> list[str]:
    from course_lib.grading.settings import CODE_ROOT, code_root_for_fresh_pythons

    fresh = code_root_for_fresh_pythons()
    return [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), str(CODE_ROOT),
            *([fresh] if fresh else [])]


def _offline_nsswitch() -> list[str]:
    """bubblewrap's options binding a copy of /etc/nsswitch.conf whose host lookups skip DNS."""
    system = Path("/etc/nsswitch.conf")
    if not system.is_file():
        return []
    lines = system.read_text().splitlines()
    text = "\n".join("hosts: files" if line.startswith("hosts:") else line for line in lines) + "\n"
    if not NSSWITCH.is_file() or NSSWITCH.read_text() != text:
        NSSWITCH.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        partial = NSSWITCH.with_name(f".nsswitch.{os.getpid()}")
        partial.write_text(text)
        partial.chmod(0o644)
        partial.replace(NSSWITCH)
    return ["--ro-bind", str(NSSWITCH), str(system)]


def host_sockets(kept=(), table: Path = HOST_SOCKETS) -> list[str]:
    """The paths of the host's unix sockets that the namespace would still see (outside /run and the private
    folders, or in a folder of ``kept`` bound back into them), from the kernel's table (its last column: a
    path, or @ for an abstract name, which the network namespace already hides). Only paths that are
    sockets now: a file that replaced one is not masked."""
    try:
        lines = table.read_text(errors="replace").splitlines()[1:]
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(maxsplit=7)
        path = fields[7] if len(fields) == 8 else ""
        if not path.startswith("/") or path in found:
            continue
        real = os.path.realpath(path)
        bound_back = any(real == k or real.startswith(k + os.sep) for k in kept)
        if not bound_back and (_private_below(real) or real == "/run" or real.startswith("/run/")):
            continue
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                found.append(path)
        except OSError:
            continue
    return sorted(found)[:MAX_MASKED_SOCKETS]


def _masked_sockets(kept) -> list[str]:
    return [option for path in host_sockets(kept) for option in ("--ro-bind", "/dev/null", path)]


def bwrap_arguments(keep=()) -> list[str]:
    """bubblewrap's options: new PID and network namespaces, a private /tmp, /var/tmp, /dev/shm and /run,
    the host's other unix sockets masked, with the folders in ``keep`` (and the course's code and Python)
    that lie in the private folders bound back at their place."""
    arguments = [bwrap_path(), "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                 "--bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc"]
    for folder in PRIVATE_DIRS:
        if os.path.isdir(folder):
            arguments += ["--perms", "1777", "--size", str(PRIVATE_BYTES), "--tmpfs", folder]
    if os.path.isdir("/run"):
        arguments += ["--perms", "0755", "--size", str(PRIVATE_RUN_BYTES), "--tmpfs", "/run",
                      "--perms", "1777", "--dir", "/run/lock"]
    kept = _kept([*keep, *_code_paths()])
    for path in kept:
        private = _private_below(path)
        parents = [p for p in reversed(Path(path).parents) if _private_below(str(p)) and str(p) != private]
        for parent in parents:  # bubblewrap would make them 0700: the student's uid must pass through
            arguments += ["--perms", "0711", "--dir", str(parent)]
        arguments += ["--bind", path, path]
    arguments += _masked_sockets(kept)
    # loopback is the only interface: gloo must not look for the host's address (it would warn on stderr)
    return arguments + _offline_nsswitch() + ["--setenv", "GLOO_SOCKET_IFNAME", "lo", "--"]


def course_environment_only(command: list[str]) -> list[str]:
    """command, exec'ed with only the course's environment variables (command[0] must be a path)."""
    return [sys.executable, "-I", "-S", "-c", COURSE_ENVIRONMENT_ONLY, *command]


def isolated(command: list[str], keep=()) -> list[str]:
    """command, run in namespaces of its own and with only the course's environment when grading as root
    (unchanged otherwise: without root student code runs as the grader, who can read its environment)."""
    if not running_as_root():
        return list(command)
    return course_environment_only(bwrap_arguments(keep) + list(command))


ISOLATION_PROBE = """test $$ -lt 10 || { echo "no PID namespace of its own" >&2; exit 1; }
test "$(tail -n +3 /proc/net/dev | wc -l)" -eq 1 || { echo "not a network of its own" >&2; exit 1; }
test ! -e "$1" || { echo "/tmp is not private" >&2; exit 1; }"""


def check_isolation() -> None:
    """As root: bubblewrap is there and can make the namespaces here (a container may forbid them), or
    IsolationUnavailable saying why."""
    if not running_as_root():
        return
    with tempfile.NamedTemporaryFile(prefix="grading-isolation-probe-", dir="/tmp") as marker:
        command = isolated(["/bin/sh", "-c", ISOLATION_PROBE, "probe", marker.name])
        status, stderr = run_command(command, timeout=60)
    if status != 0:
        why = stderr.strip()[-600:] or f"it exited with {status}"
        raise IsolationUnavailable(
            "make grade runs as root, and as root it gives each student its own PID, network and /tmp "
            f"namespaces with bubblewrap, which cannot make them here: {why}"
            ". A container needs CAP_SYS_ADMIN (or `--privileged`, or a seccomp profile allowing "
            "unshare and mount); or grade on a VM. Nobody was graded.")
