"""The instructor's hidden checks, for hidden test cells: ``instructor_checks("ch02_ring")``.

They live in autograde_tests/checks/ beside course_lib in the course repository (never in a release).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def instructor_checks(name: str):
    """The module ``autograde_tests.checks.<name>``, found beside the installed course_lib."""
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        return importlib.import_module(f"autograde_tests.checks.{name}")
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"no instructor checks {name!r} under {root}/autograde_tests/checks: "
                                  "hidden tests run only from the course repository, not from a release"
                                  ) from error
