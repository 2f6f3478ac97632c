"""Checks of chapter 07, part 1 (flat-parameter sharding): each of the student's three functions on its own.

Every check hands its function inputs the check built itself, never the student's other functions, so a
mistake in one costs that one cell. The visible case is spelled out as data (the tensors count 1, 2, 3, ...
and the shards of 3 ranks are listed); the hidden checks (instructor-only) draw their cases at grading time.
Chapter 07's ``Refusal`` (torch's ZeroRedundancyOptimizer and FSDP, and course_lib) is declared here.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from course_lib.grading.attempt.judge_runner import failures
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch07_zero.judge import (
    close,
    gathered_problems,
    shard_problems,
    tensor_problem,
    traffic_problems,
)
from course_lib.grading.checks.ch07_zero.ranks import (
    GATHERS,
    REDUCE_SCATTERS,
    FlatCase,
    case_tensors,
    chapter_refusal,
    gather_side,
    reduce_scatter_side,
    run_part,
    shard_side,
)

REFUSAL = chapter_refusal("your flat-parameter sharding")
VISIBLE_TIMEOUT_S = 20


# The visible case: 3 ranks, tensors of shapes (3, 4) and (5,) holding 1, 2, ..., 17. Flattened and padded
# to 18, rank r's shard is the r-th third of [1, ..., 17, 0]: data written out, so that these visible checks
# hold no sharding code of their own.
VISIBLE_WORLD = 3
COUNTING = FlatCase(((3, 4), (5,)), counting=True)
VISIBLE_SHARDS = ((1, 2, 3, 4, 5, 6), (7, 8, 9, 10, 11, 12), (13, 14, 15, 16, 17, 0))
MIXED = FlatCase(((2, 2), (3,)), ("float32", "float64"))


def visible_shard(tensors) -> torch.Tensor:
    """The shard of the visible case for this rank, as listed above (what the gather check hands out)."""
    return torch.tensor(VISIBLE_SHARDS[dist.get_rank()], dtype=torch.float32)


def _ran(run, name: str):
    fail_with(failures([run]), f"{name} did not run")
    return run


def check_shard_parameters(shard_parameters) -> None:
    """Visible test: on 3 ranks, each rank's shard of [1..12 as (3, 4), 13..17] is its third of
    [1, ..., 17, 0]; tensors of two dtypes raise TypeError."""
    run = _ran(run_part(shard_side, VISIBLE_WORLD, "shard_parameters", shard_parameters, (COUNTING, MIXED),
                        7, timeout=VISIBLE_TIMEOUT_S, refusal=REFUSAL), "shard_parameters")
    problems = []
    for rank, (counting, mixed) in enumerate(run.records):
        where = f"rank {rank}"
        problems += [f"{where}: {p}" for p in shard_problems(MIXED, VISIBLE_WORLD, mixed)]
        found = shard_problems(COUNTING, VISIBLE_WORLD, counting)
        want = torch.tensor(VISIBLE_SHARDS[rank], dtype=torch.float32)
        if not found and not torch.equal(counting.shard, want):
            found = [f"{COUNTING.describe(VISIBLE_WORLD)}: expected {want.tolist()} (the tensors flattened "
                     f"in order, padded with zeros to 18, cut in 3), got {counting.shard.tolist()}"]
        problems += [f"{where}: {p}" for p in found]
    fail_with(problems, "shard_parameters gave wrong shards")
    print(f"shard_parameters: {COUNTING.numel} elements on {VISIBLE_WORLD} ranks -> shards of "
          f"{COUNTING.shard_numel(VISIBLE_WORLD)}, in order, zero-padded; mixed dtypes refused")


def check_gather_parameters(gather_parameters) -> None:
    """Visible test: handed the shards listed above, every rank rebuilds the two tensors with one
    all-gather of the padded buffer."""
    run = _ran(run_part(gather_side, VISIBLE_WORLD, "gather_parameters", gather_parameters, (COUNTING,), 7,
                        visible_shard, timeout=VISIBLE_TIMEOUT_S, refusal=REFUSAL), "gather_parameters")
    expected = case_tensors(COUNTING, 7, 0)
    problems = []
    for rank, outcome in enumerate(run.case_records(0)):
        where = f"rank {rank}, handed the shard {list(VISIBLE_SHARDS[rank])}"
        if outcome.raised:
            problems.append(f"{where}: raised {outcome.raised}")
            continue
        problems += gathered_problems(where, outcome.gathered, expected)
        problems += traffic_problems(COUNTING, VISIBLE_WORLD, outcome.events, GATHERS, "all-gather")
    fail_with(problems, "gather_parameters did not rebuild the tensors")
    print(f"gather_parameters: the {VISIBLE_WORLD} shards gathered back into the tensors with one all-gather "
          f"of {COUNTING.bytes_moved(VISIBLE_WORLD)} bytes")


def check_reduce_scatter_gradients(reduce_scatter_gradients) -> None:
    """Visible test: rank r's gradients are r + 1 times [1..12 as (3, 4), 13..17]; summed over 3 ranks
    that is 6 times, so rank r must get 6 x its shard listed above, with one reduce-scatter."""
    run = _ran(run_part(reduce_scatter_side, VISIBLE_WORLD, "reduce_scatter_gradients",
                        reduce_scatter_gradients, (COUNTING,), 7, timeout=VISIBLE_TIMEOUT_S, refusal=REFUSAL),
               "reduce_scatter_gradients")
    problems = []
    for rank, outcome in enumerate(run.case_records(0)):
        where = f"rank {rank}, {COUNTING.describe(VISIBLE_WORLD)}"
        if outcome.raised:
            problems.append(f"{where}: raised {outcome.raised}")
            continue
        want = 6 * torch.tensor(VISIBLE_SHARDS[rank], dtype=torch.float32)
        found = tensor_problem(where, outcome.shard, want.shape, want.dtype, "the shard")
        if found is None and not close(outcome.shard, want):
            found = (f"{where}: expected 6 x this rank's shard of the padded buffer, {want.tolist()} (the "
                     f"sum over the ranks, as dist.all_reduce gives it), got {outcome.shard.tolist()}")
        problems += [found] if found else []
        problems += traffic_problems(COUNTING, VISIBLE_WORLD, outcome.events, REDUCE_SCATTERS,
                                     "reduce-scatter")
    fail_with(problems, "reduce_scatter_gradients gave wrong shards")
    print(f"reduce_scatter_gradients: each rank's shard of the summed gradients, with one reduce-scatter of "
          f"{COUNTING.bytes_moved(VISIBLE_WORLD)} bytes")
