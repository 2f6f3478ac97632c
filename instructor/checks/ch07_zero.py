"""Hidden checks of chapter 07, part 1 (instructor-only): flat-parameter sharding on 1 to 4 real ranks.

Each check runs one of the student's functions on its own: the shards handed to gather_parameters and
the expected shards of every check are built here, in the judging process, from tensors drawn from a
seed taken at grading time (named in every failure message). Counts not divisible by the world size,
fewer elements than ranks; float32, float64, bfloat16 and int64 for sharding and gathering, float32 and
float64 for the reduce-scatter; mixed dtypes (must raise TypeError). The recorded traffic must be exactly
one all-gather / one reduce-scatter of the whole padded buffer.

  grade_id                          points  hidden check
  test_shard_parameters                2    check_shard_parameters_hidden(shard_parameters)
  test_gather_parameters               3    check_gather_parameters_hidden(gather_parameters)
  test_reduce_scatter_gradients        3    check_reduce_scatter_gradients_hidden(reduce_scatter_gradients)

Parts 2 and 3 (the sharded optimizer, FSDP) are checked in ch07_optimizer.py and ch07_fsdp.py.
The expected points of known-wrong submissions: autograde_tests/fixtures/zero/expected_scores.json.
"""

from __future__ import annotations

import math
import random

import torch
import torch.distributed as dist

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import judging, ranks_of, runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch07_zero.judge import summarize
from course_lib.grading.checks.ch07_zero.ranks import (
    GATHERS,
    REDUCE_SCATTERS,
    FlatCase,
    case_tensors,
    gather_side,
    reduce_scatter_side,
    run_part,
    shard_side,
)
from course_lib.grading.checks.ch07_zero.visible import (
    REFUSAL,
    close,
    gathered_problems,
    shard_problems,
    traffic_problems,
)

from ._seeds import fresh_seed

WORLD_SIZES = (4, 3, 2, 1)
TIMEOUT_S = 20
POINTS = {"test_shard_parameters": 2, "test_gather_parameters": 3, "test_reduce_scatter_gradients": 3}


def hidden_cases(world_size: int, rng: random.Random, dtypes=("float32", "float64", "bfloat16")) -> list:
    """Counts not divisible by N, fewer elements than ranks, exact multiples, several dtypes."""
    n = world_size
    odd = (rng.randint(2, 5), rng.randint(2, 7))
    cases = [FlatCase(((1,),), (dtypes[0],)),
             FlatCase((odd, (rng.randint(1, 9),), (n * 2,)), (dtypes[1 % len(dtypes)],)),
             FlatCase(((n, 3), (2 * n + 1,)), (dtypes[2 % len(dtypes)],)),
             FlatCase(((rng.randint(5, 40), 3),), (dtypes[0],))]
    if len(dtypes) == 3:
        cases.append(FlatCase(((4 * n, 2),), ("int64",)))
    return cases


def reference_shard(tensors, rank: int | None = None, world_size: int | None = None) -> torch.Tensor:
    rank = dist.get_rank() if rank is None else rank
    world_size = dist.get_world_size() if world_size is None else world_size
    flat = torch.cat([t.reshape(-1) for t in tensors])
    size = math.ceil(flat.numel() / world_size)
    padded = torch.zeros(size * world_size, dtype=flat.dtype)
    padded[:flat.numel()] = flat
    return padded[rank * size:(rank + 1) * size]


def _runs(side, candidate, cases_for, seed, *extra, name):
    """One run per world size, all cases at once; stops at the first that fails to run."""
    rng = random.Random(seed)

    def run_one(world_size: int):
        return run_part(side, world_size, name, candidate, cases_for(world_size, rng), seed, *extra,
                        timeout=TIMEOUT_S, refusal=REFUSAL)

    return runs_until_failure(run_one, WORLD_SIZES)


def _with_seed(problems: list[str], seed: int) -> list[str]:
    return [f"{p}\n  (hidden test seed {seed})" for p in problems]


def checked_runs(student, run, world_sizes, case_for, judge, what: str) -> None:
    """Parts 2 and 3: per world size, a case drawn from a fresh seed, run, judged; one failure lists all."""
    seed = fresh_seed()
    rng = random.Random(seed)
    runs = runs_until_failure(lambda world_size: run(student, case_for(rng, seed), world_size), world_sizes)
    problems = [p for done in runs for p in judge(done, done.cases[0])]
    fail_with(_with_seed(problems, seed), what)


@judging
def _judged(run, judge) -> list[str]:
    """``judge(run, each)`` for each rank's record in each case of a run that completed."""
    return [p for each in ranks_of(run) for p in judge(run, each)]


def _shard_problems(run, each) -> list[str]:
    case, rank, world_size = each.case, each.rank, run.world_size
    found = shard_problems(case, world_size, each.outcome)
    if found or case.mixed:
        return found
    want = reference_shard(case_tensors(case, run.seed, each.index), rank, world_size)
    if close(each.outcome.shard, want):
        return []
    return [f"rank {rank}, {case.describe(world_size)}: expected shard {rank} of the flattened, zero-padded "
            f"tensors, {want.tolist()[:6]}..., got {each.outcome.shard.tolist()[:6]}..."]


def _gather_problems(run, each) -> list[str]:
    case, outcome = each.case, each.outcome
    where = f"rank {each.rank}, {case.describe(run.world_size)}"
    if outcome.raised:
        problems = [f"{where}: raised {outcome.raised}"]
    else:
        problems = gathered_problems(where, outcome.gathered, case_tensors(case, run.seed, each.index))
    return problems + traffic_problems(case, run.world_size, outcome.events, GATHERS, "all-gather")


def _reduce_scatter_problems(run, each) -> list[str]:
    case, outcome, rank, world_size = each.case, each.outcome, each.rank, run.world_size
    where = f"rank {rank}, {case.describe(world_size)}"
    summed = [sum(parts) for parts in zip(*(case_tensors(case, run.seed, each.index, r)
                                             for r in range(world_size)), strict=True)]
    want = reference_shard(summed, rank, world_size)
    problems = []
    if outcome.raised:
        problems.append(f"{where}: raised {outcome.raised}")
    elif not close(outcome.shard, want):
        problems.append(f"{where}: expected shard {rank} of the summed, padded gradients, "
                        f"{want.tolist()[:5]}..., got {summarize(outcome.shard)}")
    return problems + traffic_problems(case, world_size, outcome.events, REDUCE_SCATTERS, "reduce-scatter")


def check_shard_parameters_hidden(shard_parameters) -> None:
    seed, problems = fresh_seed(), []

    def cases_for(world_size, rng):
        return [*hidden_cases(world_size, rng), FlatCase(((3,), (2, 2)), ("float32", "bfloat16"))]

    for run in _runs(shard_side, shard_parameters, cases_for, seed, name="shard_parameters"):
        problems += _judged(run, _shard_problems)
    fail_with(_with_seed(problems, seed), "shard_parameters gave wrong shards")


def check_gather_parameters_hidden(gather_parameters) -> None:
    seed, problems = fresh_seed(), []
    for run in _runs(gather_side, gather_parameters, hidden_cases, seed, reference_shard,
                     name="gather_parameters"):
        problems += _judged(run, _gather_problems)
    fail_with(_with_seed(problems, seed), "gather_parameters did not rebuild the parameters")


def check_reduce_scatter_gradients_hidden(reduce_scatter_gradients) -> None:
    seed, problems = fresh_seed(), []

    def cases_for(world_size, rng):
        return hidden_cases(world_size, rng, dtypes=("float32", "float64"))

    for run in _runs(reduce_scatter_side, reduce_scatter_gradients, cases_for, seed,
                     name="reduce_scatter_gradients"):
        problems += _judged(run, _reduce_scatter_problems)
    fail_with(_with_seed(problems, seed), "reduce_scatter_gradients gave wrong shards")


EXERCISE = Exercise(
    "ch07_zero", "07_zero_fsdp",
    answers=("shard_parameters", "gather_parameters", "reduce_scatter_gradients"),
    points=POINTS, fixtures="zero", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_shard_parameters": (check_shard_parameters_hidden, ("shard_parameters",)),
    "test_gather_parameters": (check_gather_parameters_hidden, ("gather_parameters",)),
    "test_reduce_scatter_gradients": (check_reduce_scatter_gradients_hidden, ("reduce_scatter_gradients",)),
}
