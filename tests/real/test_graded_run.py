"""A graded run measures briefly: `make grade`'s kernel says so (GRADED_RUN_ENV), the ranks it starts hear
it, the timing harness then times each block GRADED_REPETITIONS times in smaller blocks, and no graded
cell or hidden check reads a measurement, so a grade never depends on it."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import nbformat
import pytest

from course_lib.grading.sandbox import kernel
from course_lib.grading.sandbox.policy import SandboxPolicy
from course_lib.real import run_ranks
from course_lib.real.measure import timing_harness
from course_lib.real.plumbing.graded_run import GRADED_RUN_ENV, graded_run

ROOT = Path(__file__).resolve().parents[2]
# What measures on this machine (calibration.measure too, by its module): a graded cell or a hidden
# check that used one would grade a timing.
MEASURING = {"calibrate", "measure_all_reduce", "measure_ddp_step", "compare_all_reduce",
             "bucket_sweep", "interleaved_times", "interleaved_lanes", "interleaved_medians",
             "per_call_medians", "compare_fed_back"}
MEASURING_MODULES = {f"course_lib.real.{name}" for name in ("calibration", "timing_harness", "predictions",
                                                             "fed_back", "bucket_sweep", "ddp_step")}


def _rounds(rank, world_size):
    return len(timing_harness.interleaved_times([lambda: None], 9, summary=list)[0]), graded_run()


def _lanes(rank, world_size):
    """The harness's medians and every rank's own lanes, and how many of this rank's rounds were timed."""
    rounds = []
    medians, lanes = timing_harness.interleaved_lanes([lambda: None, lambda: rounds.append(1)], 9)
    return len(medians), [len(lane) for lane in lanes], len(rounds) - timing_harness.WARM_UP


def test_a_graded_run_times_each_block_fewer_times_in_smaller_blocks(monkeypatch):
    monkeypatch.delenv(GRADED_RUN_ENV, raising=False)
    assert timing_harness.repetitions_here(9) == 9
    assert timing_harness.back_to_back(lambda: None, 1 << 18)[1] == timing_harness.MAX_CALLS
    assert run_ranks(_rounds, 2) == [(9, False)] * 2
    assert run_ranks(_lanes, 2) == [(2, [2, 2], 9)] * 2      # two operations, two ranks' lanes
    monkeypatch.setenv(GRADED_RUN_ENV, "1")
    assert timing_harness.repetitions_here(9) == timing_harness.GRADED_REPETITIONS == 3
    assert timing_harness.repetitions_here(2) == 2
    calls = timing_harness.GRADED_BLOCK_BYTES // (1 << 18)
    assert timing_harness.back_to_back(lambda: None, 1 << 18)[1] == calls < timing_harness.MAX_CALLS
    assert run_ranks(_rounds, 2) == [(3, True)] * 2   # the ranks a graded lesson starts hear it too
    assert run_ranks(_lanes, 2) == [(2, [2, 2], 3)] * 2


def test_the_grading_kernel_announces_a_graded_run(monkeypatch, tmp_path):
    monkeypatch.delenv(GRADED_RUN_ENV, raising=False)
    policy = tmp_path / "policy.json"
    policy.write_text(SandboxPolicy(home=str(tmp_path / "home")).to_json())
    connection = tmp_path / "connection.json"
    connection.write_text(json.dumps({}))
    started = {}
    monkeypatch.setattr(SandboxPolicy, "enter", lambda self: [])
    monkeypatch.setattr(kernel.os, "dup2", lambda *a: None)
    monkeypatch.setattr(kernel, "exec_python", lambda argv: started.update(argv=argv,
                                                                            graded=graded_run()))
    try:
        kernel.main([str(policy), "-f", str(connection)])
    finally:
        os.environ.pop(GRADED_RUN_ENV, None)
    assert started == {"argv": started["argv"], "graded": True}
    assert "ipykernel_launcher" in started["argv"]


def _names(source: str) -> set[str]:
    tree = ast.parse(source)
    called = {node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
              for node in ast.walk(tree) if isinstance(node, ast.Call)}
    imported = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    return called | imported


@pytest.mark.parametrize("notebook", sorted((ROOT / "solutions").glob("*/*.ipynb")), ids=lambda p: p.stem)
def test_no_graded_cell_reads_a_measurement(notebook):
    for cell in nbformat.read(notebook, as_version=4).cells:
        marks = cell.metadata.get("nbgrader") or {}
        if marks.get("grade") and not marks.get("solution"):
            used = _names(cell.source)
            found = used & (MEASURING | MEASURING_MODULES)
            assert not found, (marks["grade_id"], found)


@pytest.mark.parametrize("module", sorted([*(ROOT / "instructor" / "checks").glob("*.py"),
                                           *(ROOT / "course_lib" / "grading" / "checks").rglob("*.py")]),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hidden_check_reads_a_measurement(module):
    used = _names(module.read_text())
    assert not used & MEASURING_MODULES, used & MEASURING_MODULES
    assert not used & MEASURING, used & MEASURING
