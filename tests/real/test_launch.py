"""The cluster entry: the rank from torchrun or Slurm, loading the target, and a real srun-style run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.examples._common import parse_summary
from course_lib.real.launch.torchrun import load_target, main, rank_environment

REPO = Path(__file__).resolve().parents[2]


def test_torchrun_variables_win():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "n1",
           "MASTER_PORT": "29511", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}
    place = rank_environment(env)
    assert (place.rank, place.world_size, place.local_rank, place.local_world_size) == (3, 8, 1, 4)
    assert (place.master_addr, place.master_port, place.source) == ("n1", 29511, "torchrun")


def test_slurm_variables_without_torchrun():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS_PER_NODE": "3",
           "SLURM_JOB_ID": "1234", "SLURM_JOB_NODELIST": "gpu07", "MASTER_ADDR": "gpu07"}
    place = rank_environment(env)
    assert (place.rank, place.world_size, place.local_rank, place.local_world_size) == (5, 6, 2, 3)
    assert place.master_port == 29500 + 1234 and place.source == "slurm"
    assert rank_environment({k: v for k, v in env.items() if k != "MASTER_ADDR"}).master_addr == "gpu07"


def test_slurm_tasks_per_node_in_its_compact_forms():
    base = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "MASTER_ADDR": "n1", "MASTER_PORT": "1"}
    assert rank_environment(base | {"SLURM_NTASKS_PER_NODE": "4(x2)"}).local_world_size == 4
    assert rank_environment(base | {"SLURM_TASKS_PER_NODE": "5,3"}).local_world_size == 5
    assert rank_environment(base).local_world_size == 1


def test_no_launcher_is_a_world_of_one():
    place = rank_environment({})
    assert (place.rank, place.world_size, place.source) == (0, 1, "single") and place.master_port > 0


@pytest.mark.parametrize("env, message", [
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "outside a world of 2"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' should be a whole number"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR is not set"),
])
def test_inconsistent_variables_are_explained(env, message):
    with pytest.raises(ValueError, match=message):
        rank_environment(env)


@pytest.mark.parametrize("target, message", [
    ("course_lib.examples.ddp", "must look like package.module:function"),
    ("course_lib.no_such_module:main", "cannot import"),
    ("course_lib.examples.ddp:nope", "has no function 'nope'"),
])
def test_bad_targets_are_explained(target, message, capsys):
    with pytest.raises(ValueError, match=message):
        load_target(target)
    assert main([target]) == 2 and message.split()[0] in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_srun_style_tasks_train_together_and_agree_with_run_ranks():
    from course_lib.examples import ddp
    from course_lib.real import run_ranks

    port = free_port()
    tasks = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env.update(SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID=str(rank),
                   SLURM_NTASKS_PER_NODE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
        command = [sys.executable, "-m", "course_lib.real.launch.torchrun", "course_lib.examples.ddp:main",
                   "--backend", "gloo"]
        tasks.append(subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    for task in tasks:
        out, err = task.communicate(timeout=120)
        assert task.returncode == 0, err[-3000:]
        outputs.append(out)
    assert "SUMMARY" not in outputs[1]
    assert parse_summary(outputs[0]) == run_ranks(ddp.main, 2)[0]


@pytest.mark.slow
def test_a_failing_rank_fails_the_job_with_its_rank_named():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "course_lib.real.launch.torchrun",
               "course_lib.examples.single_device:main", "zero"]
    job = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert job.returncode == 1
    assert "[rank 0] failed" in job.stderr and "epochs must be a whole number" in job.stderr
