"""Driving the local single-node Slurm (slurm/local) from tests: start, submit, wait, read the result.

The cluster is real (munged, slurmctld, slurmd); these helpers only wrap its commands with timeouts
so that no test can hang, and read a finished job's state with ``scontrol show job``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from course_lib.real.cluster.slurm_jobs import FINAL_STATES, SUMMARY_LINE, SlurmJob

REPO = Path(__file__).resolve().parents[2]
START, STOP = REPO / "slurm" / "local" / "start.sh", REPO / "slurm" / "local" / "stop.sh"


@dataclass(frozen=True)
class JobResult(SlurmJob):
    """A finished job as the notebooks see it (course_lib's SlurmJob), with what the tests read too."""

    def summaries(self) -> list[dict]:
        return [json.loads(match) for match in SUMMARY_LINE.findall(self.output)]

    def describe(self) -> str:
        return f"job {self.job_id}: {self.state} (exit {self.exit_code}); its output:\n{self.output[-4000:]}"


class LocalSlurm:
    """The running local cluster; ``env`` is what its client commands need (SLURM_CONF)."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.env = dict(os.environ, COURSE_SLURM_DIR=str(state_dir),
                        SLURM_CONF=str(state_dir / "etc" / "slurm.conf"))
        self.started_here = False

    def run(self, *command: str | os.PathLike, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        env = kwargs.pop("env", self.env)
        return subprocess.run([str(part) for part in command], capture_output=True, text=True,
                              timeout=timeout, env=env, **kwargs)

    def start(self) -> None:
        result = self.run(START, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"slurm/local/start.sh failed ({result.returncode}):\n"
                               f"{result.stdout}{result.stderr}\n{self.logs()}")
        self.started_here = "already running" not in result.stdout

    def daemon_pids(self) -> dict[str, int]:
        files = {"munged": "munge/munged.pid", "slurmctld": "run/slurmctld.pid", "slurmd": "run/slurmd.pid"}
        pids = {}
        for name, relative in files.items():
            path = self.state_dir / relative
            text = path.read_text().strip() if path.exists() else ""
            if text.isdigit():
                pids[name] = int(text)
        return pids

    def stop(self) -> None:
        """stop.sh, then make sure it left no daemon running."""
        pids = self.daemon_pids()
        result = self.run(STOP, timeout=120)
        survivors = [f"{name} (pid {pid})" for name, pid in pids.items() if Path(f"/proc/{pid}").exists()]
        if result.returncode != 0 or survivors:
            raise RuntimeError(f"slurm/local/stop.sh ({result.returncode}) left {survivors or 'nothing'}:\n"
                               f"{result.stdout}{result.stderr}")

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log"):
            path = self.state_dir / "log" / name
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-30:]
                parts.append(f"--- {name} (tail)\n" + "\n".join(tail))
        return "\n".join(parts)

    def submit(self, script: Path, *sbatch_args: str, cwd: Path, env: dict | None = None,
               script_args: tuple[str, ...] = ()) -> str:
        """``sbatch [sbatch_args] script [script_args]`` from ``cwd``; the job id."""
        environment = dict(self.env, **(env or {}))
        command = ("sbatch", "--parsable", *sbatch_args, script, *script_args)
        result = self.run(*command, cwd=cwd, env=environment)
        if result.returncode != 0:
            raise RuntimeError(f"sbatch {script.name} failed: {result.stderr.strip()}")
        return result.stdout.strip().split(";")[0]

    def job_fields(self, job_id: str) -> dict[str, str]:
        result = self.run("scontrol", "show", "job", "--oneliner", job_id)
        if result.returncode != 0:
            raise RuntimeError(f"scontrol show job {job_id} failed: {result.stderr.strip()}")
        return dict(re.findall(r"(\w+)=(\S*)", result.stdout))

    def wait(self, job_id: str, timeout: float = 240) -> JobResult:
        """Poll until the job has ended; cancel it and fail if it runs past ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            fields = self.job_fields(job_id)
            if fields.get("JobState") in FINAL_STATES:
                return JobResult(job_id, fields["JobState"], fields.get("ExitCode", "?"),
                                 Path(fields.get("StdOut", "")))
            if time.monotonic() > deadline:
                self.cancel(job_id)
                state = fields.get("JobState")
                raise TimeoutError(f"job {job_id} still {state} after {timeout} s; cancelled it")
            time.sleep(0.5)

    def cancel(self, job_id: str) -> None:
        self.run("scancel", job_id)


def missing_requirements() -> str | None:
    """Why the local Slurm cannot start here, or None."""
    if os.geteuid() != 0:
        return "the local Slurm's daemons must run as root (run the slurm tests as root, as CI does)"
    missing = [name for name in ("munged", "slurmctld", "slurmd", "sbatch") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found; install with: apt-get install slurm-wlm munge (as root)"
    return None
