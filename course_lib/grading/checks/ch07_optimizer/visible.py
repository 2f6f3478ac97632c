"""Checks of chapter 07, part 2 (a ZeRO-1 sharded optimizer) against unsharded ``torch.optim.AdamW``.

The ranks train with the student's optimizer (ch07_optimizer_ranks.py); the judging side here trains the
same model on the whole batch with torch's AdamW and compares values, the state each rank keeps, what one
step() sends, and the torch behaviour the contract names (param groups, zero_grad, step(closure),
state_dict and load_state_dict). torch's own ZeroRedundancyOptimizer is refused, as all of chapter 07 refuses.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import run_training_answer
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch07_optimizer.judge import (
    api_problems,
    memory_problems,
    unsharded_state_bytes,
    value_problems,
)
from course_lib.grading.checks.ch07_optimizer.ranks import (
    OptimizerCase,
    OptimizerOutcome,
    optimizer_side,
    state_bytes,
)
from course_lib.grading.checks.ch07_zero.ranks import chapter_refusal

REFUSAL = chapter_refusal("your ShardedOptimizer")
VISIBLE_TIMEOUT_S = 30

__all__ = ["REFUSAL", "OptimizerCase", "api_problems", "check_sharded_optimizer_api",
           "check_sharded_optimizer_memory", "check_sharded_optimizer_values", "memory_problems",
           "run_optimizer", "state_bytes", "value_problems"]


def run_optimizer(candidate, case: OptimizerCase, world_size: int, timeout: float):
    student = as_student_function(candidate, "ShardedOptimizer", refusal=REFUSAL)
    return run_training_answer(optimizer_side, world_size, student, case, record=OptimizerOutcome,
                               name="ShardedOptimizer", timeout=timeout, cases=(case,), one_per_rank=True)


# A large frozen projection (8 x width x width) in the values and memory cases; closures in values and api.
VISIBLE_VALUES = OptimizerCase(closures=True, frozen_wide=8)
VISIBLE_MEMORY = OptimizerCase(width=24, depth=8, steps=2, frozen_wide=8)
VISIBLE_API = OptimizerCase(steps=6, add_head_at=2, closures=True, reload_at=4)


def check_sharded_optimizer_values(ShardedOptimizer, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: 10 AdamW steps (two param groups, a tied, a frozen and a large frozen weight, every
    other step through step(closure)) equal torch's."""
    run = run_optimizer(ShardedOptimizer, VISIBLE_VALUES, world_size, VISIBLE_TIMEOUT_S)
    fail_with(value_problems(run, VISIBLE_VALUES), "ShardedOptimizer differs from unsharded AdamW")
    print(f"ShardedOptimizer: {VISIBLE_VALUES.steps} steps on {world_size} ranks equal torch.optim.AdamW's")


def check_sharded_optimizer_memory(ShardedOptimizer, world_size: int = 4) -> None:  # noqa: N803
    """Visible test: each rank keeps about 1/N of AdamW's state, together they keep all of it, and one
    step() sends each updated parameter once."""
    run = run_optimizer(ShardedOptimizer, VISIBLE_MEMORY, world_size, VISIBLE_TIMEOUT_S)
    fail_with(memory_problems(run, VISIBLE_MEMORY),
              "ShardedOptimizer does not shard the optimizer state as ZeRO-1 does")
    total, _ = unsharded_state_bytes(VISIBLE_MEMORY)
    calls = len(run.records[0].step_events)
    print(f"ShardedOptimizer: state per rank {[o.state_bytes for o in run.records]} bytes, unsharded "
          f"AdamW {total} bytes; one step() made {calls} calls to send the updated parameters")


def check_sharded_optimizer_api(ShardedOptimizer, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: add_param_group mid-training, zero_grad, step(closure), state_dict and a rebuild
    from load_state_dict behave as torch's do."""
    run = run_optimizer(ShardedOptimizer, VISIBLE_API, world_size, VISIBLE_TIMEOUT_S)
    fail_with(value_problems(run, VISIBLE_API) + api_problems(run, VISIBLE_API),
              "ShardedOptimizer does not behave as a torch optimizer")
    print("ShardedOptimizer: add_param_group, zero_grad, step(closure), state_dict and load_state_dict "
          "behave as torch.optim.AdamW's")
