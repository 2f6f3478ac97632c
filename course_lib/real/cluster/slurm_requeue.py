"""A Slurm job preempted on purpose and requeued: warn it, let it save and requeue itself, watch it resume.

``preempt_and_requeue`` submits a batch script that handles Slurm's signals (slurm/preemptible.sbatch),
waits until the job has written its first checkpoint, then either sends the time limit's warning by hand
(``scancel --signal=USR1 --batch``: what ``--signal=B:USR1@<s>`` sends) or preempts it for real with a job
of a higher-priority partition, and follows the requeued job to its end. Slurm holds a requeued batch job
back before it may start again (EligibleTime 121 s after the requeue on the local Slurm 22.05);
``scontrol update StartTime=now+2`` lets it go 2 s later (a start within the second of the requeue is
refused by slurmd, "Job credential revoked", and fails the job: slurmctld's log).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .slurm_jobs import (
    COURSE_ROOT,
    FINAL_STATES,
    SlurmJob,
    SlurmUnavailable,
    job_records,
    run_slurm_command,
    slurm_environment,
    slurm_unavailable_reason,
)

RESTART_DELAY_S = 2


@dataclass(frozen=True)
class RequeuedJob(SlurmJob):
    """A job that was warned, requeued and ran again: ``restarts`` is Slurm's count of requeues."""

    restarts: int = 0
    warned_after_s: float = 0.0


def _fields(job_id: str, env: dict) -> dict[str, str]:
    return job_records(job_id, env)[0]


def _until(condition: Callable[[], object], deadline: float, what: str, job_id: str, env: dict,
           poll_s: float = 0.5):
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            run_slurm_command(["scancel", job_id], env, 30)
            raise TimeoutError(f"job {job_id}: {what} did not happen in time, so the job was cancelled "
                               "(squeue shows what else the cluster is running)")
        time.sleep(poll_s)


def warn(job_id: str, env: dict) -> None:
    """What ``--signal=B:USR1@<s>`` sends before a time limit: USR1 to the batch script."""
    run_slurm_command(["scancel", "--signal=USR1", "--batch", job_id], env, 30)


def urgent_job(partition: str = "urgent") -> Callable[[str, dict], None]:
    """A real preemption: a job in a partition of higher PriorityTier that needs the whole node (the local
    Slurm's "urgent" partition; slurm/local/start.sh). Slurm sends the running job SIGCONT and SIGTERM at once
    and SIGKILL GraceTime seconds later, and requeues it (PreemptMode=REQUEUE)."""
    def preempt(job_id: str, env: dict) -> None:
        command = ["sbatch", "--parsable", f"--partition={partition}", "--exclusive",
                   "--job-name=course-urgent", "--output=/dev/null", "--wrap=true"]
        submitted = run_slurm_command(command, env, 60)
        if submitted.returncode != 0:
            raise RuntimeError(f"the urgent job was refused: {submitted.stderr.strip() or submitted.stdout}")
    return preempt


def preempt_and_requeue(script, *script_args: str, ready: Callable[[Path], bool], sbatch_args=(),
                        submit_dir=None, env=None, timeout: float = 240,
                        preempt: Callable[[str, dict], None] = warn) -> RequeuedJob:
    """Submit ``script``, ``preempt`` it once ``ready(run_dir)`` holds (run_dir: the job's runs/<name>-<id>;
    by default the time limit's warning, ``urgent_job()`` for a real preemption), let its requeued run start
    at once, and wait for the end; the job is cancelled after ``timeout`` s."""
    environment = slurm_environment(env)
    reason = slurm_unavailable_reason(environment)
    if reason:
        raise SlurmUnavailable(reason)
    environment.setdefault("COURSE_DIR", str(COURSE_ROOT))
    submit_dir = Path(submit_dir or tempfile.mkdtemp(prefix="course-jobs-"))
    command = ["sbatch", "--parsable", *map(str, sbatch_args), str(Path(script).resolve()),
               *map(str, script_args)]
    submitted = run_slurm_command(command, environment, 60, cwd=submit_dir)
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch refused {script}: {submitted.stderr.strip() or submitted.stdout}")
    job_id = submitted.stdout.strip().split(";")[0]
    started, deadline = time.monotonic(), time.monotonic() + timeout
    name = _fields(job_id, environment).get("JobName", "job")
    run_dir = submit_dir / "runs" / f"{name}-{job_id}"
    _until(lambda: ready(run_dir), deadline, "its first checkpoint", job_id, environment)
    warned = time.monotonic() - started
    preempt(job_id, environment)

    released = []

    def requeued() -> bool:
        """The job is queued again (or running again); or it ended without being requeued."""
        fields = _fields(job_id, environment)
        state, restarts = fields.get("JobState"), int(fields.get("Restarts", "0"))
        if state == "PENDING" and restarts >= 1 and not released:
            # once, and not "now": a start within the second of the requeue is refused ("Job credential
            # revoked" in slurmctld's log) and fails the job
            run_slurm_command(["scontrol", "update", f"JobId={job_id}", f"StartTime=now+{RESTART_DELAY_S}"],
                              environment, 30)
            released.append(True)
        # while the requeue happens, the first run may show as FAILED for a moment: not the end yet
        return (restarts >= 1 and state in ("PENDING", "CONFIGURING", "RUNNING")) or \
            (restarts == 0 and state in FINAL_STATES)

    _until(requeued, deadline, "the requeue", job_id, environment)
    final = _until(lambda: (lambda f: f if f.get("JobState") in FINAL_STATES else None)(
        _fields(job_id, environment)), deadline, "the requeued run's end", job_id, environment)
    return RequeuedJob(job_id, final["JobState"], final.get("ExitCode", "?"),
                       Path(final.get("StdOut") or submit_dir / f"slurm-{job_id}.out"),
                       int(final.get("Restarts", "0")), round(warned, 1))
