"""Running a student's code on real ranks for a check: every failure or hang becomes a message, never a raise.

``run_on_ranks`` is the one way every chapter's checks run student code on ranks; ``FailureText`` is how
a check words what went wrong, and ``RankRun`` what came back. The rank side returns only plain data
(tensors, numbers, containers), which the judging side compares with its own expectations.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from course_lib.grading.attempt.refusals import RefusedCodeError, check_not_refused
from course_lib.real import ForbiddenCallError, RankFailure, RanksHungError, run_ranks


def student_frames(remote_traceback: str, keep_last: int = 12) -> str:
    """The end of a rank's traceback: the student's frames are the last ones, the checks' the first."""
    lines = remote_traceback.rstrip().splitlines()
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    student = [i for i in frames if "<student cells>" in lines[i] or "ipython-input" in lines[i]
               or "/tmp/ipykernel" in lines[i]]
    start = student[0] if student else (frames[-1] if frames else 0)
    return "\n".join(["Traceback (most recent call last):", *lines[start:]][-keep_last:])


def frames_after(remote_traceback: str, machinery_file: str) -> str:
    """The traceback from the student's own code on: frames up to the last one in ``machinery_file`` (the
    check's rank side, which says nothing to the student) are cut; all of it if that file is not in it."""
    lines = remote_traceback.rstrip().splitlines()
    cut = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ") and machinery_file in line]
    if not cut:
        return "\n".join(lines)
    rest = lines[cut[-1] + 1:]
    while rest and not rest[0].lstrip().startswith("File ") and rest[0].startswith("    "):
        rest = rest[1:]  # the source line and ^^^^ markers of the frame we cut
    return "\n".join(["Traceback (most recent call last):", *rest])


@dataclass(frozen=True)
class FailureText:
    """How a check words a run that did not complete; templates take {subject}, {world_size},
    {timeout}, {summary} (the rank's error) and {reason} (an error of the run itself)."""

    subject: str
    hung: str = ("{subject} did not finish on {world_size} ranks within {timeout:g} s (a deadlock: does "
                 "every rank make the same collective calls in the same order?), so the test stopped it.")
    forbidden: str = "{subject} made a call this part forbids: {summary}"
    refused: str = "{summary}"
    not_written: str = "{subject} is not written yet (it raises NotImplementedError)"
    raised: str = "{subject} raised on {world_size} ranks: {summary}"
    # No exception at all: the rank's process itself ended (a signal, the memory limit's kill, os._exit).
    died: str = "a rank running {subject} on {world_size} ranks died without a Python error: {summary}"
    out_of_memory: str = ("{subject} ran out of memory on {world_size} ranks (the grader limits each "
                          "process's memory; does something grow every step?): {summary}")
    crashed: str = "running {subject} on {world_size} ranks failed: {reason}"
    frames: Callable[[str], str] = field(default=student_frames)

    def lead(self, error: RankFailure, **words) -> str:
        template = {ForbiddenCallError.__name__: self.forbidden, RefusedCodeError.__name__: self.refused,
                    NotImplementedError.__name__: self.not_written,
                    MemoryError.__name__: self.out_of_memory,
                    None: self.died}.get(error.exc_type, self.raised)
        return template.format(subject=self.subject, summary=error.summary, **words)


@dataclass(frozen=True)
class RankRun:
    """What one run gave: per rank, what the rank function returned; or why there is nothing.

    ``cases`` and ``seed`` say what the ranks were asked to run, for the judge to rebuild expectations.
    """

    world_size: int
    per_rank: tuple = ()
    error: str | None = None
    hung: bool = False
    forbidden: bool = False
    cases: tuple = ()
    seed: int = 0

    @property
    def outcomes(self) -> list[list]:
        """[case][rank], for rank functions that return one outcome per case; [] when nothing came back."""
        if not self.per_rank:
            return []
        return [[self.per_rank[rank][index] for rank in range(self.world_size)]
                for index in range(len(self.cases))]

    @property
    def completed(self) -> bool:
        """Whether every rank returned (``error`` says why not)."""
        return self.error is None

    @property
    def records(self) -> tuple:
        """Per rank, what it sent back: its one record, or (a rank function of cases) its records by case."""
        return self.per_rank

    def case_records(self, index: int) -> tuple:
        """Every rank's record in case ``index``."""
        return tuple(self.per_rank[rank][index] for rank in range(self.world_size))

    def as_records(self, record, subject: str, one_per_rank: bool = False) -> RankRun:
        """Each rank's per-case outcomes (``one_per_rank``: its one outcome), sent as plain dicts (what the
        plain transport carries), read back as ``record`` (a dataclass of named fields); a rank that sent
        something else fails the run."""
        if self.error:
            return self
        try:
            if one_per_rank:
                per_rank = tuple(record(**outcome) for outcome in self.per_rank)
            else:
                per_rank = tuple(tuple(record(**outcome) for outcome in outcomes)
                                 for outcomes in self.per_rank)
        except TypeError as error:
            return replace(self, per_rank=(), error=f"the ranks running {subject} sent back something this "
                                                    f"check does not read: {error}")
        return replace(self, per_rank=per_rank)


def watched(rank_fn):
    """``rank_fn`` whose rank also fails when the student's code met a refusal it then caught."""
    @functools.wraps(rank_fn)
    def rank(*args, **kwargs):
        result = rank_fn(*args, **kwargs)
        check_not_refused()
        return result

    return rank


def run_on_ranks(rank_fn, world_size: int, *args, text: FailureText, timeout: float, cases=(),
                 seed: int = 0) -> RankRun:
    """``run_ranks(rank_fn, world_size, *args)`` with student code inside, read as plain data only.

    A hang, a rank's error or any other failure is described with ``text`` in ``RankRun.error``.
    """
    done = RankRun(world_size, cases=tuple(cases), seed=seed)
    words = {"subject": text.subject, "world_size": world_size, "timeout": timeout}
    try:
        per_rank = run_ranks(watched(rank_fn), world_size, *args, timeout=timeout, plain_results=True)
    except RanksHungError as error:
        return replace(done, hung=True, error=f"{text.hung.format(**words)}\n{error}")
    except RankFailure as error:
        lead = text.lead(error, world_size=world_size, timeout=timeout)
        frames = text.frames(error.remote_traceback)
        refused = error.exc_type in (ForbiddenCallError.__name__, RefusedCodeError.__name__)
        return replace(done, forbidden=refused,
                       error=f"{lead}\n--- rank {error.rank} ---\n{frames}")
    except Exception as error:  # noqa: BLE001 - a check must report, whatever went wrong
        reason = traceback.format_exception_only(error)[-1]
        return replace(done, error=text.crashed.format(reason=reason, **words))
    return replace(done, per_rank=tuple(per_rank))


def fail_with(problems: list[str], what: str, limit: int = 4) -> None:
    """Raise one AssertionError listing the first problems (the rest are counted, not listed)."""
    if not problems:
        return
    problems = list(dict.fromkeys(problems))
    shown = "\n".join(f"- {p}" for p in problems[:limit])
    more = f"\n(and {len(problems) - limit} more)" if len(problems) > limit else ""
    raise AssertionError(f"{what}:\n{shown}{more}")
