"""nbgrader's exchange commands as a test runs them: as the instructor, or as a student account."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

COURSE_ID = "distributed-training"


def nbgrader(cwd: Path, exchange: Path, *args: str, user: str | None = None,
             python: str = sys.executable) -> str:
    """``nbgrader args`` in ``cwd``: as ``user`` with ``python`` (which that account must reach), or as
    ourselves with this run's Python."""
    prefix = []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_CONFIG_DIR")}
    if user is not None and user != pwd.getpwuid(os.getuid()).pw_name:
        entry = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
        env.update(HOME=str(cwd), USER=user)
    else:
        python = sys.executable
    env["PATH"] = f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs alembic
    command = [*prefix, python, "-m", "nbgrader", *args, f"--Exchange.root={exchange}",
               f"--CourseDirectory.course_id={COURSE_ID}", "--log-level=INFO"]
    run = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{' '.join(args)}:\n{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    return run.stdout + run.stderr
