"""The judging half of chapter 06's vocabulary-parallel loss checks, on made-up outcomes."""

from dataclasses import replace

import pytest
import torch
from torch import nn

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch06_tensor_parallel.visible import REFUSAL as LAYERS_REFUSAL
from course_lib.grading.checks.ch06_vocab_loss import visible as vl
from course_lib.grading.checks.ch06_vocab_loss.ranks import LossOutcome

SEED = 5


def test_slices_are_consecutive_cover_the_vocabulary_and_may_be_uneven():
    assert vl.LossCase(4, 11).slices(3) == [(0, 4), (4, 8), (8, 11)]
    assert vl.LossCase(4, 11, splits=(1, 7, 3)).slices(3) == [(0, 1), (1, 8), (8, 11)]


def _outcomes(case, world_size, seed, scale_grad=1.0, events=None):
    """What a right loss returns on every rank (the unsharded reference, sliced), optionally spoiled."""
    loss, grad = vl.reference(case, seed)
    events = events or {"forward": [("all_reduce", case.tokens * 4)] * 3, "backward": []}
    return [LossOutcome(loss=loss, grad=scale_grad * grad[:, start:stop], **events)
            for start, stop in case.slices(world_size)]


def _run(cases, world_size, **spoil):
    per_rank = list(zip(*[_outcomes(case, world_size, SEED + i, **spoil) for i, case in enumerate(cases)],
                        strict=True))
    return RankRun(world_size, tuple(per_rank), cases=tuple(cases), seed=SEED)


def test_a_right_loss_passes_and_a_gradient_not_divided_by_the_tokens_fails():
    cases = [vl.LossCase(6, 11), vl.LossCase(6, 29)]
    assert vl.value_problems(_run(cases, 3)) == vl.gradient_problems(_run(cases, 3)) == []
    problems = vl.gradient_problems(_run(cases, 3, scale_grad=6.0))
    assert problems and "its norm is 6x the expected one" in problems[0]


def test_the_reference_is_f_cross_entropy_in_float64():
    case = vl.LossCase(3, 7, "float32", offset=120.0)
    logits, target = vl.case_tensors(case, SEED)
    loss, grad = vl.reference(case, SEED)
    assert loss == pytest.approx(nn.functional.cross_entropy(logits.double(), target).item())
    assert torch.isinf(logits.exp()).all() and grad.shape == logits.shape    # every exp overflows


def test_traffic_that_grows_with_the_vocabulary_is_drawn_for_both_vocabularies():
    cases = [vl.LossCase(6, 11), vl.LossCase(6, 29)]
    assert vl.traffic_problems(_run(cases, 2)) == []
    run = _run(cases, 2)
    gathering = tuple(tuple(replace(outcome, forward=[("all_gather", 6 * case.vocab * 4)])
                            for outcome, case in zip(outcomes, cases, strict=True))
                      for outcomes in run.per_rank)
    problems = vl.traffic_problems(replace(run, per_rank=gathering))
    assert len(problems) == 2 and "it called all_gather" in problems[0]
    assert "vocabulary 11: forward all_gather of 264 B" in problems[0]
    assert "vocabulary 29: forward all_gather of 696 B" in problems[0]
    assert "expected: all-reduces" in problems[0]


def test_more_all_reduce_bytes_for_a_larger_vocabulary_is_caught_too():
    cases = [vl.LossCase(6, 11), vl.LossCase(6, 29)]
    run = _run(cases, 2)
    first, larger = run.per_rank[0]
    more = (first, replace(larger, forward=[("all_reduce", 6 * 29 * 4)]))
    [problem] = vl.traffic_problems(replace(run, per_rank=(more, *run.per_rank[1:])))
    assert "the bytes grow with the vocabulary" in problem


def test_a_failed_run_reports_its_error_in_every_judgement():
    run = RankRun(2, error="boom", cases=(vl.LossCase(2, 5),), seed=SEED)
    assert vl.value_problems(run) == vl.gradient_problems(run) == vl.traffic_problems(run) == ["boom"]


def test_both_chapter_06_exercises_refuse_dtensor_and_its_functional_collectives():
    assert vl.REFUSAL.modules == LAYERS_REFUSAL.modules == ("torch.distributed.tensor",
                                                             "torch.distributed._functional_collectives")
