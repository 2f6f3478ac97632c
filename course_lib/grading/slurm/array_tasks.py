"""The Slurm side of grading a class as a job array: sharing out the students, submitting the array,
reading each task's state (sacct, or scontrol where the cluster keeps no accounting) and deciding
which failed tasks are worth one more try.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from course_lib.real.cluster import slurm_jobs
from course_lib.real.cluster.slurm_jobs import FINAL_STATES

SACCT_COLUMNS = ("JobID", "State", "ExitCode")
# End states (FINAL_STATES) worth one more try: the task's process or node died, or it ran out of time
# or memory. CANCELLED is not: somebody stopped it on purpose (scancel), and its students are reported
# ungraded instead.
RETRY_STATES = FINAL_STATES - {"COMPLETED", "CANCELLED"}


@dataclass
class ArrayOptions:
    """How the class is spread over the cluster (make grade SLURM=1 TASKS=.. PARTITION=.. ACCOUNT=..)."""

    tasks: int = 4
    partition: str | None = None
    account: str | None = None
    minutes_per_submission: float = 5.0   # the task's --time: this times its submissions / jobs, + margin
    cpus_per_task: int = 1                # also the students a task grades at once
    sbatch_args: list[str] = field(default_factory=list)
    poll_seconds: float = 2.0
    max_wait_s: float = 7 * 24 * 3600.0


def split(students: list[str], tasks: int) -> list[list[str]]:
    """Contiguous shares as even as can be (sizes differ by at most one); never an empty share."""
    if tasks < 1:
        raise ValueError(f"a job array needs at least one task, not {tasks}: give --tasks 1 or more")
    count = min(tasks, len(students))
    base, extra = divmod(len(students), count) if count else (0, 0)
    shares, start = [], 0
    for index in range(count):
        size = base + (1 if index < extra else 0)
        shares.append(students[start:start + size])
        start += size
    return shares


def time_limit_minutes(options: ArrayOptions, submissions: int) -> int:
    """--time of one task: its submissions graded `cpus_per_task` at a time, plus 5 minutes of set-up."""
    return 5 + math.ceil(options.minutes_per_submission * submissions / max(1, options.cpus_per_task))


def sbatch_command(options: ArrayOptions, script: Path, work: Path, indices: list[int],
                   submissions: int) -> list[str]:
    command = ["sbatch", "--parsable", f"--array={','.join(map(str, indices))}", "--job-name=course-grade",
               f"--output={work / 'task-%a.out'}", f"--cpus-per-task={options.cpus_per_task}",
               f"--time={time_limit_minutes(options, submissions)}"]
    command += [f"--partition={options.partition}"] if options.partition else []
    command += [f"--account={options.account}"] if options.account else []
    return [*command, *options.sbatch_args, str(script), str(work)]


def _indices(text: str) -> list[int]:
    """Array task ids as Slurm prints them: '3', '0-3', '[0-2,5]', '0-7%2' (a throttle)."""
    found = []
    for part in text.strip("[]").split("%")[0].split(","):
        if "-" in part:
            low, high = part.split("-")
            found += range(int(low), int(high) + 1)
        elif part.isdigit():
            found.append(int(part))
    return found


def read_states(records: list[dict[str, str]]) -> dict[int, tuple[str, str]]:
    """Slurm's records of an array (slurm_jobs.job_records) -> {task: (state, exit code)}."""
    states = {}
    for record in records:
        for index in _indices(record.get("ArrayTaskId", "")):
            states[index] = (record.get("JobState", "UNKNOWN"), record.get("ExitCode", "?"))
    return states


def task_states(job_id: str, runner=None) -> dict[int, tuple[str, str]]:
    """Each task's state: from sacct when the cluster keeps accounting, else from scontrol."""
    return read_states(slurm_jobs.job_records(job_id, dict(os.environ), timeout=60, accounting_first=True,
                                              sacct_columns=SACCT_COLUMNS, runner=runner))


def to_retry(states: dict[int, tuple[str, str]], finished: set[int]) -> list[int]:
    """Tasks to run once more: failed as Slurm sees it, or 'completed' without the task's done marker."""
    return sorted(index for index, (state, _) in states.items()
                  if state in RETRY_STATES or (state == "COMPLETED" and index not in finished))


def wait_for(job_id: str, indices: list[int], options: ArrayOptions, say=print,
             runner=None) -> dict[int, tuple[str, str]]:
    """Poll until every task in indices has ended; cancel the array if it outlasts max_wait_s."""
    deadline, last = time.monotonic() + options.max_wait_s, ""
    while True:
        states = task_states(job_id, runner)
        ended = {i: states[i] for i in indices if i in states and states[i][0] in FINAL_STATES}
        if len(ended) == len(indices):
            return ended
        line = f"job {job_id}: {len(ended)}/{len(indices)} tasks ended"
        if line != last:
            say(line)
            last = line
        if time.monotonic() > deadline:
            slurm_jobs.cancel_job(job_id, runner=runner)
            raise TimeoutError(f"job array {job_id} still running after {options.max_wait_s:g} s: cancelled")
        time.sleep(options.poll_seconds)


SITE_VARIABLES = {"COURSE_GRADE_PARTITION": "partition", "COURSE_GRADE_ACCOUNT": "account",
                  "COURSE_GRADE_TASKS": "tasks", "COURSE_GRADE_CPUS_PER_TASK": "cpus_per_task",
                  "COURSE_GRADE_MINUTES_PER_SUBMISSION": "minutes_per_submission"}


def site_settings(code_root: Path, environ: dict) -> dict:
    """ArrayOptions fields set by slurm/site.sh or the environment (COURSE_GRADE_*); the environment wins."""
    values = {}
    site = code_root / "slurm" / "site.sh"
    if site.exists():
        values = slurm_jobs.shell_variables(site, list(SITE_VARIABLES),
                                            {k: v for k, v in environ.items() if k not in SITE_VARIABLES})
    values.update({name: environ[name] for name in SITE_VARIABLES if environ.get(name)})
    settings = {}
    for name, text in values.items():
        if text:
            kind = type(getattr(ArrayOptions, SITE_VARIABLES[name], None) or "")
            try:
                settings[SITE_VARIABLES[name]] = kind(text) if kind in (int, float) else text
            except ValueError as error:
                raise SystemExit(f"{name}={text!r} (slurm/site.sh or the environment) is not a number; "
                                 "give a plain number, e.g. 4") from error
    return settings
