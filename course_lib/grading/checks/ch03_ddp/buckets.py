"""The judges of chapter 03's DDP design: its buckets, and whether they let communication start early.

A DDP that ignores ``bucket_size_mb`` (one flat all-reduce from the last hook) or buckets the parameters
in forward order gives the right values and still communicates during the backward; only its buckets'
bytes and when its first all-reduce starts, against when the step's last gradient was ready, tell it
from one that overlaps as DDP is meant to.
"""

from __future__ import annotations

import math

from torch import nn

from course_lib.grading.attempt.judge_runner import cases_of, judging
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch03_ddp.judge import COMMUNICATION, step_timeline_text, steps_of
from course_lib.grading.checks.ch03_ddp.ranks import build_model


def expected_bucket_bytes(model: nn.Module, bucket_size_mb: float | None) -> list[int]:
    """Each bucket's bytes as the exercise's contract groups them: the trainable parameters in reverse
    order of ``model.parameters()``, a bucket closed before a parameter that would take it past
    ``bucket_size_mb`` MiB; None (or a limit smaller than any parameter) gives one bucket per parameter."""
    limit = -1 if bucket_size_mb is None else bucket_size_mb * 2**20
    sizes: list[int] = []
    filled = math.inf
    for param in reversed([p for p in model.parameters() if p.requires_grad]):
        size = param.numel() * param.element_size()
        if filled + size > limit:
            sizes.append(0)
            filled = 0
        sizes[-1] += size
        filled += size
    return sizes


def _all_reduced(events) -> list[int]:
    return [call.nbytes for call in events if call.op == "all_reduce"]


@judging
def bucket_problems(run: RankRun) -> list[str]:
    """Every step all-reduces one tensor per bucket, of exactly that bucket's bytes (in any order)."""
    problems = []
    for _, case, outcomes in cases_of(run):
        expected = expected_bucket_bytes(build_model(case.model, run.seed), case.bucket_size_mb)
        for rank, outcome in enumerate(outcomes):
            for step, (_, _, events) in enumerate(steps_of(outcome)):
                got = _all_reduced(events)
                if sorted(got) != sorted(expected):
                    problems.append(
                        f"{case.describe(run.world_size)}, rank {rank}, step {step}: {len(got)} "
                        f"all-reduce(s) of {got} bytes; with bucket_size_mb={case.bucket_size_mb} the "
                        "trainable parameters, in reverse order of module.parameters(), make "
                        f"{len(expected)} bucket(s) of {expected} bytes, one all-reduce each")
                    break
    return problems


@judging
def early_overlap_problems(run: RankRun) -> list[str]:
    """With several buckets, each step's first all-reduce starts before the step's last gradient is ready:
    the first bucket goes out while the backward still computes the earlier layers' gradients."""
    problems = []
    for _, case, outcomes in cases_of(run):
        buckets = len(expected_bucket_bytes(build_model(case.model, run.seed), case.bucket_size_mb))
        if buckets < 2:
            continue
        for rank, outcome in enumerate(outcomes):
            for step, ((_, _, events), ready) in enumerate(zip(steps_of(outcome), outcome.ready,
                                                                 strict=True)):
                sent = [call for call in events if call.op in COMMUNICATION]
                if not sent or not ready or sent[0].start < max(ready):
                    continue   # no communication at all is the overlap part's to report
                drawing = "" if problems else "; your recorded step:\n" + step_timeline_text(outcome, step)
                problems.append(
                    f"{case.describe(run.world_size)} ({buckets} buckets), rank {rank}, step {step}: the "
                    f"first {sent[0].op} started {(sent[0].start - max(ready)) * 1e3:.2f} ms after the "
                    "step's last gradient was ready; the bucket of the last layers' gradients should go "
                    f"out as soon as it is complete, while the backward still runs{drawing}")
                break
    return problems
