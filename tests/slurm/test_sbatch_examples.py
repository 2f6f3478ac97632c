"""Every slurm/*.sbatch submitted unchanged to the local Slurm (CPU, gloo), checked against run_ranks.

All scripts are submitted at once so Slurm queues them back to back; each test then waits for its
own job and compares the job's SUMMARY line with the same example run in-process by run_ranks.
"""

from __future__ import annotations

import importlib
import math

import pytest

from course_lib.real import run_ranks
from tests.slurm.cluster import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# Script name -> ranks its #SBATCH header asks for on a CPU-only partition.
SCRIPTS = {"single_device": 1, "ddp": 2, "naive_model_parallel": 2, "pipeline": 2, "tensor_parallel": 2,
           "fsdp": 2, "bus_bandwidth": 2}
# Values that are measured (timings), so only their type and sign can be compared across runs.
MEASURED = {"seconds", "algbw_GBps", "busbw_GBps", "peak_busbw_GBps"}
# Found by the script from the submit folder (no COURSE_DIR): sbatch run inside the checkout.
FOUND_FROM_SUBMIT_DIR = "single_device"


@pytest.fixture(scope="module")
def submitted(local_slurm, submit_dir):
    """Job id of every script; all queued before the first test waits."""
    jobs = {}
    for name in SCRIPTS:
        script = REPO / "slurm" / f"{name}.sbatch"
        if name == FOUND_FROM_SUBMIT_DIR:
            # Submitted from the checkout itself; output and runs/ redirected so the checkout stays clean.
            jobs[name] = local_slurm.submit(script, f"--output={submit_dir}/%x-%j.out", cwd=REPO,
                                            env={"COURSE_RUN_DIR": str(submit_dir / "run-from-checkout")})
        else:
            jobs[name] = local_slurm.submit(script, cwd=submit_dir, env={"COURSE_DIR": str(REPO)})
    yield jobs
    for job_id in jobs.values():
        local_slurm.cancel(job_id)


def assert_same_summary(from_job, reference, path="summary"):
    """Equal structure and values; measured values only need to be positive numbers."""
    if isinstance(reference, dict):
        assert isinstance(from_job, dict), (path, from_job)
        assert sorted(from_job) == sorted(reference), (path, from_job, reference)
        for key in reference:
            if key in MEASURED:
                value = from_job[key]
                assert isinstance(value, (int, float)) and value > 0, (f"{path}.{key}", from_job)
            else:
                assert_same_summary(from_job[key], reference[key], f"{path}.{key}")
    elif isinstance(reference, list):
        assert isinstance(from_job, list) and len(from_job) == len(reference), (path, from_job, reference)
        for index, (job_item, reference_item) in enumerate(zip(from_job, reference, strict=True)):
            assert_same_summary(job_item, reference_item, f"{path}[{index}]")
    elif isinstance(reference, float) and isinstance(from_job, (int, float)):
        assert math.isclose(from_job, reference, rel_tol=1e-5, abs_tol=1e-9), (path, from_job, reference)
    else:
        assert from_job == reference, (path, from_job, reference)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_runs_the_example_like_run_ranks(name, submitted, local_slurm):
    result = local_slurm.wait(submitted[name])
    assert (result.state, result.exit_code) == ("COMPLETED", "0:0"), result.describe()
    summaries = result.summaries()
    assert len(summaries) == 1, f"expected exactly one SUMMARY line (from rank 0)\n{result.describe()}"
    from_job = summaries[0]
    assert (from_job["world_size"], from_job["backend"]) == (SCRIPTS[name], "gloo"), result.describe()

    example = importlib.import_module(f"course_lib.examples.{name}")
    reference = run_ranks(example.main, SCRIPTS[name], timeout=120)[0]
    assert_same_summary(from_job, reference)


def test_each_job_keeps_its_log_in_its_own_folder(submitted, local_slurm, submit_dir):
    result = local_slurm.wait(submitted["ddp"])
    run_dir = submit_dir / "runs" / f"course-ddp-{result.job_id}"
    log = (run_dir / "job.log").read_text()
    assert "SUMMARY " in log and "backend gloo" in log, log
    assert "1 node(s) x 2 rank(s)" in (run_dir / "setup.txt").read_text()
    assert (submit_dir / "runs" / ".gitignore").read_text().strip() == "*"


def test_script_finds_the_checkout_from_the_submit_folder(submitted, local_slurm, submit_dir):
    result = local_slurm.wait(submitted[FOUND_FROM_SUBMIT_DIR])
    assert result.state == "COMPLETED", result.describe()
    assert f"python {REPO}/.venv/bin/python" in result.output, result.describe()
    assert (submit_dir / "run-from-checkout" / "job.log").exists()
