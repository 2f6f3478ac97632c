"""A preempted job saves, requeues itself and resumes: slurm/preemptible.sbatch on the local Slurm.

Two ways, as chapter 09's table of Slurm's signals lists them. The time limit's warning, and a real
preemption: a job of the local Slurm's "urgent" partition (a higher PriorityTier, slurm/local/start.sh)
needs the node, Slurm sends the running job SIGTERM at once (SIGKILL GraceTime s later), the ranks save the
step they are in, and the job is requeued and resumes (PreemptMode=REQUEUE). A job script that ignores
SIGTERM, preempted the same way, is killed at the end of the grace time with its work since the last
checkpoint lost.

The job is warned as Slurm warns it (USR1 to the batch script, what --signal=B:USR1@<s> sends) once its
first checkpoint is on disk; the script forwards SIGTERM to the ranks, which save the step they are in and
return; the script requeues the job, and its second run resumes from that checkpoint and finishes. Its
final loss is the uninterrupted run's, as run_ranks computes it here. About 30-40 s on an idle machine.
"""

from __future__ import annotations

import re
import time

import pytest

from conftest import skip_or_fail
from course_lib.examples import preemptible
from course_lib.real import run_ranks
from course_lib.real.cluster.slurm_jobs import job_records
from course_lib.real.cluster.slurm_requeue import preempt_and_requeue, urgent_job
from tests.slurm.cluster import REPO, JobResult

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS, SAVE_EVERY, STEP_SECONDS = 12, 4, 0.3


def test_a_warned_job_saves_requeues_and_resumes_exactly(local_slurm, submit_dir, tmp_path):
    def first_checkpoint_written(run_dir):
        return (run_dir / "checkpoints" / f"step-{SAVE_EVERY:06d}" / ".metadata").exists()

    job = preempt_and_requeue(REPO / "slurm" / "preemptible.sbatch", STEPS, SAVE_EVERY, STEP_SECONDS,
                              ready=first_checkpoint_written,
                              submit_dir=submit_dir, env=dict(local_slurm.env, COURSE_DIR=str(REPO)),
                              timeout=180)
    result = JobResult(job.job_id, job.state, job.exit_code, job.output_path)
    assert (job.state, job.exit_code, job.restarts) == ("COMPLETED", "0:0", 1), result.describe()
    stopped, finished = result.summaries()
    assert SAVE_EVERY < stopped["stopped_at"] < STEPS and stopped["final_loss"] is None, result.describe()
    assert finished["resumed_from"] == stopped["stopped_at"], result.describe()   # no step lost, none redone
    assert "requeueing job" in result.output and f"resumed from step {stopped['stopped_at']}" in result.output
    uninterrupted = run_ranks(preemptible.main, 2, STEPS, SAVE_EVERY, 0, tmp_path / "checkpoints")[0]
    assert finished["final_loss"] == uninterrupted["final_loss"] and finished["stopped_at"] == STEPS


URGENT = "urgent"


@pytest.fixture
def preemptible_partition(local_slurm):
    """The local Slurm's partitions as slurm/local/start.sh writes them: the default one preemptible
    (PreemptMode=REQUEUE, its GraceTime), the urgent one above it; a cluster started before has none."""
    shown = local_slurm.run("scontrol", "show", "partition", "--oneliner").stdout
    partitions = {re.search(r"PartitionName=(\S+)", line).group(1): line
                  for line in shown.splitlines() if line}
    default = next((line for line in partitions.values() if "Default=YES" in line), "")
    if URGENT not in partitions or "PreemptMode=REQUEUE" not in default:
        skip_or_fail("the running local Slurm has no preemptible partition and no 'urgent' one: it was "
                     "started by an older slurm/local/start.sh (make slurm-down, then make slurm-up)")
    return int(re.search(r"GraceTime=(\d+)", default).group(1))


def test_a_preempted_job_saves_is_requeued_and_resumes_exactly(local_slurm, preemptible_partition,
                                                               submit_dir, tmp_path):
    def first_checkpoint_written(run_dir):
        return (run_dir / "checkpoints" / f"step-{SAVE_EVERY:06d}" / ".metadata").exists()

    steps = 30          # long enough that the preemption lands mid-run on a busy machine
    job = preempt_and_requeue(REPO / "slurm" / "preemptible.sbatch", steps, SAVE_EVERY, STEP_SECONDS,
                              ready=first_checkpoint_written, preempt=urgent_job(URGENT),
                              submit_dir=submit_dir, env=dict(local_slurm.env, COURSE_DIR=str(REPO)),
                              timeout=240)
    result = JobResult(job.job_id, job.state, job.exit_code, job.output_path)
    assert (job.state, job.exit_code, job.restarts) == ("COMPLETED", "0:0", 1), result.describe()
    stopped, finished = result.summaries()
    assert SAVE_EVERY < stopped["stopped_at"] < steps and stopped["final_loss"] is None, result.describe()
    assert finished["resumed_from"] == stopped["stopped_at"], result.describe()   # no step lost, none redone
    assert "preempted: requeueing job" in result.output, result.describe()
    uninterrupted = run_ranks(preemptible.main, 2, steps, SAVE_EVERY, 0, tmp_path / "checkpoints")[0]
    assert finished["final_loss"] == uninterrupted["final_loss"] and finished["stopped_at"] == steps


# A job script whose work ignores SIGTERM: a step a second, a checkpoint (a line in a file) at step 5.
IGNORES_SIGTERM = """#!/bin/bash
#SBATCH --job-name=course-ignores-term
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --no-requeue
#SBATCH --output=%x-%j.out
srun bash -c 'trap "" TERM
for step in $(seq 1 600); do
    sleep 1; echo "step $step" >> progress.txt
    if ((step % 100 == 5)); then echo "saved $step" >> progress.txt; fi
done'
"""


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_time_and_loses_its_work(
        local_slurm, preemptible_partition, submit_dir):
    folder = submit_dir / "ignores-term"
    folder.mkdir()
    (folder / "job.sbatch").write_text(IGNORES_SIGTERM)
    job_id = local_slurm.run("sbatch", "--parsable", "job.sbatch", cwd=folder).stdout.strip().split(";")[0]
    progress = folder / "progress.txt"
    deadline = time.monotonic() + 120
    while "saved 5" not in (progress.read_text() if progress.exists() else ""):
        assert time.monotonic() < deadline, "the job did not reach its first checkpoint in 120 s"
        time.sleep(0.5)
    urgent_job(URGENT)(job_id, local_slurm.env)
    preempted = time.monotonic()
    while job_records(job_id, local_slurm.env)[0].get("JobState") in ("PENDING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline + 60, f"job {job_id} still runs long after its grace time"
        time.sleep(0.5)
    ended_after = time.monotonic() - preempted
    lines = progress.read_text().split()
    reached = max(int(n) for kind, n in zip(lines[::2], lines[1::2], strict=True) if kind == "step")
    saved = max(int(n) for kind, n in zip(lines[::2], lines[1::2], strict=True) if kind == "saved")
    state = job_records(job_id, local_slurm.env)[0].get("JobState")
    # SIGTERM changed nothing: the job ran on until SIGKILL, GraceTime seconds after the preemption
    assert ended_after >= preemptible_partition - 1, (ended_after, state)
    assert saved == 5 and reached >= 5 + preemptible_partition - 2, (reached, saved, state)   # lost
