"""The linter sees every Python source of the course: no folder is skipped by ruff's default exclusions.

Ruff skips folders named like build outputs (``dist``, ``build``) unless told otherwise; course_lib/dist is
a real package, so `ruff check .` (what `make lint` runs) must list every tracked course_lib file.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"


def test_ruff_checks_every_course_lib_file():
    listed = subprocess.run([str(RUFF), "check", "--show-files", "."], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    seen = {Path(line.strip()).resolve() for line in listed.splitlines() if line.strip().endswith(".py")}
    sources = sorted(p for p in (ROOT / "course_lib").rglob("*.py") if "__pycache__" not in p.parts)
    skipped = [str(p.relative_to(ROOT)) for p in sources if p.resolve() not in seen]
    assert sources, "found no course_lib sources"
    assert not skipped, f"ruff check . skips these course_lib files (see [tool.ruff] exclude): {skipped}"
