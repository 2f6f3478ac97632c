"""course_lib.real.cluster.slurm_jobs without a real Slurm: fake sbatch/scontrol/sacct/scancel on PATH play a
cluster that is missing, down, finishing a job, forgetting it, or never finishing it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from course_lib.real.cluster.slurm_jobs import (
    COURSE_ROOT,
    SlurmUnavailable,
    script_lines,
    shell_variables,
    slurm_unavailable_reason,
    submit_job,
    torchrun_locally,
)

SLURM = COURSE_ROOT / "slurm"
needs_slurm_folder = pytest.mark.skipif(not SLURM.is_dir(), reason="this copy of the course has no slurm/")


@pytest.fixture
def script(tmp_path) -> Path:
    """A batch script to submit: the fake commands never run it, so its contents do not matter."""
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n#SBATCH --ntasks=2\necho hello\n")
    return path


def fake_commands(folder: Path, **scripts: str) -> dict:
    """An environment whose PATH holds only ``folder`` (with the given commands) and the system's basics."""
    folder.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return dict(os.environ, PATH=f"{folder}:/usr/bin:/bin" if scripts else str(folder),
                SLURM_CONF=str(folder / "slurm.conf"))


def cluster(tmp_path: Path, job_state: str, output: str = "", forgotten: bool = False) -> dict:
    out = tmp_path / "job.out"
    out.write_text(output)
    show = (f'echo "JobId=42 JobName=x JobState={job_state} Reason=None ExitCode=0:0 StdOut={out}"'
            if not forgotten else 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    return fake_commands(
        tmp_path / "bin",
        sbatch='echo "42;course"',
        scontrol=f'if [ "$1" = ping ]; then echo "Slurmctld(primary) at vm is UP"; exit 0; fi\n{show}',
        sacct='echo "FAILED|1:0"',
        scancel=f'echo "$@" > {tmp_path / "cancelled"}')


def test_no_slurm_says_how_to_get_it(tmp_path, script):
    env = fake_commands(tmp_path / "empty")
    reason = slurm_unavailable_reason(env)
    assert "not installed" in reason and "make slurm-up" in reason and "slurm-wlm" in reason
    with pytest.raises(SlurmUnavailable, match="make slurm-up"):
        submit_job(script, env=env, submit_dir=tmp_path)


def test_a_notebook_being_graded_submits_no_job(tmp_path, script, monkeypatch):
    from course_lib.real.cluster.slurm_jobs import GRADED_RUN_ENV

    monkeypatch.setenv(GRADED_RUN_ENV, "1")   # what the grading sandbox sets in every process it cages
    env = cluster(tmp_path, "COMPLETED")
    assert "being graded" in slurm_unavailable_reason(env)
    with pytest.raises(SlurmUnavailable, match="being graded"):
        submit_job(script, env=env, submit_dir=tmp_path)


def test_a_controller_that_is_down_is_named_without_its_banner(tmp_path):
    banner = "*" * 41
    env = fake_commands(tmp_path / "bin", sbatch="exit 0",
                        scontrol=f'echo "Slurmctld(primary) at vm is DOWN"; echo "{banner}"; exit 1')
    reason = slurm_unavailable_reason(env)
    assert "no controller answers" in reason and "at vm is DOWN" in reason and banner not in reason
    assert "make slurm-up" in reason


def test_a_finished_job_gives_its_state_and_summary(tmp_path, script):
    env = cluster(tmp_path, "COMPLETED", output='setup\n[rank0]:SUMMARY {"strategy": "bus_bandwidth"}\n')
    job = submit_job(script, "1048576", env=env, submit_dir=tmp_path, poll_s=0.01)
    assert (job.job_id, job.state, job.exit_code) == ("42", "COMPLETED", "0:0")
    assert job.summary() == {"strategy": "bus_bandwidth"} and "job 42: COMPLETED" in str(job)


def test_a_job_scontrol_forgot_is_read_from_sacct(tmp_path, script):
    job = submit_job(script, env=cluster(tmp_path, "", forgotten=True), submit_dir=tmp_path, poll_s=0.01)
    assert (job.state, job.exit_code, job.summary()) == ("FAILED", "1:0", None)


def test_a_job_past_its_timeout_is_cancelled(tmp_path, script):
    with pytest.raises(TimeoutError, match="still RUNNING after 0.2 s, so it was cancelled"):
        submit_job(script, env=cluster(tmp_path, "RUNNING"), submit_dir=tmp_path, timeout=0.2, poll_s=0.05)
    assert (tmp_path / "cancelled").read_text().strip() == "42"


def test_sbatch_refusing_a_job_says_why(tmp_path, script):
    env = cluster(tmp_path, "COMPLETED")
    refuse = tmp_path / "bin" / "sbatch"
    refuse.write_text("#!/bin/sh\necho 'sbatch: error: Invalid account' >&2\nexit 1\n")
    with pytest.raises(RuntimeError, match="refused job.sbatch: sbatch: error: Invalid account"):
        submit_job(script, env=env, submit_dir=tmp_path)


def test_a_missing_script_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no batch script at"):
        submit_job(tmp_path / "nope.sbatch", env=cluster(tmp_path, "COMPLETED"), submit_dir=tmp_path)


@needs_slurm_folder
def test_script_lines_are_numbered_as_in_an_editor():
    lines = script_lines("slurm/course_env.sh", start="course_launch() {", stop="}").splitlines()
    assert lines[0].split(maxsplit=1)[1] == "course_launch() {" and lines[-1].endswith("  }")
    number = int(lines[0].split()[0])
    text = (SLURM / "course_env.sh").read_text().splitlines()
    assert text[number - 1] == "course_launch() {" and any("--rdzv-backend=c10d" in line for line in lines)
    whole = script_lines("slurm/bus_bandwidth.sbatch").splitlines()
    assert len(whole) == len((SLURM / "bus_bandwidth.sbatch").read_text().splitlines())


def test_script_lines_explain_a_copy_without_the_file_and_refuse_a_missing_start():
    assert "not in this copy of the course" in script_lines("slurm/no_such.sbatch")
    with pytest.raises(ValueError, match="no line of pyproject.toml contains"):
        script_lines("pyproject.toml", start="no such text")


def test_torchrun_locally_refuses_zero_ranks():
    with pytest.raises(ValueError, match="nproc_per_node must be at least 1"):
        torchrun_locally("course_lib.examples.ddp:main", 0)


def test_shell_variables_reads_a_site_file_and_refuses_one_that_hangs(tmp_path):
    site = tmp_path / "site.sh"
    site.write_text("A=1\nB='two words'\n")
    env = {"PATH": os.environ["PATH"]}
    assert shell_variables(site, ["A", "B", "C"], env) == {"A": "1", "B": "two words", "C": ""}
    site.write_text("sleep 5\n")
    with pytest.raises(RuntimeError, match="did not finish in 0.5 s"):
        shell_variables(site, ["A"], env, timeout=0.5)
