"""The instructor's hidden checks, for hidden test cells and the judge: ``instructor_checks("ch02_ring")``.

They live outside course_lib (never in a release), in the folders the course's nbgrader_config.py names
(``c.CourseGrading.hidden_checks``); a grading run hands its own to the kernel and the judge through
``COURSE_HIDDEN_CHECKS``. The folders are loaded as one package, so checks may import each other
relatively (``from ._seeds import grading_seed``) without anything on sys.path.

In a grading kernel whose hidden test cells the isolated judge re-checks (``COURSE_CHECKS_JUDGED_APART``,
set by sandbox/kernel.py), the folders are hidden from the kernel, which runs the student's code, and
``instructor_checks`` hands back ``JudgedApart``: its checks only say that the judge gives the verdict.
The code that computes an expected answer then never lies in a process or a mount the student's code
can read (the judge's children, which run that code, have the folders hidden as well).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

from course_lib.grading.sandbox.policy import JUDGED_APART_ENV
from course_lib.grading.settings import CODE_ROOT, HIDDEN_CHECKS_ENV, read_settings

PACKAGE = "course_hidden_checks"
DEFERRED = ("hidden test: its verdict is the grader's isolated re-check (the test runs apart from this "
            "notebook, where your code cannot reach the checks)")


class JudgedApart(types.ModuleType):
    """The hidden checks as a grading kernel sees them: each ``check_*`` leaves its verdict to the judge."""

    def __getattr__(self, name: str):
        if not name.startswith("check_"):
            raise AttributeError(f"the hidden checks are not in this grading kernel: {name!r}")

        def judged_apart(*args, **kwargs) -> None:
            print(DEFERRED)

        judged_apart.__name__ = judged_apart.__qualname__ = name
        return judged_apart


def hidden_check_folders() -> list[Path]:
    """Where hidden checks are looked up: the grading run's folders, else the course checkout's config."""
    given = os.environ.get(HIDDEN_CHECKS_ENV)
    if given:
        return [Path(folder) for folder in given.split(os.pathsep) if folder]
    return list(read_settings(CODE_ROOT).hidden_checks)


def _package(folders: list[Path]) -> types.ModuleType:
    """The package the folders make, registered once per process (its path follows the folders)."""
    package = sys.modules.get(PACKAGE)
    if package is None:
        package = types.ModuleType(PACKAGE, "The instructor's hidden checks (loaded by hidden_checks.py).")
        package.__spec__ = importlib.util.spec_from_loader(PACKAGE, loader=None, is_package=True)
        sys.modules[PACKAGE] = package
    package.__path__ = package.__spec__.submodule_search_locations = [str(f) for f in folders]
    return package


def instructor_checks(name: str) -> types.ModuleType:
    """The hidden-check module ``name`` (e.g. ``"ch02_ring"``) from the configured folders."""
    if os.environ.get(JUDGED_APART_ENV) == "1":
        return JudgedApart(f"{PACKAGE}.{name}", "judged by the isolated re-check, apart from this kernel")
    folders = hidden_check_folders()
    _package(folders)
    try:
        return importlib.import_module(f"{PACKAGE}.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"{PACKAGE}.{name}":
            raise
        where = ", ".join(str(f) for f in folders) or "no folder (nbgrader_config.py sets none)"
        raise ModuleNotFoundError(
            f"no hidden checks {name!r} in {where}: hidden tests run only where the instructor's checks "
            f"are (the course repository, or a grading run), not from a release", name=error.name) from None


def resolve_check(spec: str):
    """``"module:function"`` (a registry entry's check) as the function it names."""
    module_name, _, function_name = spec.partition(":")
    return getattr(instructor_checks(module_name), function_name)
