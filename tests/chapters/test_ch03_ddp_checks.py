"""The judging half of chapter 03's DDP checks on made-up runs, and the lesson's helpers."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

from course_lib.examples.one_process_data_parallel import one_process_data_parallel_step
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.checks.ch03_ddp.buckets import (
    bucket_problems,
    early_overlap_problems,
    expected_bucket_bytes,
)
from course_lib.grading.checks.ch03_ddp.judge import (
    _close,
    overlap_problems,
    silence_problems,
    single_process,
    step_timeline_text,
    unique_trainable_bytes,
    volume_problems,
)
from course_lib.grading.checks.ch03_ddp.own_ring import own_ring_all_reduce
from course_lib.grading.checks.ch03_ddp.ranks import (
    MODELS,
    DDPCase,
    TrainingOutcome,
    build_model,
    global_batches,
    run_student,
)

CASE = DDPCase("course MLP", 25.0, steps=2)


def ddp_run(world_size: int, cases: list, seed: int, outcomes=(), error: str | None = None) -> RankRun:
    """A made-up DDP run; ``outcomes`` are [case][rank], the order the judges read them in."""
    return RankRun(world_size, per_rank=tuple(zip(*outcomes, strict=True)), error=error, cases=tuple(cases),
                   seed=seed)


def step_outcome(events, backward_end=2.0):
    """One rank's outcome of two steps: forward spans at 0 and 10, backward ending ``backward_end`` later."""
    spans = [("construct", -1.0, -0.5), ("forward", 0.0, 1.0), ("backward", 1.0, backward_end),
             ("forward", 10.0, 11.0), ("backward", 11.0, 10 + backward_end)]
    return TrainingOutcome(grads=[], final={}, ready=[], events=events, spans=spans)


def test_an_all_reduce_during_the_backward_overlaps_and_one_after_it_does_not():
    inside = [("all_reduce", 8, 1.5, 3.0), ("all_reduce", 8, 11.5, 13.0)]
    after = [("all_reduce", 8, 2.5, 3.0), ("all_reduce", 8, 12.5, 13.0)]
    assert overlap_problems(ddp_run(2, [CASE], 1, [[step_outcome(inside)] * 2])) == []
    problems = overlap_problems(ddp_run(2, [CASE], 1, [[step_outcome(after)] * 2]))
    assert len(problems) == 2 and "500.00 ms after loss.backward() returned" in problems[0]
    silent = overlap_problems(ddp_run(2, [CASE], 1, [[step_outcome([])] * 2]))
    assert "no communication recorded" in silent[0]


def test_a_late_all_reduce_is_drawn_against_the_backward_in_the_failure():
    after = [("all_reduce", 8, 2.5, 3.0), ("all_reduce", 8, 12.5, 13.0)]
    problems = overlap_problems(ddp_run(2, [CASE], 1, [[step_outcome(after)] * 2]))
    assert "your recorded step:" in problems[0] and "your recorded step:" not in problems[1]
    forward, backward, reduce = problems[0].split("your recorded step:\n")[1].splitlines()
    assert "0.00 -  1000.00 ms" in forward and "1000.00 -  2000.00 ms" in backward
    assert "2500.00 -  3000.00 ms" in reduce and reduce.endswith("8 bytes")
    bars = [line.split("|")[1] for line in (forward, backward, reduce)]
    # 3 s drawn in 48 characters: the backward's bar ends where the all-reduce's (later) bar has not begun
    assert bars[1].rstrip().count("#") == 16 and bars[2].index("#") >= len(bars[1].rstrip())


def test_a_long_step_lists_only_the_first_communication_calls():
    many = [("all_reduce", 4, 2.0 + i / 100, 2.0 + i / 100) for i in range(30)]
    text = step_timeline_text(step_outcome(many), 0)
    assert len(text.splitlines()) == 2 + 12 + 1 and "18 more communication calls" in text


def test_the_all_reduced_volume_must_be_the_trainable_bytes_once():
    case = DDPCase("frozen and tied", 25.0, steps=2)
    model = build_model("frozen and tied", 1)
    expected = unique_trainable_bytes(model)
    assert expected == 4 * (6 * 6 + 6 + 6 + 6 * 2 + 2)   # first (tied with second's weight), biases, out
    right = [("all_reduce", expected, 1.5, 2.5), ("all_reduce", expected, 11.5, 12.5)]
    twice = [("all_reduce", expected + 144, 1.5, 2.5), ("all_reduce", expected + 144, 11.5, 12.5)]
    assert volume_problems(ddp_run(2, [case], 1, [[step_outcome(right)] * 2])) == []
    problems = volume_problems(ddp_run(2, [case], 1, [[step_outcome(twice)] * 2]))
    assert "a tied parameter counts once" in problems[0]


def test_one_rank_must_send_nothing_and_errors_are_reported_as_they_came():
    assert silence_problems(ddp_run(1, [CASE], 1, [[step_outcome([])]])) == []
    talking = ddp_run(1, [CASE], 1, [[step_outcome([("broadcast", 8, 0, 0)])]])
    assert "broadcast" in silence_problems(talking)[0]
    broken = ddp_run(2, [CASE], 1, error="DDP raised on 2 ranks: boom")
    assert overlap_problems(broken) == volume_problems(broken) == [broken.error]


def test_a_missing_gradient_matches_only_nothing_or_zeros():
    assert _close(None, None) and _close(torch.zeros(3), None)
    assert not _close(torch.ones(3), None) and not _close(None, torch.zeros(3))
    assert not _close(torch.zeros(2), torch.zeros(3))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_and_batches_are_reproducible(name):
    first, again = build_model(name, 5), build_model(name, 5)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values(),
                                                 strict=True))
    inputs, targets = global_batches(name, 5, 3, 1)[0]
    assert len(inputs) == len(targets) == 12
    assert first(inputs).shape == targets.shape


def test_single_process_reference_leaves_the_unused_layer_without_gradient():
    grads, final = single_process(DDPCase("unused layer", 25.0, steps=2), 3, 2)
    assert grads[0]["spare.weight"] is None and grads[0]["hidden.weight"] is not None
    assert torch.equal(final["spare.weight"], build_model("unused layer", 3).spare.weight)


def test_the_one_process_data_parallel_step_equals_a_step_on_the_whole_batch():
    model, inputs, targets = nn.Linear(6, 2), torch.randn(8, 6), torch.randn(8, 2)
    reference = copy.deepcopy(model)
    report = one_process_data_parallel_step(model, inputs, targets, replicas=2, lr=0.1)
    nn.functional.mse_loss(reference(inputs), targets).backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(model.parameters(), reference.parameters(),
                                                               strict=True))
    assert report["threads"] == 2 and len(report["pids"]) == 1
    assert report["bytes_copied"] == 2 * 4 * (6 * 2 + 2)


def test_without_a_chapter_02_notebook_torchs_all_reduce_stands_in(tmp_path):
    import torch.distributed as dist

    function, sentence = own_ring_all_reduce(tmp_path / "missing.ipynb")
    assert function is dist.all_reduce and "dist.all_reduce" in sentence


DYING_DDP = '''
import os

import torch


class DDP(torch.nn.Module):
    def __init__(self, module, bucket_size_mb=25.0):
        super().__init__()
        os._exit(3)
'''


@pytest.mark.slow
def test_a_rank_that_dies_is_reported_as_dead_not_as_raising():
    run = run_student(StudentFunction("DDP", sources=[DYING_DDP]), 2, [CASE], 1, timeout=20)
    assert run.error.startswith("a rank running DDP on 2 ranks died without a Python error")
    assert "exited with code 3" in run.error


def test_the_contracts_buckets_go_in_reverse_parameter_order_up_to_the_limit():
    mlp = build_model("course MLP", 1)              # 6->4->2: weights 96 and 32 bytes, biases 16 and 8
    assert expected_bucket_bytes(mlp, 25.0) == [152]
    assert expected_bucket_bytes(mlp, None) == [8, 32, 16, 96]
    assert expected_bucket_bytes(mlp, 0.00005) == [40, 16, 96]      # 52.4 bytes: 8 + 32, then 16, then 96
    tied = build_model("frozen and tied", 1)       # a tied weight once, the frozen layer never
    assert sum(expected_bucket_bytes(tied, None)) == unique_trainable_bytes(tied)


def ready_step_outcome(events, ready, backward_end=2.0):
    """step_outcome with the times each step's gradients were ready."""
    return dataclasses.replace(step_outcome(events, backward_end), ready=ready)


BUCKETED = DDPCase("course MLP", 0.00005, steps=2)


def test_each_bucket_must_go_out_as_one_all_reduce_of_its_bytes():
    right = [("all_reduce", n, 1.5, 2.5) for n in (40, 16, 96)] + [("all_reduce", n, 11.5, 12.5)
                                                                     for n in (96, 16, 40)]
    outcome = ready_step_outcome(right, [[1.2, 1.9]] * 2)
    assert bucket_problems(ddp_run(2, [BUCKETED], 1, [[outcome] * 2])) == []
    flat = ready_step_outcome([("all_reduce", 152, 1.5, 2.5), ("all_reduce", 152, 11.5, 12.5)], [[1.2]] * 2)
    problems = bucket_problems(ddp_run(2, [BUCKETED], 1, [[flat] * 2]))
    assert len(problems) == 2 and "1 all-reduce(s) of [152] bytes" in problems[0]
    assert "make 3 bucket(s) of [40, 16, 96] bytes" in problems[0]


def test_with_several_buckets_the_first_all_reduce_must_precede_the_last_ready_gradient():
    early = [("all_reduce", 40, 1.3, 2.5), ("all_reduce", 40, 11.3, 12.5)]
    ready = [[1.2, 1.25, 1.9], [11.2, 11.25, 11.9]]
    assert early_overlap_problems(ddp_run(2, [BUCKETED], 1, [[ready_step_outcome(early, ready)] * 2])) == []
    late = [("all_reduce", 152, 1.95, 2.5), ("all_reduce", 152, 11.95, 12.5)]
    problems = early_overlap_problems(ddp_run(2, [BUCKETED], 1, [[ready_step_outcome(late, ready)] * 2]))
    assert len(problems) == 2 and "started 50.00 ms after the step's last gradient was ready" in problems[0]
    assert "your recorded step:" in problems[0] and "your recorded step:" not in problems[1]
    one_bucket = DDPCase("course MLP", 25.0, steps=2)     # nothing can go out before the last gradient
    assert early_overlap_problems(ddp_run(2, [one_bucket], 1, [[ready_step_outcome(late, ready)] * 2])) == []
    broken = ddp_run(2, [BUCKETED], 1, error="DDP raised on 2 ranks: boom")
    assert bucket_problems(broken) == early_overlap_problems(broken) == [broken.error]
