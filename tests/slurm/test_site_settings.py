"""slurm/site.sh is read before any COURSE_* setting, so a site can set them all there (the run folder,
the Python, modules loaded through a `module` command the batch shell must first define); only
COURSE_DIR, through which site.sh is found, cannot be changed there.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO

# What a site's Lmod init script does for a batch shell: define `module`. This one records its calls
# and, like some real ones, reads a variable that is unset (the job runs under `set -u`).
FAKE_MODULE_INIT = """\
if [ -z "$COURSE_TEST_UNSET_VARIABLE" ]; then :; fi
module() {{ echo "module $*" >>{log}; }}
"""


def checkout_with_site(tmp_path: Path, site: str) -> Path:
    """A checkout holding only slurm/ (no .venv, no environment.yml) and the given slurm/site.sh."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "slurm", checkout / "slurm")
    (checkout / "slurm" / "site.sh").write_text(textwrap.dedent(site))
    return checkout


@pytest.mark.slurm
@pytest.mark.slow
def test_site_sets_run_dir_python_and_modules(local_slurm, submit_dir, tmp_path):
    module_log = tmp_path / "modules.log"
    init = tmp_path / "lmod-init.sh"
    init.write_text(FAKE_MODULE_INIT.format(log=module_log))
    run_dir = tmp_path / "scratch" / "course-runs"
    checkout = checkout_with_site(tmp_path, f"""\
        COURSE_RUN_DIR="{run_dir}/$SLURM_JOB_NAME-$SLURM_JOB_ID"
        COURSE_PYTHON="{REPO}/.venv/bin/python"
        COURSE_MODULES="fake/1.0 other/2"
        COURSE_MODULE_INIT="{init}"
        """)
    # The checkout has no Python of its own: the job runs only if site.sh's COURSE_PYTHON was read.
    env = {"COURSE_DIR": str(checkout), "COURSE_PYTHON": "", "COURSE_RUN_DIR": "", "COURSE_MODULES": ""}
    job_id = local_slurm.submit(checkout / "slurm" / "single_device.sbatch", cwd=submit_dir, env=env)
    result = local_slurm.wait(job_id, timeout=180)
    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.describe()
    job_folder = run_dir / f"course-single_device-{job_id}"
    assert "SUMMARY " in (job_folder / "job.log").read_text(), result.describe()
    assert f"output {job_folder}" in (job_folder / "setup.txt").read_text()
    assert not (submit_dir / "runs" / f"course-single_device-{job_id}").exists()
    assert module_log.read_text() == "module load fake/1.0 other/2\n"


@pytest.mark.slurm
@pytest.mark.slow
def test_site_cannot_move_the_checkout(local_slurm, submit_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    checkout = checkout_with_site(tmp_path, f'COURSE_DIR="{elsewhere}"\n')
    job_id = local_slurm.submit(checkout / "slurm" / "ddp.sbatch", cwd=submit_dir,
                                env={"COURSE_DIR": str(checkout)})
    result = local_slurm.wait(job_id, timeout=120)
    assert result.state == "FAILED", result.describe()
    assert "slurm/site.sh may not change COURSE_DIR" in result.output, result.describe()
    assert "Export COURSE_DIR before sbatch" in result.output, result.describe()


def run_modules_sh(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`script` after sourcing slurm/modules.sh in a clean, strict, non-interactive bash."""
    full = f'set -euo pipefail\nsource "{REPO}/slurm/modules.sh"\n{script}'
    return subprocess.run(["bash", "-c", full], capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})


def test_load_modules_defines_module_from_an_init_script(tmp_path):
    log, init = tmp_path / "modules.log", tmp_path / "init.sh"
    init.write_text(FAKE_MODULE_INIT.format(log=log))
    result = run_modules_sh(f'COURSE_MODULE_INIT="{init}"\ncourse_load_modules "a/1 b"\n'
                            'course_load_modules ""\necho "set -u still on: $-"', tmp_path)
    assert result.returncode == 0, result.stderr
    assert log.read_text() == "module load a/1 b\n"
    assert "u" in result.stdout.split(": ")[1], "course_load_modules must restore set -u"


def test_load_modules_without_a_module_system_fails_with_instructions(tmp_path):
    # Only the init scripts listed here are tried: none exists, whatever this host has installed.
    result = run_modules_sh(f'course_module_init_scripts() {{ echo "{tmp_path}/none.sh"; }}\n'
                            'course_load_modules "cuda/12.4" || echo "status $?"', tmp_path)
    assert result.stdout.strip() == "status 1", result
    assert "no 'module' command" in result.stderr and "COURSE_MODULE_INIT" in result.stderr


def test_failing_module_load_is_reported(tmp_path):
    init = tmp_path / "init.sh"
    init.write_text("module() { return 3; }\n")
    result = run_modules_sh(f'COURSE_MODULE_INIT="{init}"\ncourse_load_modules "nope/0" || echo "status $?"',
                            tmp_path)
    assert result.stdout.strip() == "status 1" and "module load nope/0 failed" in result.stderr, result
