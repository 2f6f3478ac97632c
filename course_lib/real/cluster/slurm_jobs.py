"""Slurm and torchrun from a notebook: is Slurm here, submit a slurm/*.sbatch job, wait, read its SUMMARY.

Every command runs under a timeout, so a cell never hangs; without a running Slurm it says how to get one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[3]
# Set in every process of a grading sandbox: a notebook being graded submits no job to the cluster.
GRADED_RUN_ENV = "COURSE_GRADED_RUN"
SUMMARY_LINE = re.compile(r"^(?:\[[^\]]*\]:)?SUMMARY (\{.*\})\s*$", re.MULTILINE)
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE"}
HOW_TO_GET_SLURM = ("to try the slurm/ scripts on this machine, install Slurm once "
                    "(sudo apt-get install slurm-wlm munge) and start a local single-node cluster with "
                    "`sudo make slurm-up` in the course checkout (`make slurm-down` stops it)")


class SlurmUnavailable(RuntimeError):
    """No Slurm to submit to here; the message says why and how to get one."""


@dataclass(frozen=True)
class SlurmJob:
    """A finished job: its id, final state (COMPLETED, FAILED, ...), exit code and output file."""

    job_id: str
    state: str
    exit_code: str
    output_path: Path

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace") if self.output_path.is_file() else ""

    def summary(self) -> dict | None:
        """The SUMMARY dictionary rank 0 printed (what run_ranks returns in a notebook), or None."""
        found = SUMMARY_LINE.findall(self.output)
        return json.loads(found[-1]) if found else None

    def __str__(self) -> str:
        return f"job {self.job_id}: {self.state} (exit code {self.exit_code}), output in {self.output_path}"


def slurm_environment(env=None) -> dict:
    """The environment Slurm's commands need: the local cluster's config (slurm/local keeps it under
    $COURSE_SLURM_DIR, default /tmp/course-slurm) when no SLURM_CONF is set and /etc has none."""
    env = dict(os.environ if env is None else env)
    local_conf = Path(env.get("COURSE_SLURM_DIR") or "/tmp/course-slurm") / "etc" / "slurm.conf"
    if "SLURM_CONF" not in env and not Path("/etc/slurm/slurm.conf").exists() and local_conf.exists():
        env["SLURM_CONF"] = str(local_conf)
    return env


def run_slurm_command(command: list[str], env: dict, timeout: float, cwd=None,
                      runner=None) -> subprocess.CompletedProcess:
    """One command-line tool (Slurm's sbatch, sacct, scontrol, scancel; bash reading a site file) run to its
    end; a hang reads as exit status 124.

    ``runner`` stands in for subprocess.run in tests that play Slurm's answers."""
    try:
        return (runner or subprocess.run)(command, capture_output=True, text=True, env=env, cwd=cwd,
                                          timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "", f"{command[0]} gave no answer in {timeout:g} s")


def cancel_job(job_id: str, env=None, runner=None) -> None:
    """scancel the job (every task of an array); an answer that never comes is not waited for."""
    run_slurm_command(["scancel", job_id], slurm_environment(env), 60, runner=runner)


def shell_variables(script: Path, names, env: dict, timeout: float = 30) -> dict[str, str]:
    """The values the bash ``script`` gives the variables ``names`` when sourced (empty when unset)."""
    shown = " ".join(f'"${{{name}:-}}"' for name in names)
    answer = run_slurm_command(["bash", "-c", f'source "$1" >/dev/null 2>&1; printf "%s\\n" {shown}', "site",
                                str(script)], env, timeout)
    if answer.returncode == 124:   # its settings silently dropped would grade with the wrong partition
        raise RuntimeError(f"sourcing {script} did not finish in {timeout:g} s; make sure it ends without "
                           "waiting for input (bash -n checks its syntax)")
    return dict(zip(names, answer.stdout.split("\n"), strict=False))


def slurm_unavailable_reason(env=None, timeout: float = 15) -> str | None:
    """Why no job can be submitted here (with how to fix it), or None when a controller answers."""
    if os.environ.get(GRADED_RUN_ENV):
        return "this notebook is being graded, and a graded notebook submits no Slurm job"
    env = slurm_environment(env)
    missing = [name for name in ("sbatch", "scontrol") if shutil.which(name, path=env.get("PATH")) is None]
    if missing:
        return f"Slurm is not installed here ({', '.join(missing)} not found): {HOW_TO_GET_SLURM}"
    ping = run_slurm_command(["scontrol", "ping"], env, timeout)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        said = [line for line in (ping.stdout + ping.stderr).splitlines() if line.strip(" *")]
        return (f"Slurm is installed but no controller answers (scontrol ping: {said[0] if said else '?'}); "
                f"{HOW_TO_GET_SLURM}")
    return None


# sacct's column names as scontrol spells the same fields, so that both answers read alike.
SACCT_AS_SCONTROL = {"JobID": "JobId", "State": "JobState", "ExitCode": "ExitCode"}


def scontrol_records(text: str) -> list[dict[str, str]]:
    """`scontrol show job --oneliner` (a line per job, array task or pending range) -> [{field: value}]."""
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in text.splitlines() if "JobId=" in line]


def sacct_records(text: str, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """`sacct -n -P -o <columns>` -> [{field: value}] in scontrol's names; an array task's JobID (812_3)
    gives its ArrayTaskId, and a state such as "CANCELLED by 0" reads CANCELLED."""
    records = []
    for line in text.splitlines():
        values = line.strip().split("|")
        if len(values) < len(columns):
            continue
        record = {SACCT_AS_SCONTROL.get(name, name): value
                  for name, value in zip(columns, values, strict=False)}
        record["JobState"] = (record.get("JobState") or "UNKNOWN").split()[0]
        if "_" in record.get("JobId", ""):
            record["ArrayTaskId"] = record["JobId"].split("_", 1)[1]
        records.append(record)
    return records


def job_records(job_id: str, env: dict, timeout: float = 30, accounting_first: bool = False,
                sacct_columns: tuple[str, ...] = ("State", "ExitCode"),
                runner=None) -> list[dict[str, str]]:
    """What Slurm says of a job (or of each task of an array), as {field: value} in scontrol's names:
    from scontrol, or from sacct once scontrol has forgotten the job; `accounting_first` asks sacct first
    (it still lists every task of an array that has ended). Raises when neither knows the job."""
    questions = {
        "scontrol": (["scontrol", "show", "job", "--oneliner", job_id], scontrol_records),
        "sacct": (["sacct", "-j", job_id, "-X", "-n", "-P", "-o", ",".join(sacct_columns)],
                  lambda text: sacct_records(text, sacct_columns))}
    said = {}
    for name in (["sacct", "scontrol"] if accounting_first else ["scontrol", "sacct"]):
        command, read = questions[name]
        answer = run_slurm_command(command, env, timeout, runner=runner)
        records = read(answer.stdout) if answer.returncode == 0 else []
        if records:
            return records
        said[name] = answer.stderr.strip() or "nothing"
    raise RuntimeError(f"Slurm knows no job {job_id}: scontrol said {said['scontrol']!r}, "
                       f"sacct {said['sacct']!r}")


def job_state(job_id: str, env: dict, timeout: float = 30) -> tuple[str, str, str]:
    """(state, exit code, output file) from scontrol; from sacct once scontrol has forgotten the job."""
    record = job_records(job_id, env, timeout)[0]
    return record.get("JobState", "UNKNOWN"), record.get("ExitCode", "?"), record.get("StdOut", "")


def submit_job(script, *script_args: str, sbatch_args=(), submit_dir=None, env=None,
               timeout: float = 180, poll_s: float = 0.5) -> SlurmJob:
    """``sbatch script script_args`` from ``submit_dir`` (default: a new temporary folder), then wait for
    the job to end; a job still running after ``timeout`` seconds is cancelled and a TimeoutError says so.

    The job finds the course through COURSE_DIR (this checkout unless ``env`` says otherwise)."""
    environment = slurm_environment(env)
    reason = slurm_unavailable_reason(environment)
    if reason:
        raise SlurmUnavailable(reason)
    script = Path(script).resolve()
    if not script.is_file():
        raise FileNotFoundError(f"no batch script at {script}: name one of {COURSE_ROOT / 'slurm'}/*.sbatch")
    environment.setdefault("COURSE_DIR", str(COURSE_ROOT))
    submit_dir = Path(submit_dir or tempfile.mkdtemp(prefix="course-jobs-"))
    command = ["sbatch", "--parsable", *map(str, sbatch_args), str(script), *map(str, script_args)]
    submitted = run_slurm_command(command, environment, 60, cwd=submit_dir)
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch refused {script.name}: {submitted.stderr.strip() or submitted.stdout}")
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while True:
        state, exit_code, output = job_state(job_id, environment)
        if state in FINAL_STATES:
            return SlurmJob(job_id, state, exit_code, Path(output or submit_dir / f"slurm-{job_id}.out"))
        if time.monotonic() > deadline:
            run_slurm_command(["scancel", job_id], environment, 30)
            raise TimeoutError(f"job {job_id} was still {state} after {timeout:g} s, so it was cancelled "
                               "(squeue shows what else the cluster is running)")
        time.sleep(poll_s)


@dataclass(frozen=True)
class LocalRun:
    """What a local torchrun printed, and its exit status (0: every rank finished)."""

    command: list[str]
    returncode: int
    output: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun_locally(target: str, nproc_per_node: int, *args, python_path=(),
                     timeout: float = 120) -> LocalRun:
    """Run ``target`` (module:function) on ``nproc_per_node`` CPU ranks with torchrun and its c10d
    rendezvous on this machine, exactly as slurm/course_env.sh starts one node's ranks.

    torchrun starts fresh Python processes that import ``target`` by name: its module must be a file
    on the path (``python_path`` adds folders). Output of all ranks comes back as one text."""
    if int(nproc_per_node) < 1:
        raise ValueError(f"nproc_per_node must be at least 1, got {nproc_per_node!r}")
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
               f"--nproc-per-node={nproc_per_node}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--rdzv-id=notebook",
               "--max-restarts=0", "-m", "course_lib.real.launch.torchrun", target, *map(str, args)]
    env = dict(os.environ, COURSE_BACKEND="gloo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([*map(str, python_path), str(COURSE_ROOT),
                                           os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # torchrun and every rank it started
            process.communicate()
            raise TimeoutError(f"torchrun {target} ran past {timeout:g} s; it and its ranks were "
                               "stopped") from None
    return LocalRun(command, process.returncode, output)


def script_lines(relative: str, start: str | None = None, stop: str | None = None) -> str:
    """A file of the course checkout (e.g. ``slurm/ddp.sbatch``), its lines numbered as an editor shows
    them: all, or from the first line containing ``start`` to the next starting with ``stop``, both included.

    A copy of the course without the file (the student kit ships no slurm/) gets a sentence saying so."""
    path = COURSE_ROOT / relative
    if not path.is_file():
        return (f"[{relative} is not in this copy of the course ({COURSE_ROOT}); it is in the course's "
                "repository, next to course_lib/]")
    lines = path.read_text().splitlines()
    first = next((i for i, line in enumerate(lines) if start in line), None) if start else 0
    if first is None:
        raise ValueError(f"no line of {relative} contains {start!r}")
    ends = [i for i in range(first + 1, len(lines)) if stop and lines[i].startswith(stop)]
    last = ends[0] if ends else len(lines) - 1
    return "\n".join(f"{number + 1:4d}  {lines[number]}" for number in range(first, last + 1))
