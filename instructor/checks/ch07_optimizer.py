"""Hidden checks of chapter 07, part 2 (instructor-only): the ZeRO-1 ShardedOptimizer on 1 to 4 ranks.

Models are drawn from a seed taken at grading time (named in every failure message): widths, depths
and the step at which a param group is added vary. Each rank trains its rows with the student's
optimizer wrapped around torch.optim.AdamW (weight decay on), two param groups, a tied and a frozen
weight; the judge trains the same model unsharded with torch's AdamW and compares.

  grade_id                          points  hidden check
  test_sharded_optimizer_values        4    check_sharded_optimizer_values_hidden(ShardedOptimizer)
  test_sharded_optimizer_memory        2    check_sharded_optimizer_memory_hidden(ShardedOptimizer)
  test_sharded_optimizer_api           2    check_sharded_optimizer_api_hidden(ShardedOptimizer)

values: 10 steps equal AdamW's on every rank, for 4, 3, 2 and 1 ranks. memory: each rank's optimizer
state (every tensor reachable from the optimizer that is not a parameter or gradient) is at most 1/N of
AdamW's plus one parameter's share, and the ranks together hold all of it, on 2 and 4 ranks. api: a
torch.optim.Optimizer; add_param_group mid-training, zero_grad clearing every gradient, state_dict whose
param_groups equal AdamW's and whose state entries, split over the ranks without overlap, equal AdamW's.
"""

from __future__ import annotations

from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch07_optimizer import (
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
    student = as_student_function(ShardedOptimizer, "ShardedOptimizer")
    checked_runs(student, lambda *a: run_optimizer(*a, TIMEOUT_S), world_sizes, case_for, judge, what)


def check_sharded_optimizer_values_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(5, 17), depth=rng.randint(3, 6), seed=seed % 10_000)

    _checked(ShardedOptimizer, (4, 3, 2, 1), case_for, value_problems,
             "ShardedOptimizer differs from unsharded torch.optim.AdamW")


def check_sharded_optimizer_memory_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(20, 28), depth=8, steps=2, seed=seed % 10_000)

    _checked(ShardedOptimizer, (4, 2), case_for, memory_problems,
             "ShardedOptimizer does not shard the optimizer state")


def check_sharded_optimizer_api_hidden(ShardedOptimizer) -> None:  # noqa: N803
    def case_for(rng, seed):
        return OptimizerCase(width=rng.randint(5, 13), steps=6, add_head_at=rng.randint(1, 4),
                             seed=seed % 10_000)

    def judge(run, case):
        return value_problems(run, case) + api_problems(run, case)

    _checked(ShardedOptimizer, (3, 1), case_for, judge,
             "ShardedOptimizer does not behave as a torch optimizer")
