"""Every strategy example: through run_ranks (as a notebook runs it) and under torchrun (as Slurm does).

The MLP strategies must all reach the single-device loss; TP and FSDP must match their one-device
reference; and a torchrun job must print the same SUMMARY as run_ranks with the same world size.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_lib.examples import EXAMPLES
from course_lib.examples._common import parse_summary, significant
from course_lib.real import RankFailure, run_ranks

REPO = Path(__file__).resolve().parents[2]
MLP_STRATEGIES = ("single_device", "ddp", "naive_model_parallel", "pipeline")
REQUIRED_KEYS = {"strategy", "world_size", "backend", "steps", "final_loss"}
TIMING_KEYS = {"results", "peak_busbw_GBps"}  # bus_bandwidth's measurements differ run to run


def example_main(name: str):
    return importlib.import_module(f"course_lib.examples.{name}").main


@pytest.fixture(scope="module")
def single_device_loss() -> float:
    return run_ranks(example_main("single_device"), 1)[0]["final_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MLP_STRATEGIES[1:])
def test_every_mlp_strategy_reaches_the_single_device_loss(name, single_device_loss, capsys):
    summaries = run_ranks(example_main(name), 2)
    assert summaries[0] == summaries[1], "main must return the same summary on every rank"
    summary = summaries[0]
    assert REQUIRED_KEYS <= set(summary) and summary["strategy"] == name and summary["world_size"] == 2
    assert summary["steps"] == 32
    assert summary["final_loss"] == pytest.approx(single_device_loss, rel=1e-5)
    printed = capsys.readouterr().out
    assert parse_summary(printed) == summary
    assert "[rank 1] SUMMARY" not in printed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tensor_parallel", "fsdp"])
def test_sharded_block_strategies_match_the_unsharded_reference(name):
    summary = run_ranks(example_main(name), 2)[0]
    assert summary["matches_reference"] is True
    assert summary["final_loss"] == pytest.approx(summary["reference_loss"], rel=1e-5)
    assert summary["parameters_per_rank"] < 3280  # the block's full parameter count: each rank holds less


def test_bus_bandwidth_reports_a_row_per_message_size():
    summary = run_ranks(example_main("bus_bandwidth"), 2, 64 << 10, 2)[0]
    assert [row["bytes"] for row in summary["results"]] == [4 << 10, 16 << 10, 64 << 10]
    for row in summary["results"]:
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"], rel=1e-3)  # 2(n-1)/n = 1 for n = 2
        assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9, rel=1e-2)
    assert summary["final_loss"] is None and summary["steps"] == 3


def test_impossible_world_sizes_are_refused_with_a_reason():
    with pytest.raises(RankFailure, match="cannot be split evenly over 3 ranks"):
        run_ranks(example_main("ddp"), 3)
    with pytest.raises(RankFailure, match="epochs must be a whole number"):
        run_ranks(example_main("single_device"), 1, "many")


def test_significant_digits_make_printouts_comparable():
    assert significant(1.0738661234) == 1.073866 and significant(-0.000123456789) == -0.0001234568
    assert significant(None) is None and significant(0.0) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_runs_under_torchrun_and_agrees_with_run_ranks(name):
    environment = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    environment.pop("RANK", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--monitor-interval", "0.1",
               "-m", "course_lib.real.launch.torchrun", f"course_lib.examples.{name}:main"]
    job = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment, cwd=REPO)
    assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-3000:]
    from_torchrun = parse_summary(job.stdout)
    from_notebook = run_ranks(example_main(name), 2)[0]
    assert REQUIRED_KEYS <= set(from_torchrun)
    for summary in (from_torchrun, from_notebook):
        for key in TIMING_KEYS:
            summary.pop(key, None)
    assert from_torchrun == from_notebook
