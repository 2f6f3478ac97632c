"""The cage student code runs in while grading: an unprivileged uid, resource limits, hidden paths.

`SandboxPolicy.enter()` is called in a process that is about to run student code (the grading kernel,
or a forked child of the isolated judge). As root it makes Python and the course's code reachable
(even from a private folder), hides the course's secrets behind empty tmpfs mounts in a private mount
namespace, drops to the policy's uid, and sets rlimits; without root only the rlimits apply (README.md,
"Without root", lists what that loses). ``python -m course_lib.grading.sandbox.policy POLICY CODE`` runs CODE
in a fresh Python inside the sandbox (the preflight's reach probe).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_lib.grading.settings import HIDDEN_CHECKS_ENV
from course_lib.real.cluster.slurm_jobs import GRADED_RUN_ENV
from course_lib.real.plumbing.processes import exec_python

GiB = 1024**3
MiB = 1024**2
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_BIND, MS_REC, MS_PRIVATE = 1, 4096, 0x4000, 1 << 18
MNT_DETACH = 2
PR_SET_NO_NEW_PRIVS = 38
# The environment variable through which a grading process hands its policy to its children.
POLICY_ENV = "COURSE_GRADING_SANDBOX"
# Set in a grading kernel whose hidden test cells the isolated judge re-checks apart (kernel.py): there,
# attempt/hidden_checks.py hands back checks that only defer to the judge.
JUDGED_APART_ENV = "COURSE_CHECKS_JUDGED_APART"
# What of the grader's environment student code still sees: the course's own settings, how to find
# and load Python, Jupyter and the course (an HPC module's Python needs its LD_LIBRARY_PATH), the locale,
# and the knobs of torch's threads and devices. Everything else (an instructor's tokens, Slurm's job
# variables, pytest's PYTEST_CURRENT_TEST, which turns off ipykernel's capture of fd 1 and 2) stays with
# the grader.
KEPT_NAMES = frozenset({"PATH", "LD_LIBRARY_PATH", "LANG", "LANGUAGE", "TZ", "TERM", "MPLBACKEND",
                        "CUDA_VISIBLE_DEVICES", "PYTHONHOME", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONHASHSEED", "PYTHONUNBUFFERED"})
KEPT_PREFIXES = ("COURSE_", "JUPYTER_", "LC_", "OMP_", "MKL_", "KMP_", "NCCL_", "GLOO_", "TORCH_")


@dataclass
class SandboxPolicy:
    """What student code may use. uid/gid only matter when the grader runs as root."""

    uid: int = 61000
    gid: int = 61000
    memory_bytes: int = 4 * GiB           # RLIMIT_AS per process: a memory hog gets MemoryError
    student_memory_bytes: int = 8 * GiB   # one student's processes and tmpfs together (memory_group.py)
    cpu_seconds: int = 900                # RLIMIT_CPU per process: a backstop behind the cell timeout
    file_bytes: int = 256 * MiB           # RLIMIT_FSIZE: no file larger than this
    processes: int = 1024                 # RLIMIT_NPROC for the uid (threads count too)
    hidden_paths: list[str] = field(default_factory=list)   # covered by empty tmpfs mounts
    exposed_paths: list[str] = field(default_factory=list)  # reachable even below a private folder
    home: str | None = None               # writable HOME/TMPDIR for the student code
    # Hidden test cells are judged by the isolated re-check (a registry, and the re-check on): the kernel
    # then never sees the hidden checks, and its hidden cells leave their verdict to the judge.
    judged_apart: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        return cls(**json.loads(text))

    def enter(self) -> list[str]:
        """Apply the policy to this process; returns the protections that could not be applied."""
        degraded = []
        if os.geteuid() == 0:
            exposed = [sys.base_prefix, sys.prefix, *self.exposed_paths]
            degraded += _private_mounts(exposed, self.hidden_paths)
        else:
            degraded.append("not root: paths stay visible and the uid is the grader's own")
        _set_limits(self)
        if os.geteuid() == 0:
            _drop_privileges(self.uid, self.gid)
        _no_new_privileges()
        _keep_only_the_course_environment()
        os.environ[GRADED_RUN_ENV] = "1"   # the lesson's cells that would submit Slurm jobs skip them
        if self.home:
            for name in ("HOME", "TMPDIR", "IPYTHONDIR", "MPLCONFIGDIR", "JUPYTER_RUNTIME_DIR"):
                os.environ[name] = self.home if name in ("HOME", "TMPDIR") else os.path.join(self.home, name)
        return degraded


def hidden_check_folders() -> list[str]:
    """The hidden-check folders this grading process was handed (COURSE_HIDDEN_CHECKS), if any."""
    return [folder for folder in os.environ.get(HIDDEN_CHECKS_ENV, "").split(os.pathsep) if folder]


def _keep_only_the_course_environment() -> None:
    for name in list(os.environ):
        if name not in KEPT_NAMES and not name.startswith(KEPT_PREFIXES):
            del os.environ[name]


def running_as_root() -> bool:
    return os.geteuid() == 0


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _private_mounts(exposed: list[str], hidden: list[str]) -> list[str]:
    """A private mount namespace: the exposed folders made reachable, then the hidden ones covered."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNS) != 0:
        return [f"cannot unshare the mount namespace ({os.strerror(ctypes.get_errno())}): "
                "solutions/ and grading/ stay readable by the student's code"]
    # Keep our mounts from propagating back to the host.
    libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    return _expose(libc, exposed) + _hide(libc, hidden)


def _outermost(paths, kind=os.path.isdir) -> list[str]:
    """The existing folders (or whatever ``kind`` accepts) among paths (resolved), without those inside
    another one."""
    kept: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths if kind(p)}):
        if not any(path == done or path.startswith(done + os.sep) for done in kept):
            kept.append(path)
    return kept


def _hide(libc, paths: list[str]) -> list[str]:
    """An empty read-only tmpfs over each hidden folder that exists, /dev/null over each hidden file (an
    export such as grades.csv beside the course)."""
    failed = []
    folders = _outermost(paths)
    for path in folders:
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_RDONLY, b"size=4k,mode=0555") != 0:
            failed.append(f"cannot hide {path}: {os.strerror(ctypes.get_errno())}")
    for path in _outermost(paths, os.path.isfile):
        if any(path.startswith(folder + os.sep) for folder in folders):
            continue
        if libc.mount(b"/dev/null", path.encode(), None, MS_BIND, None) != 0:
            failed.append(f"cannot hide {path}: {os.strerror(ctypes.get_errno())}")
    return failed


def blocked_ancestor(path: str) -> str | None:
    """The outermost folder above path that other users cannot enter (mode without o+x), if any."""
    return next((str(a) for a in reversed(Path(path).parents)
                 if str(a) != "/" and not os.stat(a).st_mode & 0o001), None)


def _expose(libc, paths: list[str]) -> list[str]:
    """Folders the sandbox needs (Python, the venv, the course's code, its work folder) may sit below
    a private folder (pyenv in /root, a clone in a `mktemp -d` folder): show the uid those, and only those.

    The outermost folder others cannot enter is covered by an empty tmpfs, and each needed folder is
    bind-mounted back at its own path, so everything else in that private folder stays out of reach.
    """
    plan = [(path, blocked) for path in _outermost(paths) if (blocked := blocked_ancestor(path))]
    stashes = []
    for path, _ in plan:
        stash = tempfile.mkdtemp(prefix="sandbox-expose-")
        if libc.mount(path.encode(), stash.encode(), None, MS_BIND | MS_REC, None) != 0:
            return [f"cannot make {path} reachable: {os.strerror(ctypes.get_errno())}"]
        stashes.append((stash, path))
    for blocked in sorted({blocked for _, blocked in plan}):
        if libc.mount(b"tmpfs", blocked.encode(), b"tmpfs", 0, b"size=64k,mode=0755") != 0:
            return [f"cannot make folders under {blocked} reachable: {os.strerror(ctypes.get_errno())}"]
    for stash, path in stashes:
        os.makedirs(path, exist_ok=True)
        if libc.mount(stash.encode(), path.encode(), None, MS_BIND | MS_REC, None) != 0:
            return [f"cannot make {path} reachable: {os.strerror(ctypes.get_errno())}"]
        libc.umount2(stash.encode(), MNT_DETACH)
        os.rmdir(stash)
    return []


def _set_limits(policy: SandboxPolicy) -> None:
    wanted = {resource.RLIMIT_AS: policy.memory_bytes, resource.RLIMIT_CPU: policy.cpu_seconds,
              resource.RLIMIT_FSIZE: policy.file_bytes, resource.RLIMIT_NPROC: policy.processes,
              resource.RLIMIT_CORE: 0}
    for which, value in wanted.items():
        soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))


def _drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("could not drop privileges for the grading sandbox")


def _no_new_privileges() -> None:
    # setuid binaries (sudo, su) can no longer raise privileges again.
    _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def enter_inherited_policy() -> list[str]:
    """In a forked child of the isolated judge: apply the policy the judge published, if any. The hidden
    checks the judge runs are hidden from the child too: it holds them imported already, and the student's
    code it runs must not read the files that compute the expected answers."""
    text = os.environ.get(POLICY_ENV)
    if not text:
        return []
    policy = SandboxPolicy.from_json(text)
    policy.hidden_paths = [*policy.hidden_paths, *hidden_check_folders()]
    degraded = policy.enter()
    os.environ.pop(POLICY_ENV, None)
    for line in degraded:
        print(f"[grading sandbox] {line}", file=sys.stderr)
    return degraded


if __name__ == "__main__":
    for problem in SandboxPolicy.from_json(sys.argv[1]).enter():
        print(f"[grading sandbox] {problem}", file=sys.stderr)
    exec_python(["-c", sys.argv[2]])
