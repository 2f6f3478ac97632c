"""Traps a real cluster springs on the sbatch scripts: a job step inheriting the job's per-task GPU
request, a conda activation that dies under `set -u` without a word, environment.yml advice that
would replace PyPI, and a site file that tunes NCCL's network interface but not gloo's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.slurm.cluster import REPO
from tests.slurm.test_ood_traps import fake_conda

# A job's batch step as Slurm sets it up for `sbatch --ntasks-per-node=4 --gpus-per-task=1` on one
# node; srun reads SLURM_GPUS_PER_TASK as its own --gpus-per-task unless told otherwise.
GPU_JOB_ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_NAME": "course-ddp", "SLURM_JOB_NODELIST": "gpu01",
               "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4",
               "SLURM_GPUS_PER_TASK": "1", "SLURM_GPUS_ON_NODE": "4", "SLURM_CPUS_ON_NODE": "8"}
RECORDING_SRUN = '#!/bin/sh\necho "srun $*" >>"{log}"\n'
FAKE_SCONTROL = '#!/bin/sh\necho gpu01\n'


def launch_with_fake_srun(tmp_path: Path, job_env: dict) -> str:
    """course_launch in a batch-like shell whose srun only records its arguments."""
    bin_dir, log = tmp_path / "bin", tmp_path / "srun.log"
    bin_dir.mkdir(parents=True)
    for name, body in (("srun", RECORDING_SRUN.format(log=log)), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "COURSE_DIR": str(REPO),
           "COURSE_RUN_DIR": str(tmp_path / "run"), **job_env}
    script = (f'set -euo pipefail\nsource "{REPO}/slurm/course_env.sh"\n'
              "course_launch course_lib.examples.ddp:main\n")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    return log.read_text()


def test_the_step_asks_for_all_the_nodes_gpus(tmp_path):
    srun = launch_with_fake_srun(tmp_path / "gpu", GPU_JOB_ENV)
    # One torchrun per node with 4 ranks: its step needs the node's 4 GPUs, not the job's 1 per task.
    assert "--gpus-per-task=4 " in srun and "--nproc-per-node=4 " in srun, srun

    cpu_job = {name: value for name, value in GPU_JOB_ENV.items() if "GPUS" not in name}
    srun = launch_with_fake_srun(tmp_path / "cpu", cpu_job)
    assert "--gpus" not in srun and "--nproc-per-node=4 " in srun, srun


@pytest.mark.slurm
@pytest.mark.slow
def test_job_activates_a_conda_env_whose_scripts_read_unset_variables(local_slurm, submit_dir, tmp_path):
    checkout = tmp_path / "checkout"  # the scripts and an environment.yml, no .venv: conda it is
    shutil.copytree(REPO / "slurm", checkout / "slurm")
    (checkout / "environment.yml").write_text("name: course-env\n")
    conda_bin = fake_conda(tmp_path, "course-env")
    env = {"COURSE_DIR": str(checkout), "COURSE_PYTHON": "", "PYTHONPATH": str(REPO),
           "PATH": f"{conda_bin}:/usr/bin:/bin"}
    job_id = local_slurm.submit(checkout / "slurm" / "single_device.sbatch", cwd=submit_dir, env=env)
    result = local_slurm.wait(job_id, timeout=180)
    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.describe()
    assert f"python {tmp_path}/envs/course-env/bin/python" in result.output, result.describe()


def test_cuda_advice_keeps_pypi_as_the_index():
    """--index-url would replace PyPI, where jupyterlab and nbgrader are: only --extra-index-url."""
    text = (REPO / "environment.yml").read_text()
    dependencies = yaml.safe_load(text)["dependencies"]
    pip_options = next(entry["pip"] for entry in dependencies if isinstance(entry, dict))
    assert not [option for option in pip_options if option.startswith("--index-url")]
    assert "--index-url" not in text.replace("--extra-index-url", ""), "environment.yml advises --index-url"
    assert "--extra-index-url https://download.pytorch.org/whl/" in text


def test_site_example_sets_gloos_interface_beside_nccls():
    """Uncommented, site.example.sh gives gloo (the CPU backend across nodes) NCCL's interface."""
    exports = [line.lstrip("# ") for line in (REPO / "slurm" / "site.example.sh").read_text().splitlines()
               if re.match(r"#\s*export \w+_SOCKET_IFNAME=", line)]
    script = "\n".join(exports) + '\necho "$NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"\n'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10, env={})
    nccl, _, gloo = result.stdout.strip().partition(" ")
    assert nccl and nccl == gloo, result.stdout
