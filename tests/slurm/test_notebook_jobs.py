"""Chapter 09's Slurm helpers against the real local Slurm: it is seen as up, and a bus-bandwidth job
submitted with ``submit_job`` ends COMPLETED with the SUMMARY rank 0 printed."""

from __future__ import annotations

import pytest

from course_lib.real.cluster.slurm_jobs import slurm_unavailable_reason, submit_job
from tests.slurm.cluster import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_submit_job_waits_for_bus_bandwidth_and_reads_its_summary(local_slurm, submit_dir):
    assert slurm_unavailable_reason(local_slurm.env) is None, local_slurm.logs()
    job = submit_job(REPO / "slurm" / "bus_bandwidth.sbatch", str(1 << 20), submit_dir=submit_dir,
                     env=local_slurm.env, timeout=240)
    assert job.state == "COMPLETED" and job.exit_code == "0:0", f"{job}\n{job.output[-3000:]}"
    summary = job.summary()
    assert summary["strategy"] == "bus_bandwidth" and summary["world_size"] == 2, summary
    assert summary["results"][-1]["bytes"] == 1 << 20 and summary["peak_busbw_GBps"] > 0
