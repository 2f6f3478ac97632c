"""A preempted job saves, requeues itself and resumes: slurm/preemptible.sbatch on the local Slurm.

The job is warned as Slurm warns it (USR1 to the batch script, what --signal=B:USR1@<s> sends) once its
first checkpoint is on disk; the script forwards SIGTERM to the ranks, which save the step they are in and
return; the script requeues the job, and its second run resumes from that checkpoint and finishes. Its
final loss is the uninterrupted run's, as run_ranks computes it here. About 30-40 s on an idle machine.
"""

from __future__ import annotations

import pytest

from course_lib.dist import run_ranks
from course_lib.dist.slurm_requeue import preempt_and_requeue
from course_lib.examples import preemptible
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
