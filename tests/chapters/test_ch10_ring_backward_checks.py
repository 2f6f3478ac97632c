"""Chapter 10's backward judge on made-up runs (no ranks): overlap read from the order of calls and
products, the gradients' trip home excused, and memory that may not grow with the ranks."""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch10_ring_attention.judge import kv_bytes
from course_lib.grading.checks.ch10_ring_attention.ranks import AttentionCase
from course_lib.grading.checks.ch10_ring_backward.judge import (
    backward_memory_problems,
    backward_overlap_problems,
    expected_backward_words,
    expected_grads,
)
from course_lib.grading.checks.ch10_ring_backward.ranks import BackwardOutcome

CASE = AttentionCase(1, 2, 4, 8)


def _marks(words: list[str]) -> list[tuple]:
    """A timeline as the ranks record it, from words such as "post isend(1)" and "compute"."""
    marks = []
    for word in words:
        if word == "compute":
            marks.append(("compute",))
        else:
            kind, call = word.split()
            op, peer = call.rstrip(")").split("(")
            marks.append((kind, op, int(peer)))
    return marks


def _waits_at_once(rank: int, n: int) -> list[str]:
    """Each transfer posted and waited on before the block's products, the gradients after them."""
    right, left = (rank + 1) % n, (rank - 1) % n
    both = [f"post isend({right})", f"post irecv({left})", f"wait isend({right})", f"wait irecv({left})"]
    return [word for step in range(n) for word in (both if step < n - 1 else []) + ["compute"] + both]


def _run(words, n=4, case=CASE, seed=5, peak=1000, grads=None) -> RankRun:
    wants = expected_grads(RankRun(n, cases=(case,), seed=seed), 0)
    outcomes = tuple((BackwardOutcome(grads or wants[r], "tuple", [], [], 0, _marks(words(r, n)), peak),)
                     for r in range(n))
    return RankRun(n, per_rank=outcomes, cases=(case,), seed=seed)


def test_a_backward_that_overlaps_passes_and_the_trip_home_is_excused():
    assert backward_overlap_problems(_run(expected_backward_words)) == []
    assert backward_overlap_problems(_run(expected_backward_words, n=2)) == []
    words = expected_backward_words(0, 4)
    assert words[-4:] == ["post isend(1)", "post irecv(3)", "wait isend(1)", "wait irecv(3)"]   # home, bare


def test_a_backward_that_waits_before_computing_fails_with_its_timeline_drawn():
    [problem] = backward_overlap_problems(_run(_waits_at_once))
    assert "rank 0" in problem and "12 of its 14 transfers" in problem
    assert "a ring backward that overlaps" in problem and "post isend(1)" in problem


def test_overlap_is_not_judged_on_wrong_gradients_nor_under_the_mask():
    wrong = [g + 1 for g in expected_grads(RankRun(4, cases=(CASE,), seed=5), 0)[0]]
    assert "does not count" in backward_overlap_problems(_run(expected_backward_words, grads=wrong))[0]
    causal = AttentionCase(1, 2, 4, 8, causal=True)
    assert backward_overlap_problems(_run(_waits_at_once, case=causal)) == []


def test_memory_may_not_grow_with_the_ranks():
    block = kv_bytes(CASE)
    flat = [_run(expected_backward_words, n, peak=6 * block) for n in (2, 3, 8)]
    assert backward_memory_problems(flat, 0) == []
    growing = [_run(expected_backward_words, n, peak=(4 + n) * block) for n in (2, 3, 8)]
    [problem] = backward_memory_problems(growing, 0)
    assert "grew from" in problem and "on 3 ranks" in problem and "kept for every block" in problem
