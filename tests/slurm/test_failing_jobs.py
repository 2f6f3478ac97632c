"""Jobs that must fail do, loudly: a failing rank ends the job FAILED with that rank's error in
the log, and a site that requires an account rejects a job without one with instructions.
"""

from __future__ import annotations

import shutil
import textwrap

import pytest

from tests.slurm.cluster import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

FAILING_MODULE = '''
"""A rank function whose rank 1 fails after the group has formed (rank 0 would go on)."""
import torch.distributed as dist


def main(rank, world_size):
    dist.barrier()
    if rank == 1:
        raise RuntimeError(f"deliberate failure on rank {rank} of {world_size}")
    dist.barrier()  # rank 0 waits here for a rank that is gone: the launcher must end it
    return {}
'''

# The same preamble as every slurm/*.sbatch, with a rank function that fails.
FAILING_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=course-failing-rank
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:05:00
#SBATCH --output=%x-%j.out
set -euo pipefail
source "$COURSE_DIR/slurm/course_env.sh"
course_launch failing_rank:main
"""


def test_failing_rank_fails_the_job_with_its_error(local_slurm, submit_dir, tmp_path):
    (tmp_path / "failing_rank.py").write_text(textwrap.dedent(FAILING_MODULE))
    script = tmp_path / "failing_rank.sbatch"
    script.write_text(FAILING_SCRIPT)
    env = {"COURSE_DIR": str(REPO), "PYTHONPATH": str(tmp_path)}
    job_id = local_slurm.submit(script, cwd=submit_dir, env=env)
    result = local_slurm.wait(job_id, timeout=180)
    assert result.state == "FAILED" and result.exit_code != "0:0", result.describe()
    assert "RuntimeError: deliberate failure on rank 1 of 2" in result.output, result.describe()
    assert result.summaries() == []


def test_site_requiring_an_account_rejects_a_job_without_one(local_slurm, submit_dir):
    job_id = local_slurm.submit(REPO / "slurm" / "ddp.sbatch", cwd=submit_dir,
                                env={"COURSE_DIR": str(REPO), "COURSE_REQUIRE_ACCOUNT": "1"})
    result = local_slurm.wait(job_id, timeout=120)
    assert result.state == "FAILED", result.describe()
    assert "sbatch --account=<your account>" in result.output, result.describe()
    assert "rendezvous" not in result.output and result.summaries() == []


def test_checkout_without_python_env_fails_with_instructions(local_slurm, submit_dir, tmp_path):
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "slurm", checkout / "slurm")  # the scripts, but no .venv and no environment.yml
    # No COURSE_PYTHON, and a PATH without conda: nothing to fall back on.
    env = {"COURSE_DIR": str(checkout), "COURSE_PYTHON": "", "PATH": "/usr/bin:/bin"}
    job_id = local_slurm.submit(checkout / "slurm" / "ddp.sbatch", cwd=submit_dir, env=env)
    result = local_slurm.wait(job_id, timeout=120)
    assert result.state == "FAILED", result.describe()
    assert "no Python environment for the course found" in result.output, result.describe()
    assert "make setup" in result.output and "conda env create -f environment.yml" in result.output
