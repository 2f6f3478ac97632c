"""The visible checks of chapter 02's ring exercise, as the notebook calls them: run on real ranks, judge.

Each ``check_ring_*`` runs the student's function on 4 real ranks (``ring_ranks``), asks the judges
(``ring_judge``) what is wrong, and raises one AssertionError listing it, or prints what passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from course_lib.grading.attempt.rank_attempt import RankRun, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch02_ring.judge import (
    SENDS,
    close_to,
    forbidden_problems,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch02_ring.ranks import RingCase, run_student

# The ring's schedule is the exercise: course_lib holds it (the simulator plays the ring, the drawing
# replays it), so an answer may not run course_lib; the collectives are refused by the traffic recorder.
REFUSAL = Refusal("your ring", why="the exercise is to work out the ring's schedule yourself")

__all__ = ["check_ring_all_gather", "check_ring_all_reduce", "check_ring_all_reduce_no_collectives",
           "check_ring_all_reduce_no_deadlock", "check_ring_all_reduce_traffic", "check_ring_reduce_scatter",
           "fail_with"]

VISIBLE_TIMEOUT_S = 10
LARGE_LENGTH = 2**18  # 1 MB of float32


def _differs_from_torch(run: RankRun) -> list[str]:
    return [f"rank {rank}: {o.after.tolist()}, dist.all_reduce: {o.torch_all_reduce.tolist()}"
            for rank, o in enumerate(run.case_records(0)) if not close_to(o.after, o.torch_all_reduce)]


def _bytes_sent(run: RankRun) -> int:
    return sum(nbytes for op, _, nbytes in run.case_records(0)[0].events if op in SENDS)


@dataclass(frozen=True)
class VisibleCheck:
    """One visible check: whose function, which collective, the judges in order, what passing prints.

    ``passed`` is formatted with world_size, length, steps (N - 1), sent (rank 0's bytes), megabytes
    and timeout.
    """

    function: str
    kind: str
    judges: tuple[tuple[Callable[[RankRun], list[str]], str], ...]
    passed: str
    doc: str
    length: int = 8


VISIBLE = {
    "check_ring_reduce_scatter": VisibleCheck(
        "ring_reduce_scatter", "reduce_scatter",
        ((lambda run: value_problems(run, "reduce_scatter"), "ring_reduce_scatter gave wrong values"),
         (lambda run: traffic_problems(run, "reduce_scatter"),
          "ring_reduce_scatter's traffic is not a ring's")),
        "ring_reduce_scatter: chunk r of rank r holds the sum, on {world_size} ranks, length {length}; "
        "{steps} messages per rank, all to the right neighbour",
        "Visible test: after your reduce-scatter, chunk ``rank`` of every rank holds the sum of that chunk."),
    "check_ring_all_gather": VisibleCheck(
        "ring_all_gather", "all_gather",
        ((lambda run: value_problems(run, "all_gather"), "ring_all_gather gave wrong values"),
         (lambda run: traffic_problems(run, "all_gather"), "ring_all_gather's traffic is not a ring's")),
        "ring_all_gather: every chunk reached every rank, on {world_size} ranks, length {length}; "
        "{steps} messages per rank, all to the right neighbour",
        "Visible test: after your all-gather, every rank holds every rank's chunk."),
    "check_ring_all_reduce": VisibleCheck(
        "ring_all_reduce", "all_reduce",
        ((lambda run: value_problems(run, "all_reduce"), "ring_all_reduce gave wrong values"),
         (_differs_from_torch, "ring_all_reduce differs from dist.all_reduce")),
        "ring_all_reduce: equals dist.all_reduce on all {world_size} ranks (length {length}), in place",
        "Visible test: your all-reduce equals dist.all_reduce on every rank, in place."),
    "check_ring_all_reduce_traffic": VisibleCheck(
        "ring_all_reduce", "all_reduce",
        ((lambda run: traffic_problems(run, "all_reduce"), "ring_all_reduce's traffic is not a ring's"),),
        "ring_all_reduce traffic: every rank sent {messages} messages to its right neighbour, "
        "{sent} bytes in all of a {nbytes}-byte tensor",
        "Visible test: 2(N-1) messages per rank, all to the right neighbour, one chunk each."),
    "check_ring_all_reduce_no_collectives": VisibleCheck(
        "ring_all_reduce", "all_reduce",
        ((lambda run: forbidden_problems(run) + value_problems(run, "all_reduce", need_in_place=False),
          "ring_all_reduce must be a working all-reduce made only of send/recv/isend/irecv"),),
        "ring_all_reduce: built from point-to-point calls only",
        "Visible test: the sum comes out right with every collective forbidden."),
    "check_ring_all_reduce_no_deadlock": VisibleCheck(
        "ring_all_reduce", "all_reduce",
        ((lambda run: value_problems(run, "all_reduce", need_in_place=False),
          "ring_all_reduce did not finish right"),),
        "ring_all_reduce: no deadlock, {megabytes:g} MB on {world_size} ranks within {timeout} s",
        "Visible test: a 1 MB all-reduce on 4 ranks finishes (with the right sum) within the timeout.",
        length=LARGE_LENGTH),
}


def _visible_check(name: str):
    """The check function the notebook imports under ``name``, built from ``VISIBLE[name]``."""
    spec = VISIBLE[name]

    def check(candidate, world_size: int = 4, length: int = spec.length) -> None:
        student = as_student_function(candidate, spec.function, refusal=REFUSAL)
        run = run_student(student, spec.kind, world_size, [RingCase((length,))], seed=2024,
                          timeout=VISIBLE_TIMEOUT_S, compare_with_torch=True)
        for judge, headline in spec.judges:
            fail_with(judge(run), headline)
        print(spec.passed.format(world_size=world_size, length=length, steps=world_size - 1,
                                 messages=2 * (world_size - 1), sent=_bytes_sent(run), nbytes=length * 4,
                                 megabytes=length * 4 / 2**20, timeout=VISIBLE_TIMEOUT_S))

    check.__name__ = check.__qualname__ = name
    check.__doc__ = spec.doc
    return check


check_ring_reduce_scatter = _visible_check("check_ring_reduce_scatter")
check_ring_all_gather = _visible_check("check_ring_all_gather")
check_ring_all_reduce = _visible_check("check_ring_all_reduce")
check_ring_all_reduce_traffic = _visible_check("check_ring_all_reduce_traffic")
check_ring_all_reduce_no_collectives = _visible_check("check_ring_all_reduce_no_collectives")
check_ring_all_reduce_no_deadlock = _visible_check("check_ring_all_reduce_no_deadlock")
