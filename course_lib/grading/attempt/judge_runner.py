"""The one judge runner: a student's answer run on ranks world size after world size, read back as records.

Checks only word what is wrong: this file owns the run (``run_answer``), the run-by-run loop that stops at a
failure (``runs_until_failure``), the guard that turns a failed run into its one problem (``judging``) and
the case-by-rank walk over what came back (``cases_of``, ``ranks_of``). A check reads records, never dicts.
An answer asked case by case in one process, each case judged on its own even when another raised, comes
back as ``CaseAnswer`` records (``answer_or_raised`` on the rank side).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, run_on_ranks


def run_answer(rank_fn, world_size: int, *args, record, text: FailureText, timeout: float, cases=(),
               seed: int = 0, one_per_rank: bool = False) -> RankRun:
    """``rank_fn`` on ``world_size`` ranks within ``timeout`` seconds, its outcomes read back as ``record``.

    The rank side returns one plain dict per case (``one_per_rank``: one dict in all); a run that failed,
    hung or sent something ``record`` does not have carries its reason in words instead.
    """
    run = run_on_ranks(rank_fn, world_size, *args, text=text, timeout=timeout, cases=cases, seed=seed)
    return run.as_records(record, text.subject, one_per_rank=one_per_rank)


@dataclass(frozen=True)
class CaseAnswer:
    """The student's function in one case: what it returned (plain data), or what it raised, as
    traceback.format_exception_only words it ("module.ErrorType: message")."""

    value: Any = None
    raised: str | None = None

    @property
    def refusal(self) -> str | None:
        """The refusal's own words when what it raised was the exercise's refusal (RefusedCodeError)."""
        if self.raised and "RefusedCodeError" in self.raised:
            return self.raised.partition(": ")[2]
        return None


def answer_or_raised(call: Callable[[], Any]) -> dict:
    """Rank side: ``call()``'s value, or what it raised, as a plain dict that reads back as a CaseAnswer;
    one case raising does not stop the others (a refusal the code caught still fails the run: the rank
    function runs ``watched``)."""
    try:
        return {"value": call()}
    except Exception as error:  # noqa: BLE001 - each case is judged on its own
        return {"raised": "".join(traceback.format_exception_only(error)).strip()}


def run_training_answer(rank_fn, world_size: int, *args, record, name: str, timeout: float, cases=(),
                        seed: int = 0, one_per_rank: bool = False) -> RankRun:
    """``run_answer`` for answers that train with torch.optim (chapter 07), its imports done once first."""
    # torch.optim's first step imports torch._dynamo (seconds); import it here, once, so that forked ranks
    # inherit it instead of each importing it against the clock of the timeout
    import torch._dynamo  # noqa: F401

    return run_answer(rank_fn, world_size, *args, record=record, text=FailureText(name), timeout=timeout,
                      cases=cases, seed=seed, one_per_rank=one_per_rank)


def runs_until_failure(run_one: Callable[[int], RankRun], world_sizes: Iterable[int]) -> list[RankRun]:
    """``run_one(world_size)`` for each world size in turn, up to and including the first that failed: a
    broken answer is reported once, and a hanging one does not cost the timeout on every world size."""
    runs = []
    for world_size in world_sizes:
        runs.append(run_one(world_size))
        if not runs[-1].completed:
            break
    return runs


def judging_with(word_failure: Callable[[str], str]):
    """``judging`` whose failed run's problem is ``word_failure(its reason)``: an exercise whose failures
    have a likely cause the reason alone does not tell (chapter 11: gloo's reset connections)."""
    def judging(check: Callable[..., list[str]]) -> Callable[..., list[str]]:
        @functools.wraps(check)
        def judged(run: RankRun, *args, **kwargs) -> list[str]:
            if run.error:
                return [word_failure(run.error)]
            return check(run, *args, **kwargs)

        return judged

    return judging


# ``check(run, ...)`` as a judge: a run that did not complete is its one problem (its reason, which already
# names the rank, the error and the student's frames), so the check sees only runs that did.
judging = judging_with(lambda reason: reason)


def failures(runs: Iterable) -> list[str]:
    """The reasons of the runs that did not complete, in order (RankRuns, or chapter 09's preempted runs,
    whose reason is a failure other than the planned preemption)."""
    return [run.error for run in runs if run.error]


def values_as(run, record, per_case: bool = False) -> dict[int, Any]:
    """A preempted run's values (chapter 09: {rank: what it returned}, plain dicts) read back as ``record``,
    per rank one (``per_case``: a tuple of one per case)."""
    if per_case:
        return {rank: tuple(record(**outcome) for outcome in value) for rank, value in run.values.items()}
    return {rank: record(**value) for rank, value in run.values.items()}


@dataclass(frozen=True)
class RankOutcome:
    """One rank's record in one case, with what a problem's words need to say where it happened."""

    index: int          # the case's position in the run (what expectations are rebuilt from)
    case: Any           # the case itself (None when the ranks ran no cases)
    rank: int
    outcome: Any        # the record the rank sent back


def cases_of(run: RankRun) -> Iterator[tuple[int, Any, tuple]]:
    """(index, case, every rank's record in it) for each case of a completed run."""
    for index, case in enumerate(run.cases):
        yield index, case, run.case_records(index)


def ranks_of(run: RankRun) -> Iterator[RankOutcome]:
    """Each rank's record, case by case, rank by rank; for a run of no cases, each rank's one record."""
    if not run.cases:
        for rank, outcome in enumerate(run.records):
            yield RankOutcome(0, None, rank, outcome)
        return
    for index, case, outcomes in cases_of(run):
        for rank, outcome in enumerate(outcomes):
            yield RankOutcome(index, case, rank, outcome)
