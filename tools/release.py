"""Regenerate the student notebooks (notebooks/) from the instructor source (solutions/) with nbgrader.

`make release` runs this. notebooks/ is never edited by hand: tests compare it with a fresh
regeneration and fail with a message to run `make release`.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "solutions"
RELEASE_DIR = ROOT / "notebooks"


def assignment_names() -> list[str]:
    """Chapters in solutions/: every folder holding at least one notebook."""
    return sorted(p.name for p in SOURCE_DIR.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def generate_release(target_dir: Path) -> None:
    """Write nbgrader's student version of every chapter into target_dir/<chapter>/."""
    target_dir.mkdir(parents=True, exist_ok=True)
    for name in assignment_names():
        command = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", "--no-db",
                   f"--CourseDirectory.root={ROOT}",
                   f"--CourseDirectory.release_directory={target_dir}", "--log-level=WARN"]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"nbgrader could not release {name}:\n{result.stdout}\n{result.stderr}")


def release() -> None:
    """Replace notebooks/ by a fresh release, removing chapters that no longer exist in solutions/."""
    with tempfile.TemporaryDirectory(prefix="course-release-") as scratch:
        fresh = Path(scratch) / "notebooks"
        generate_release(fresh)
        if RELEASE_DIR.exists():
            shutil.rmtree(RELEASE_DIR)
        shutil.copytree(fresh, RELEASE_DIR)
    print(f"released {', '.join(assignment_names())} into {RELEASE_DIR.relative_to(ROOT)}/")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__).parse_args()
    release()
