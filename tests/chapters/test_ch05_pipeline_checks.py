"""Chapter 05's check functions on hand-made schedules and traffic, without running any student code.

The judging half of every check is plain Python over ops and recorded events: each rule is tested here
on a right answer and on the mistake it exists to catch.
"""

from pathlib import Path

import pytest
import torch

from course_lib.grading.attempt.judge_runner import CaseAnswer
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch05_pipeline import visible as checks
from course_lib.grading.checks.ch05_pipeline.judge import expected_sends
from course_lib.grading.checks.ch05_pipeline.ranks import (
    MISMATCHED_OPS,
    StageOutcome,
    StageRun,
    course_ops,
    gradient_problems,
    mismatch_problems,
    traffic_problems,
)
from course_lib.models import make_layer_stack, split_into_stages
from course_lib.real.chapter_runs.stage_timing import stage_timeline, time_stage


def ops_of(kind, stages, microbatches):
    return [[list(op) for op in stage] for stage in course_ops(kind, stages, microbatches)]


PAIRS = [(1, 1), (1, 4), (2, 1), (3, 2), (4, 8), (8, 3), (5, 12)]


@pytest.mark.parametrize("stages, microbatches", PAIRS)
def test_the_course_1f1b_passes_every_aspect(stages, microbatches):
    ops = ops_of("1f1b", stages, microbatches)
    for aspect in checks.ASPECTS:
        assert checks.ASPECTS[aspect](stages, microbatches, ops) == [], aspect


def test_gpipe_is_valid_but_holds_too_much_and_differs_in_makespan_with_hops():
    ops = ops_of("gpipe", 4, 8)
    assert checks.dependency_problems(4, 8, ops) == []
    assert "it holds the activations of 8 micro-batches at once" in checks.memory_problems(4, 8, ops)[0]
    assert "simulated makespan" in checks.makespan_problems(4, 8, ops)[0]


def test_a_circular_wait_is_reported_as_a_broken_dependency():
    stages = [[["F", 0], ["B", 0], ["F", 1], ["B", 1]], [["F", 1], ["F", 0], ["B", 0], ["B", 1]]]
    assert "dependency is broken" in checks.dependency_problems(2, 2, stages)[0]


@pytest.mark.parametrize("ops, expected", [
    ([[["F", 0]]], "exactly once"),
    ([[["B", 0], ["F", 0]]], "comes before"),
    ([[["F", 0], ["X", 0]]], "is not an op"),
    ([[["F", 0], ["B", 0]], [["F", 0], ["B", 0]]], "one list of ops per stage"),
    ([["('F', 0.5)", ["B", 0]]], "is not an op"),
])
def test_malformed_schedules_say_what_is_wrong(ops, expected):
    assert expected in checks.structure_problems(1, 1, ops)[0]


def test_memory_counts_activations_held_after_a_right_warmup():
    # stage 0 of 2: warm-up of 2, then two forwards in a row: 3 held, 1F1B allows 2
    ops = [[["F", 0], ["F", 1], ["B", 0], ["F", 2], ["F", 3], ["B", 1], ["B", 2], ["B", 3]],
           ops_of("1f1b", 2, 4)[1]]
    assert "holds the activations of 3" in checks.memory_problems(2, 4, ops)[0]


def test_a_schedule_without_warmup_keeps_within_memory_but_not_the_makespan():
    # F0 B0 F1 B1 ... on every stage: one micro-batch held, but the stages wait on each other
    ops = [[op for m in range(8) for op in (["F", m], ["B", m])] for _ in range(4)]
    assert checks.memory_problems(4, 8, ops) == []
    assert "simulated makespan" in checks.makespan_problems(4, 8, ops)[0]


def test_the_memory_message_says_what_the_stage_held_never_the_bound_nor_the_warmup_count():
    """The 12-07 review (ch05 #3): the message stated min(stages - s, microbatches), part 1's answer."""
    ops = ops_of("gpipe", 3, 5)
    message = " ".join(checks.memory_problems(3, 5, ops))
    assert "stage 0: after its op 4 (('F', 4)) it holds the activations of 5 micro-batches at once" in message
    assert "([0, 1, 2, 3, 4]), more than 1F1B's stage 0 ever does" in message
    for giveaway in ("min(", "stages - s", "warm", "at most"):
        assert giveaway not in message, giveaway


def test_the_visible_module_states_no_bound_per_stage():
    """The module is on the student's page: its text may not hold the per-stage bound part 1 asks for."""
    text = Path(checks.__file__).read_text()
    for giveaway in ("min(stages - s", "stages - s,", "stages - stage"):
        assert giveaway not in text, giveaway


def test_a_refused_call_and_other_errors_are_reported_per_pair():
    answers = (CaseAnswer(raised="course_lib.grading.attempt.refused_code.RefusedCodeError: one_f_one_b ran "
                                 "pipeline_schedule from course_lib, which this exercise refuses: ..."),
               CaseAnswer(raised="KeyError: 3"))
    problems = checks.schedule_problems(RankRun(1, per_rank=(answers,), cases=((2, 2), (3, 1))), "memory")
    assert problems[0].startswith("one_f_one_b ran pipeline_schedule from course_lib, which this exercise")
    assert "one_f_one_b(3, 1) raised KeyError" in problems[1]


def test_the_refusal_names_torch_pipelining_and_no_check_swaps_course_code():
    assert checks.REFUSAL.modules == ("torch.distributed.pipelining",)
    assert not hasattr(checks, "refusing_course_generator")


def _run(kind, stages, microbatches, events=None, grads=None, loss=1.0):
    ops = course_ops(kind, stages, microbatches)
    outcomes = tuple(StageOutcome(loss=loss if s == stages - 1 else None, grads=grads[s] if grads else [],
                                  events=events[s] if events else []) for s in range(stages))
    return StageRun(stages, outcomes, kind=kind, microbatches=microbatches, ops=ops)


def _ideal_events(ops, stages):
    nbytes = 3 * 16 * 4
    events = []
    for stage in range(stages):
        sends = [["isend", peer, nbytes] for peer in expected_sends(ops[stage], stage, stages)]
        receives = [["recv", peer, nbytes] for peer in expected_sends(ops[stage], stage, stages)]
        events.append(receives + sends)
    return events


def test_traffic_in_op_order_passes_and_gpipe_order_under_1f1b_lists_fails():
    ops = course_ops("1f1b", 3, 4)
    assert traffic_problems(_run("1f1b", 3, 4, _ideal_events(ops, 3))) == []
    gpipe_events = _ideal_events(course_ops("gpipe", 3, 4), 3)
    assert "in that order" in " ".join(traffic_problems(_run("1f1b", 3, 4, gpipe_events)))


def test_traffic_names_collectives_and_wrong_sizes():
    events = _ideal_events(course_ops("gpipe", 2, 2), 2)
    events[0].append(["all_reduce", None, 64])
    events[1][0][2] = 8
    problems = " ".join(traffic_problems(_run("gpipe", 2, 2, events)))
    assert "called all_reduce" in problems and "messages of [8, 192] bytes" in problems


def test_gradients_are_compared_with_single_process_training():
    from course_lib.grading.checks.ch05_pipeline.judge import reference

    loss, grads = reference(0, 2)
    per_stage = [grads[:4], grads[4:]]   # 4 blocks of (weight, bias) cut into 2 stages
    assert gradient_problems(_run("gpipe", 2, 2, grads=per_stage, loss=loss)) == []
    doubled = [[2 * g for g in stage] for stage in per_stage]
    problems = gradient_problems(_run("gpipe", 2, 2, grads=doubled, loss=2 * loss))
    assert "the last stage returned loss" in problems[0] and "yours / expected = 2" in problems[1]


def test_mismatched_lists_must_not_finish():
    finished = _run("gpipe", 2, 2)
    assert "still finished" in mismatch_problems(finished, finished)[0]
    stopped = StageRun(2, error="hung", kind="mismatched", microbatches=2, ops=MISMATCHED_OPS)
    assert mismatch_problems(finished, stopped) == []
    broken = StageRun(2, error="NotImplementedError", kind="gpipe", microbatches=2, ops=[])
    assert "must run" in mismatch_problems(broken, stopped)[0]


def test_split_into_stages_keeps_every_block_once_and_refuses_too_many_stages():
    model = make_layer_stack(0)
    parts = split_into_stages(model, 3)
    assert [len(p) for p in parts] == [1, 1, 2]
    assert [id(b) for p in parts for b in p] == [id(b) for b in model]
    with pytest.raises(ValueError, match="use 1 to 4 stages"):
        split_into_stages(model, 5)


def test_time_stage_records_each_forward_and_backward_and_labels_them_in_op_order():
    module = make_layer_stack(0)
    with time_stage(module) as spans:
        for _ in range(2):
            module(torch.randn(2, 16)).sum().backward()
    assert [phase for phase, _, _ in spans] == ["F", "B", "F", "B"]
    assert all(start <= end for _, start, end in spans)
    timeline = stage_timeline([spans], [[("F", 0), ("B", 0), ("F", 1), ("B", 1)]])
    assert [event.label for event in timeline.lanes[0]] == ["F0", "B0", "F1", "B1"]
    assert not module._forward_hooks and not module._forward_pre_hooks
