"""The course installed where other accounts can use it, as a site installs it (/opt/distributed-course):
a copy of this checkout's files and a virtual environment for them, in a folder every user can enter.

Tests that act as other users (a student fetching and submitting, a student's server on the hub) run
the course from such a copy: this checkout may sit in a folder only its owner can enter (a clone in
root's home or in a `mktemp -d` folder), and so may the interpreter its .venv was made from (pyenv's
under /root), neither of which a student account could run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import skip_or_fail
from tests.support.venv_copy import copy_venv

REPO = Path(__file__).resolve().parents[2]
# The checkout's own state, not part of a fresh clone (top level only: course_lib/grading is code).
NOT_COPIED = {".git", ".venv", "grading", "test-artifacts", "runs", ".pytest_cache", ".ruff_cache", "build",
              ".hypothesis"}
MINOR = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _not_copied(folder: str, names: list[str]) -> set[str]:
    top = NOT_COPIED if Path(folder) == REPO else set()
    return {n for n in names if n in top or n == "__pycache__" or n.endswith(".egg-info")}


def runs_for_others(interpreter: str) -> bool:
    """Whether an ordinary account (nobody) can start ``interpreter`` with its standard library."""
    nobody = pwd.getpwnam("nobody")
    try:
        answer = subprocess.run([interpreter, "-c", "import json, sys"], cwd="/", user=nobody.pw_uid,
                                group=nobody.pw_gid, extra_groups=[], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return answer.returncode == 0


def interpreter_for_everyone() -> str:
    """This run's base interpreter if other accounts can run it, else the system's interpreter of the
    same minor version (whose ABI the environment's packages were built for)."""
    base = str(Path(sys.base_prefix) / "bin" / MINOR)
    for candidate in (base, f"/usr/bin/{MINOR}", f"/usr/local/bin/{MINOR}"):
        if Path(candidate).is_file() and runs_for_others(candidate):
            return candidate
    skip_or_fail(f"other accounts cannot run this run's Python ({base}: a folder above it is private) and "
                 f"there is no system {MINOR} they can: install it (apt-get install {MINOR})")


def _rebase(venv: Path, interpreter: str) -> None:
    """Make ``venv`` (a hard-linked copy) run on ``interpreter``: replace, never edit, the linked files."""
    config = venv / "pyvenv.cfg"
    lines = [line for line in config.read_text().splitlines() if not line.startswith(("home", "executable"))]
    config.unlink()
    config.write_text("\n".join([f"home = {Path(interpreter).parent}", f"executable = {interpreter}", *lines])
                      + "\n")
    for link in (venv / "bin").iterdir():
        if link.is_symlink() and Path(os.readlink(link)).is_absolute():
            link.unlink()
            link.symlink_to(interpreter)


def copy_checkout(into: Path, for_everyone: bool = False) -> Path:
    """The course's files and a virtual environment set up for them (as `make setup` there would), in
    ``into``/course; ``for_everyone``: on an interpreter every account can run."""
    clone = into / "course"
    shutil.copytree(REPO, clone, ignore=_not_copied, symlinks=True)
    copy_venv(clone / ".venv", clone, REPO)
    if for_everyone:
        _rebase(clone / ".venv", interpreter_for_everyone())
    return clone


def shared_folder(prefix: str) -> Path:
    """A new folder every user may enter and read (mkdtemp makes it the owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(folder, 0o755)
    return folder


def site_venv(into: Path) -> Path:
    """This run's virtual environment in ``into``/venv, on an interpreter every account can run (nbgrader
    and the course's packages; its course_lib stays this checkout's)."""
    venv = copy_venv(into / "venv", REPO, REPO)
    _rebase(venv, interpreter_for_everyone())
    return venv
