"""The judge runner: outcomes come back as records, a failed run is its one problem, the world-size loop
stops at the first failure, and the case-by-rank walk is the runner's."""

from __future__ import annotations

from dataclasses import dataclass

from course_lib.grading.attempt.judge_runner import (
    CaseAnswer,
    answer_or_raised,
    cases_of,
    failures,
    judging,
    judging_with,
    ranks_of,
    run_answer,
    runs_until_failure,
)
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun

TEXT = FailureText("my_answer")


@dataclass(frozen=True)
class Sum:
    rank: int
    total: int


def _sums(rank, world_size, cases):
    return [{"rank": rank, "total": rank + case} for case in cases]


def _one_sum(rank, world_size):
    return {"rank": rank, "total": rank}


def _halves(rank, world_size, numbers):
    """One process: each number halved, an odd one raising (each case judged on its own)."""
    def half(n):
        if n % 2:
            raise ValueError(f"{n} is odd")
        return n // 2
    return [answer_or_raised(lambda n=n: half(n)) for n in numbers]


def _bad_outcome(rank, world_size):
    return [{"rank": rank, "mistyped": 1}]


def test_outcomes_come_back_as_records_case_by_rank():
    run = run_answer(_sums, 2, [10, 20], record=Sum, text=TEXT, timeout=30, cases=(10, 20), seed=1)
    assert run.completed and run.case_records(1) == (Sum(0, 20), Sum(1, 21))
    assert [(index, case, [o.total for o in outcomes]) for index, case, outcomes in cases_of(run)] == [
        (0, 10, [10, 11]), (1, 20, [20, 21])]
    assert [(each.index, each.rank, each.outcome.total) for each in ranks_of(run)] == [
        (0, 0, 10), (0, 1, 11), (1, 0, 20), (1, 1, 21)]


def test_one_record_per_rank_and_the_walk_without_cases():
    run = run_answer(_one_sum, 2, record=Sum, text=TEXT, timeout=30, one_per_rank=True)
    assert run.records == (Sum(0, 0), Sum(1, 1))
    assert [(each.case, each.rank) for each in ranks_of(run)] == [(None, 0), (None, 1)]


def test_an_outcome_the_record_does_not_hold_fails_the_run_in_words():
    run = run_answer(_bad_outcome, 1, record=Sum, text=TEXT, timeout=30, cases=("only",))
    assert not run.completed
    assert "my_answer sent back something this check does not read" in failures([run])[0]


def test_a_judge_sees_only_completed_runs_and_a_failed_one_is_its_reason():
    seen = []

    @judging
    def judge(run, extra):
        seen.append(extra)
        return ["judged"]

    assert judge(RankRun(2, error="rank 1 raised: boom"), "x") == ["rank 1 raised: boom"] and seen == []
    assert judge(RankRun(2), "y") == ["judged"] and seen == ["y"]
    noted = judging_with(lambda reason: f"{reason} (a note)")(lambda run: [])
    assert noted(RankRun(1, error="hung")) == ["hung (a note)"]


def test_the_world_size_loop_stops_after_the_first_failure():
    asked = []

    def run_one(world_size):
        asked.append(world_size)
        return RankRun(world_size, error="hung" if world_size == 3 else None)

    runs = runs_until_failure(run_one, (2, 3, 4))
    assert asked == [2, 3] and [r.world_size for r in runs] == [2, 3] and failures(runs) == ["hung"]


def test_each_case_answer_comes_back_as_its_value_or_what_it_raised():
    run = run_answer(_halves, 1, [4, 3], record=CaseAnswer, text=TEXT, timeout=30, cases=(4, 3))
    assert run.completed
    [(_, _, (even,)), (_, _, (odd,))] = list(cases_of(run))
    assert even == CaseAnswer(value=2) and even.refusal is None
    assert odd.value is None and odd.raised == "ValueError: 3 is odd" and odd.refusal is None
    refused = CaseAnswer(raised="course_lib.grading.attempt.refused_code.RefusedCodeError: my_answer "
                                "imported torch.distributed.pipelining, which this exercise refuses")
    assert refused.refusal == "my_answer imported torch.distributed.pipelining, which this exercise refuses"
