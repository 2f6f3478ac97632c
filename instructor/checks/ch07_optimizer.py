"""Hidden checks of chapter 07, part 2 (instructor-only): the ZeRO-1 ShardedOptimizer on 1 to 4 ranks.

Models are drawn from a seed taken at grading time (named in every failure message): widths, depths,
the step at which a param group is added and the one at which the optimizer is rebuilt from its own
state_dict() vary. Each rank trains its rows with the student's optimizer wrapped around
torch.optim.AdamW (weight decay on), two param groups, a tied, a frozen and a large frozen weight, every
other step through step(closure); the judge trains the same model unsharded with torch's AdamW and
compares. torch's ZeroRedundancyOptimizer and FSDP, and course_lib, are refused (chapter 07's Refusal).

  grade_id                          points  hidden check
  test_sharded_optimizer_values        4    check_sharded_optimizer_values_hidden(ShardedOptimizer)
  test_sharded_optimizer_memory        2    check_sharded_optimizer_memory_hidden(ShardedOptimizer)
  test_sharded_optimizer_api           2    check_sharded_optimizer_api_hidden(ShardedOptimizer)

values: 10 steps (closures on odd steps) equal AdamW's on every rank, for 4, 3, 2 and 1 ranks. memory:
each rank's optimizer state (every tensor reachable from the optimizer that is not a parameter or
gradient) is at most 1/N of AdamW's plus one parameter's share (a frozen parameter is nobody's), the ranks
together hold all of it, and one step() sends each updated parameter once (broadcasts or all-gathers, no
all-reduce), on 2 and 4 ranks. api: a torch.optim.Optimizer; add_param_group mid-training, zero_grad
clearing every gradient, step(closure) returning the closure's loss, a rebuild from state_dict() through
load_state_dict() that trains on unchanged, state_dict whose param_groups equal AdamW's and whose state
entries, split over the ranks without overlap, equal AdamW's.
"""

from __future__ import annotations

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch07_optimizer.visible import (
    REFUSAL,
    OptimizerCase,
    api_problems,
    memory_problems,
    run_optimizer,
    value_problems,
)

from .ch07_zero import checked_runs

TIMEOUT_S = 30
POINTS = {"test_sharded_optimizer_values": 4, "test_sharded_optimizer_memory": 2,
          "test_sharded_optimizer_api": 2}


def _checked(ShardedOptimizer, world_sizes, case_for, judge, what) -> None:  # noqa: N803
    checked_runs(ShardedOptimizer, lambda *a: run_optimizer(*a, TIMEOUT_S), world_sizes, case_for, judge,
                 what)


def check_sharded_optimizer_values_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(5, 17), depth=rng.randint(3, 6), seed=seed % 10_000,
                             closures=True, frozen_wide=rng.randint(4, 9))

    _checked(ShardedOptimizer, (4, 3, 2, 1), case_for, value_problems,
             "ShardedOptimizer differs from unsharded torch.optim.AdamW")


def check_sharded_optimizer_memory_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(20, 28), depth=8, steps=2, seed=seed % 10_000,
                             frozen_wide=rng.randint(6, 10))

    _checked(ShardedOptimizer, (4, 2), case_for, memory_problems,
             "ShardedOptimizer does not shard the optimizer state")


def check_sharded_optimizer_api_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(5, 13), steps=6, add_head_at=rng.randint(1, 2),
                             reload_at=rng.randint(3, 5), closures=True, seed=seed % 10_000)

    def judge(run, case):
        return value_problems(run, case) + api_problems(run, case)

    _checked(ShardedOptimizer, (3, 1), case_for, judge,
             "ShardedOptimizer does not behave as a torch optimizer")


EXERCISE = Exercise(
    "ch07_optimizer", "07_zero_fsdp", answers=("ShardedOptimizer",),
    points=POINTS, fixtures="zero", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_sharded_optimizer_values": (check_sharded_optimizer_values_hidden, ("ShardedOptimizer",)),
    "test_sharded_optimizer_memory": (check_sharded_optimizer_memory_hidden, ("ShardedOptimizer",)),
    "test_sharded_optimizer_api": (check_sharded_optimizer_api_hidden, ("ShardedOptimizer",)),
}
