"""The tied-weight model of chapter 07's FSDP checks, and how the values check judges a broken tie."""

import torch

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch07_fsdp.ranks import FSDPOutcome
from course_lib.grading.checks.ch07_fsdp.visible import FSDPCase, reference, value_problems

CASE = FSDPCase(width=5, units=5, tied=True)


def test_the_tied_model_holds_one_parameter_in_two_modules_and_single_process_training_keeps_it():
    model = CASE.model()
    first, second = CASE.tied_pair(model)
    assert first.weight is second.weight and first.bias is not second.bias
    names = [name for name, _ in model.named_parameters()]
    assert "2.0.weight" in names and "2.2.weight" not in names and "2.2.bias" in names
    assert CASE.unit_bytes(2, 4)[2] == 36 * 4   # one 5x5 weight and two biases: 35 elements, padded to 36
    trained = reference(CASE)
    assert set(trained) == set(names)
    assert not torch.equal(trained["2.0.weight"], dict(model.named_parameters())["2.0.weight"])


def _run(full: dict, ties: list[bool]):
    return RankRun(2, per_rank=(FSDPOutcome(full=full, events=[], finish_events=[], peak={}, baseline={},
                                            ties=ties, shard_dtypes=[], grad_dtypes=[], shard_bytes=0),))


def test_values_check_passes_single_process_training_and_names_a_broken_tie_and_a_doubled_name():
    trained = reference(CASE)
    assert value_problems(_run(trained, [True] * 3), CASE) == []
    broken = value_problems(_run(trained, [True, False, False]), CASE)
    assert len(broken) == 1 and "came apart: in forward 2" in broken[0] and "`2.2.weight`" in broken[0]
    doubled = value_problems(_run({**trained, "2.2.weight": trained["2.0.weight"]}, [True] * 3), CASE)
    assert len(doubled) == 1 and "['2.2.weight']" in doubled[0] and "under its first name" in doubled[0]
