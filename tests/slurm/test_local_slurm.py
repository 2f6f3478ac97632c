"""slurm/local: refuses clearly without root or packages, generates a config from this host, starts
idempotently; and every shell script under slurm/ (and the tests' own) is shellcheck clean.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import skip_or_fail
from tests.slurm.cluster import REPO, START

SHELL_PATTERNS = ("slurm/*.sbatch", "slurm/*.sh", "slurm/local/*.sh", "slurm/hub/*.sh", "tests/slurm/*.sh")
SHELL_SCRIPTS = sorted(path for pattern in SHELL_PATTERNS for path in REPO.glob(pattern))
SBATCH_SCRIPTS = sorted(REPO.glob("slurm/*.sbatch"))
SBATCH_OPTION = re.compile(r"^#SBATCH\s+(--[\w-]+)", re.MULTILINE)


def run_start(env: dict, *prefix: str, script=START) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, "bash", str(script)], capture_output=True, text=True, timeout=60, env=env)


def test_start_refuses_without_root(tmp_path):
    env = dict(os.environ, COURSE_SLURM_DIR=str(tmp_path / "state"))
    # As root, drop to nobody for this one command; otherwise we already are not root.
    prefix = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups") if os.geteuid() == 0 else ()
    if prefix and shutil.which("setpriv") is None:
        skip_or_fail("setpriv not found (needed to try start.sh as a non-root user); install with: "
                     "apt-get install util-linux")
    # nobody may not be able to enter the checkout (a clone in /root or in a `mktemp -d` folder): it
    # runs world-readable copies of the scripts, which is what this test is about, not file modes.
    with tempfile.TemporaryDirectory(prefix="course-slurm-scripts-") as scripts:
        os.chmod(scripts, 0o755)
        for script in START.parent.glob("*.sh"):
            shutil.copy(script, scripts)
        result = run_start(env, *prefix, script=Path(scripts) / START.name)
    assert result.returncode != 0
    assert "must run as root" in result.stderr and "sudo" in result.stderr, result.stderr
    assert not (tmp_path / "state").exists(), "nothing may be created before the checks pass"


def test_start_refuses_when_packages_are_missing(tmp_path):
    if os.geteuid() != 0:
        skip_or_fail("not root: start.sh checks root before packages, so only root reaches the package "
                     "check; run the tests as root (as CI does)")
    # A PATH with the few tools start.sh needs before its check, and no Slurm or munge.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("dirname", "id", "hostname"):
        (tools / tool).symlink_to(shutil.which(tool))
    env = dict(os.environ, PATH=str(tools), COURSE_SLURM_DIR=str(tmp_path / "state"))
    result = subprocess.run([shutil.which("bash"), str(START)], capture_output=True, text=True, timeout=60,
                            env=env)
    assert result.returncode != 0
    assert "missing munged slurmctld slurmd sbatch" in result.stderr, result.stderr
    assert "apt-get install slurm-wlm munge" in result.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.slurm
def test_config_describes_this_host(local_slurm):
    config = (local_slurm.state_dir / "etc" / "slurm.conf").read_text()
    node = re.search(r"^NodeName=\S+ NodeAddr=\S+ CPUs=(\d+) RealMemory=(\d+)", config, re.MULTILINE)
    assert node, config
    total_mb = int(re.search(r"MemTotal:\s+(\d+)", open("/proc/meminfo").read()).group(1)) // 1024
    assert int(node.group(1)) == os.cpu_count()
    assert 0 < int(node.group(2)) < total_mb
    assert "ProctrackType=proctrack/linuxproc" in config and "TaskPlugin=task/none" in config
    # Jobs that ask for no memory get this much per CPU; the scripts rely on it (see below).
    def_mem = re.search(r"^DefMemPerCPU=(\d+)$", config, re.MULTILINE)
    assert def_mem and 0 < int(def_mem.group(1)) * os.cpu_count() <= int(node.group(2)), config
    assert f"StateSaveLocation={local_slurm.state_dir}/ctld" in config


def test_sbatch_scripts_leave_memory_to_the_partition_default():
    """A fixed request (say 4G per CPU) exceeds what a small host offers, and Slurm then rejects the
    job at submission; without one, each job gets the partition's DefMemPerCPU, which the site sets
    for its nodes and the local Slurm sets to the host's memory shared out per CPU."""
    assert len(SBATCH_SCRIPTS) == 9, SBATCH_SCRIPTS
    for script in SBATCH_SCRIPTS:
        options = SBATCH_OPTION.findall(script.read_text())
        # The training examples start one task per node (torchrun fans out); the grading array's
        # tasks are single processes.
        tasks = "--ntasks" if script.name == "grade_array.sbatch" else "--ntasks-per-node"
        assert tasks in options, (script.name, options)
        memory = [option for option in options if option.startswith("--mem")]
        assert not memory, f"{script.name} asks for memory ({memory}): leave it to the partition"


@pytest.mark.slurm
def test_start_again_keeps_the_running_cluster(local_slurm):
    pid_file = local_slurm.state_dir / "run" / "slurmctld.pid"
    before = pid_file.read_text()
    result = local_slurm.run(START)
    assert result.returncode == 0 and "already running" in result.stdout, result.stdout + result.stderr
    assert pid_file.read_text() == before
    sinfo = local_slurm.run("sinfo", "--noheader", "--format=%P %T")
    assert sinfo.stdout.split()[1] in {"idle", "mixed", "allocated", "planned"}, sinfo.stdout


@pytest.mark.slurm
def test_shell_scripts_are_shellcheck_clean():
    if shutil.which("shellcheck") is None:
        skip_or_fail("shellcheck not found; install with: apt-get install shellcheck")
    assert len(SHELL_SCRIPTS) >= 11, SHELL_SCRIPTS
    result = subprocess.run(["shellcheck", "--external-sources", *map(str, SHELL_SCRIPTS)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
