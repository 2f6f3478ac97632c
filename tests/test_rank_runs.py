"""run_on_ranks, the one way checks run student code on ranks: what came back, or why not, in words."""

from __future__ import annotations

import time

import pytest
import torch.distributed as dist

from course_lib.grading.attempt.rank_attempt import (
    FailureText,
    RankRun,
    fail_with,
    frames_after,
    run_on_ranks,
)
from course_lib.real import ForbiddenCallError

TEXT = FailureText("my_ring", raised="{subject} raised on {world_size} ranks: {summary}")


def _returns(rank, world_size):
    return [{"rank": rank}]


def _raises(rank, world_size, exception):
    raise exception


def _hangs(rank, world_size):
    if rank == 0:
        time.sleep(60)
    dist.barrier()


def test_a_run_that_completes_keeps_what_each_rank_returned():
    run = run_on_ranks(_returns, 2, text=TEXT, timeout=30, cases=("only",), seed=3)
    assert run == RankRun(2, ([{"rank": 0}], [{"rank": 1}]), cases=("only",), seed=3)
    assert run.outcomes == [[{"rank": 0}, {"rank": 1}]]


@pytest.mark.parametrize("exception, words, forbidden", [
    (ValueError("bad chunk"), "my_ring raised on 1 ranks: ValueError: bad chunk", False),
    (NotImplementedError(), "my_ring is not written yet (it raises NotImplementedError)", False),
    (ForbiddenCallError("no all_reduce"), "my_ring made a call this part forbids: ForbiddenCallError", True),
])
def test_a_rank_that_raises_is_described_not_raised(exception, words, forbidden):
    run = run_on_ranks(_raises, 1, exception, text=TEXT, timeout=30)
    assert run.error.startswith(words) and "--- rank 0 ---" in run.error
    assert run.forbidden == forbidden and run.per_rank == () and run.outcomes == []


def test_a_hang_is_stopped_and_said():
    run = run_on_ranks(_hangs, 2, text=TEXT, timeout=2)
    assert run.hung and run.error.startswith("my_ring did not finish on 2 ranks within 2 s")


def test_frames_after_cuts_the_checks_own_frames():
    text = ('Traceback (most recent call last):\n  File "/x/check.py", line 9, in side\n    f(t)\n'
            '  File "<student cells>", line 3, in f\nKeyError: 1\n')
    assert frames_after(text, "/x/check.py") == ('Traceback (most recent call last):\n'
                                                 '  File "<student cells>", line 3, in f\nKeyError: 1')
    assert frames_after(text, "/elsewhere.py") == text.rstrip()


def test_fail_with_lists_each_problem_once():
    with pytest.raises(AssertionError, match=r"(?s)^wrong:\n- a\n- b$"):
        fail_with(["a", "b", "a"], "wrong")
