"""Hidden check of chapter 00 (instructor-only): messages_per_rank on ring sizes drawn at grading time.

Accepts the function (in the notebook's kernel) or a ``StudentFunction`` (isolated re-grading, where
the calls run in a forked, sandboxed child and only the returned numbers come back).
"""

from __future__ import annotations

import os
import random

from course_lib.grading.isolation import IsolatedCallError, map_isolated


def check_messages_per_rank_hidden(messages_per_rank) -> None:
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    sizes = [1, 2, 3, rng.randint(5, 64), rng.randint(100, 5000)]
    try:
        answers = map_isolated(messages_per_rank, [(n,) for n in sizes], name="messages_per_rank", timeout=30)
    except IsolatedCallError as error:
        raise AssertionError(f"messages_per_rank failed: {error}") from None
    for n, answer in zip(sizes, answers, strict=True):
        if answer != 2 * (n - 1):
            raise AssertionError(f"messages_per_rank({n}) returned {answer!r}; a ring all-reduce on {n} "
                                 "ranks sends 2(n - 1) messages per rank")
