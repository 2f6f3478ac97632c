"""The exchange test's students (test_exchange.py) from a fresh clone inside a folder only its owner may
enter (0700: a `mktemp -d` folder, root's home), as a newcomer's `make test` runs it there.

The students are other accounts, which cannot enter that folder: they must fetch and submit with a Python
they can reach, not the clone's .venv (with which the round trip failed there). Its check of exactly that
runs in the clone, in seconds; the whole round trip there takes as long as in the checkout (about 90 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.support.site_install import copy_checkout


@pytest.mark.slow
def test_the_exchange_students_python_works_in_a_clone_inside_a_private_folder(tmp_path):
    if not (os.geteuid() == 0 and shutil.which("setpriv")):
        pytest.skip("only as root (with setpriv) do the students run as other accounts, which a private "
                    "folder could lock out")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    clone = copy_checkout(private)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [str(clone / ".venv" / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "autograde_tests/test_exchange.py::test_another_account_runs_nbgrader_with_the_students_python"]
    run = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout, run.stdout[-2000:]
