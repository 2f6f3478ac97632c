"""run_preempted fails real ranks as clusters do, at exactly the planned point, and reports what they did.

SIGKILL at a step kills every rank there; SIGTERM reaches each rank at its own step and a handler runs at
once; a file cut at N bytes (RLIMIT_FSIZE) and a kill before the n-th file-name change (an audit hook)
strike inside a save; steps, notes and file changes come back from ranks that never returned; a rank that
fails before the plan strikes, or a hang, is an error; nothing outlives the call.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
import torch.distributed as dist

from course_lib.real.cluster.preemption import Preemption, run_preempted, step_reached


def _saves(rank, world_size, folder, steps, every=3):
    """Steps with an all-reduce each; a save (temporary file, then a rename) every ``every`` steps;
    SIGTERM (when caught) stops the run after the step, agreed on by all ranks."""
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    for step in range(1, steps + 1):
        dist.all_reduce(torch.ones(1))
        step_reached(step, f"note {step}")
        flag = torch.tensor([float(bool(stop))])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if step % every == 0 or flag.item():
            temporary = os.path.join(folder, f"rank{rank}.tmp")
            torch.save({"step": step, "padding": torch.zeros(4096)}, temporary)
            os.replace(temporary, os.path.join(folder, f"rank{rank}.pt"))
        if flag.item():
            return {"stopped": step}
    return {"finished": steps}


def _saved_steps(folder, world_size):
    return [torch.load(os.path.join(folder, f"rank{rank}.pt"))["step"] for rank in range(world_size)]


def test_an_unplanned_run_reports_every_step_and_every_rename(tmp_path):
    run = run_preempted(_saves, 2, str(tmp_path), 7, folder=tmp_path, timeout=60)
    assert run.error is None and not run.struck and run.values == {0: {"finished": 7}, 1: {"finished": 7}}
    assert run.steps[1] == [(step, f"note {step}") for step in range(1, 8)]
    renames = sorted((c.rank, c.step, c.path) for c in run.changes if c.event == "os.rename")
    assert renames == [(rank, step, f"rank{rank}.tmp") for rank in (0, 1) for step in (3, 6)]


def test_sigkill_at_a_step_kills_every_rank_there(tmp_path):
    run = run_preempted(_saves, 2, str(tmp_path), 9, preemption=Preemption("sigkill", 5), folder=tmp_path,
                        timeout=60)
    assert run.struck and run.error is None and not run.values
    assert max(run.last_step(0), run.last_step(1)) == 5 and min(run.last_step(0), run.last_step(1)) >= 4
    assert all(outcome == "killed by SIGKILL (the planned preemption)" for outcome in run.outcomes.values())
    assert _saved_steps(tmp_path, 2) == [3, 3]


def test_sigterm_reaches_each_rank_at_its_step_and_its_handler_runs_at_once(tmp_path):
    plan = Preemption("sigterm", 4, late_ranks=(1,), grace_s=10)
    run = run_preempted(_saves, 2, str(tmp_path), 9, preemption=plan, folder=tmp_path, timeout=60)
    assert run.struck and not run.grace_expired and run.values == {0: {"stopped": 4}, 1: {"stopped": 4}}
    assert _saved_steps(tmp_path, 2) == [4, 4]


def test_sigterm_without_a_handler_ends_the_ranks(tmp_path):
    def ignores_nothing(rank, world_size, folder):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for step in range(1, 6):
            dist.all_reduce(torch.ones(1))
            step_reached(step)
        return "finished"

    run = run_preempted(ignores_nothing, 2, str(tmp_path), preemption=Preemption("sigterm", 2, grace_s=5),
                        timeout=60)
    assert run.struck and not run.values and "SIGTERM" in run.outcomes[0]


def test_a_file_cut_at_n_bytes_strikes_inside_the_save(tmp_path):
    plan = Preemption("file_bytes", 6, amount=1000)
    run = run_preempted(_saves, 2, str(tmp_path), 9, preemption=plan, folder=tmp_path, timeout=60)
    assert run.struck and run.error is None
    cut = [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    assert cut and all(os.path.getsize(tmp_path / name) <= 1000 for name in cut)
    assert "SIGXFSZ" in " ".join(run.outcomes.values())
    assert _saved_steps(tmp_path, 2) == [3, 3]        # the renames of step 6 never happened


def test_a_kill_before_the_nth_change_leaves_the_change_undone(tmp_path):
    plan = Preemption("file_change", 3, amount=1, rank=1, settle_s=1.0)
    run = run_preempted(_saves, 2, str(tmp_path), 9, preemption=plan, folder=tmp_path, timeout=60)
    assert run.struck and run.outcomes[1] == "killed by SIGKILL (the planned preemption)"
    assert (tmp_path / "rank1.tmp").exists() and not (tmp_path / "rank1.pt").exists()
    assert torch.load(tmp_path / "rank0.pt")["step"] == 3    # rank 0 went on and renamed its own


def test_a_torn_kill_after_the_nth_change_leaves_its_file_made_and_empty(tmp_path):
    plan = Preemption("file_change", 3, amount=1, rank=1, settle_s=1.0, torn=True)
    run = run_preempted(_saves, 2, str(tmp_path), 9, preemption=plan, folder=tmp_path, timeout=60)
    # torch.save opens its file below Python, unaudited: rank 1's first change is step 3's rename, and
    # its next write, step 6's save, dies at its first byte
    assert run.struck and run.error is None and "SIGXFSZ" in run.outcomes[1]
    assert (tmp_path / "rank1.tmp").stat().st_size == 0 and _saved_steps(tmp_path, 2)[1] == 3
    assert "just after its change number 1" in plan.how()


def test_a_failure_before_the_plan_struck_is_an_error_and_a_hang_is_reported(tmp_path):
    def fails(rank, world_size):
        step_reached(1)
        raise ValueError("before the kill")

    run = run_preempted(fails, 2, preemption=Preemption("sigkill", 5), timeout=60)
    assert not run.struck and "failed before the planned preemption" in run.error
    assert "ValueError" in run.error
    assert "ValueError" in run.tracebacks.get(0, "") + run.tracebacks.get(1, "")

    def hangs(rank, world_size):
        if rank == 0:
            dist.all_reduce(torch.ones(1))
        return rank

    hung = run_preempted(hangs, 2, timeout=3)
    assert "did not finish within timeout=3 s" in hung.error and "dist.all_reduce" in hung.error


def test_a_plan_is_checked_and_described():
    with pytest.raises(ValueError, match="kind must be one of"):
        Preemption("sigint", 3)
    with pytest.raises(ValueError, match="amount >= 1"):
        Preemption("file_bytes", 3)
    assert "rank 1" in Preemption("sigterm", 3, late_ranks=(1,)).describe()
    assert "change number 2" in Preemption("file_change", 3, amount=2).describe()


def test_step_reached_outside_a_preempted_run_does_nothing():
    step_reached(3, "a notebook's own loop")
