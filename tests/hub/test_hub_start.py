"""`make hub-up` refuses, with what to do, before it changes anything: without root, and for a course
whose Python no other account could run (a checkout in a private folder), where every student's server
would fail to start."""

from __future__ import annotations

import grp
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import skip_or_fail
from tests.hub.hub_driver import GROUPS
from tests.support.site_install import copy_checkout

HUB = Path(__file__).resolve().parents[2] / "slurm" / "hub"


def test_start_refuses_without_root(tmp_path):
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") if os.geteuid() == 0 else ()
    if prefix and shutil.which("setpriv") is None:
        skip_or_fail("setpriv not found (needed to try start.sh as a non-root user); install with: "
                     "apt-get install util-linux")
    # World-readable copies of the scripts: nobody may not be able to enter this checkout.
    with tempfile.TemporaryDirectory(prefix="course-hub-scripts-") as scripts:
        os.chmod(scripts, 0o755)
        (Path(scripts) / "slurm" / "hub").mkdir(parents=True)
        for script in HUB.glob("*.sh"):
            shutil.copy(script, Path(scripts) / "slurm" / "hub")
        env = dict(os.environ, COURSE_HUB_DIR=str(tmp_path / "state"))
        result = subprocess.run([*prefix, "bash", f"{scripts}/slurm/hub/start.sh"], capture_output=True,
                                text=True, timeout=60, env=env)
    assert result.returncode != 0
    assert "runs as root" in result.stderr and "sudo" in result.stderr, result.stderr
    assert not (tmp_path / "state").exists()


def group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


@pytest.mark.slow
@pytest.mark.hub
def test_start_refuses_a_course_other_accounts_cannot_run_and_changes_nothing(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail("start.sh checks root first: run the tests as root (as CI does)")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    course = copy_checkout(private)     # its .venv, and maybe its interpreter, out of other accounts' reach
    groups_before = {name: group_exists(name) for name in GROUPS.values()}
    solutions_mode = stat.S_IMODE((course / "solutions").stat().st_mode)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(COURSE_HUB_DIR=str(tmp_path / "state"), COURSE_HUB_EXCHANGE=str(tmp_path / "exchange"))
    start = course / "slurm" / "hub" / "start.sh"
    result = subprocess.run(["bash", str(start)], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode != 0, result.stdout + result.stderr
    message = result.stderr
    assert f"other users cannot run this course's Python ({course}/.venv/bin/python)" in message, message
    assert "where every user can read them" in message and "docs/hpc-admins.md" in message, message
    assert {name: group_exists(name) for name in GROUPS.values()} == groups_before
    assert stat.S_IMODE((course / "solutions").stat().st_mode) == solutions_mode
    assert not (tmp_path / "state").exists() and not (tmp_path / "exchange").exists()


def test_start_names_the_proxy_when_it_is_missing(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail("start.sh checks root first: run the tests as root (as CI does)")
    tools = tmp_path / "bin"     # what start.sh needs before that check, and no configurable-http-proxy
    tools.mkdir()
    for tool in ("dirname", "id"):
        (tools / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=str(tools), COURSE_HUB_DIR=str(tmp_path / "state"))
    result = subprocess.run([shutil.which("bash"), str(HUB / "start.sh")], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode != 0
    assert "configurable-http-proxy not found" in result.stderr, result.stderr
    assert "npm install -g configurable-http-proxy@5.1.0" in result.stderr
    assert not (tmp_path / "state").exists()
