"""A copy of this test run's virtual environment for another checkout (a clone, a student kit).

Hard links where the disk allows (seconds, no space), a real copy otherwise. The few files that name
the original checkout (the editable install's finder, the course kernelspec, the #! line of the
environment's scripts) are replaced, never edited in place, so the original environment is untouched
and the copy imports course_lib, and runs its scripts, from its new home.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ORIGINAL = Path(sys.prefix)


def _rewrite(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    path.unlink()  # a hard link: writing in place would change the original environment's file
    path.write_text(text.replace(old, new))


def copy_venv(target: Path, code_root: Path, original_root: Path) -> Path:
    """target becomes a venv like this one whose course_lib is code_root's (as `make setup` there would)."""
    linked = subprocess.run(["cp", "-al", str(ORIGINAL), str(target)], capture_output=True)
    if linked.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(ORIGINAL, target, symlinks=True)
    for finder in target.glob("lib/python*/site-packages/__editable___course_lib*finder.py"):
        _rewrite(finder, str(original_root / "course_lib"), str(code_root / "course_lib"))
    for spec in target.glob("share/jupyter/kernels/*/kernel.json"):
        _rewrite(spec, str(ORIGINAL), str(target))
    shebang = f"#!{ORIGINAL}/bin/".encode()
    for script in (target / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            with open(script, "rb") as handle:
                if handle.read(len(shebang)) == shebang:
                    _rewrite(script, f"#!{ORIGINAL}/bin/", f"#!{target}/bin/")
                    script.chmod(0o755)
    return target
