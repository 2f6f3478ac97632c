"""Hidden checks of chapter 06's block and sequence-parallel parts (instructor-only).

Test cells of solutions/06_tensor_parallel/06_tensor_parallel.ipynb, their points, and their hidden checks:

  grade_id                          points  hidden check
  test_parallelize_block               2    check_parallelize_block_hidden(parallelize_block)
  test_parallelize_block_traffic       2    check_parallelize_block_traffic_hidden(parallelize_block)
  test_sequence_parallel_mlp           3    check_sequence_parallel_mlp_hidden(SequenceParallelMLP)
  test_sequence_parallel_traffic       2    check_sequence_parallel_traffic_hidden(SequenceParallelMLP)
                                      --
                                       9

What each demands (every check fails if the code raises or hangs), on world sizes 4, 2, 1 and 3 (traffic:
4, 2, 3), sizes drawn from a seed taken at grading time (named in the failure), float64 on odd world sizes:
- the block: the student chooses the splits; every Linear's weight must be split by output or by input
  features (read from its shape), and the output, the input gradient and every parameter gradient equal the
  unsharded block's (a shard's: the local layer's closed form under the split it chose). Traffic: exactly two
  all-reduces of the activation in the forward (one per attention, one per MLP); backward only all-reduces
  of the input gradient's bytes.
- sequence parallel, x + down(gelu(up(norm(x)))) on this rank's seq / N tokens: this rank's output tokens,
  its input tokens' gradient, and after finish_gradient_synchronization() the norm's and down's bias
  gradients whole (the unsharded model's), up's and down's weight shards' local. Traffic: all-gather then
  reduce-scatter of the whole activation forward, the same backward, and all-reduces of 3 * dim elements
  (and nothing else) to synchronise.
Every run is under chapter 06's refusal (course_lib, DTensor). Expected points of known-wrong submissions:
autograde_tests/fixtures/sequence_parallel/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch06_sequence_parallel.judge import PartCase, traffic_problems, value_problems
from course_lib.grading.checks.ch06_sequence_parallel.ranks import run_parts
from course_lib.grading.checks.ch06_sequence_parallel.visible import students_of
from course_lib.grading.checks.ch06_tensor_parallel.visible import REFUSAL

from ._seeds import fresh_seed

WORLD_SIZES = (4, 2, 1, 3)
TRAFFIC_WORLD_SIZES = (4, 2, 3)
TIMEOUT_S = 20
POINTS = {"test_parallelize_block": 2, "test_parallelize_block_traffic": 2, "test_sequence_parallel_mlp": 3,
          "test_sequence_parallel_traffic": 2}


def hidden_case(kind: str, world_size: int, rng: random.Random) -> PartCase:
    """Sizes divisible by 1, 2, 3 and 4 (12 heads for the block; seq a multiple of the world size)."""
    dtype = "float64" if world_size % 2 else "float32"
    if kind == "block":
        return PartCase("block", batch=rng.randint(1, 2), seq=rng.randint(2, 4), dim=24,
                        hidden=12 * rng.randint(2, 3), heads=12, dtype=dtype)
    return PartCase("sp", batch=rng.randint(1, 3), seq=world_size * rng.randint(1, 3),
                    dim=12 * rng.randint(1, 2), hidden=12 * rng.randint(2, 3), dtype=dtype)


def _hidden(students: dict, kind: str, judge, world_sizes, what: str) -> None:
    seed = fresh_seed(5)
    rng = random.Random(seed)

    def run_one(world_size: int):
        return run_parts(students, world_size, [hidden_case(kind, world_size, rng)], seed, TIMEOUT_S)

    runs = runs_until_failure(run_one, world_sizes)
    problems = [p for run in runs for p in judge(run)]
    fail_with([f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)], what)


def check_parallelize_block_hidden(parallelize_block) -> None:
    """Every Linear split; output and gradients equal the unsharded block's."""
    _hidden(students_of(parallelize_block=parallelize_block), "block", value_problems, WORLD_SIZES,
            "the tensor-parallel block is wrong on hidden cases")


def check_parallelize_block_traffic_hidden(parallelize_block) -> None:
    """One all-reduce per attention and per MLP in the forward."""
    _hidden(students_of(parallelize_block=parallelize_block), "block", traffic_problems, TRAFFIC_WORLD_SIZES,
            "the tensor-parallel block does not communicate like Megatron's")


def check_sequence_parallel_mlp_hidden(SequenceParallelMLP) -> None:  # noqa: N803 - the student's class
    """This rank's tokens and every gradient of the sequence-parallel sub-layer."""
    _hidden(students_of(SequenceParallelMLP=SequenceParallelMLP), "sp", value_problems, WORLD_SIZES,
            "the sequence-parallel MLP is wrong on hidden cases")


def check_sequence_parallel_traffic_hidden(SequenceParallelMLP) -> None:  # noqa: N803
    """g and g-bar's collectives each way, then the replicated gradients all-reduced."""
    _hidden(students_of(SequenceParallelMLP=SequenceParallelMLP), "sp", traffic_problems, TRAFFIC_WORLD_SIZES,
            "the sequence-parallel MLP does not communicate like Korthikanti's")


EXERCISE = Exercise(
    "ch06_sequence_parallel", "06_tensor_parallel", answers=("parallelize_block", "SequenceParallelMLP"),
    points=POINTS, fixtures="sequence_parallel", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_parallelize_block": (check_parallelize_block_hidden, ("parallelize_block",)),
    "test_parallelize_block_traffic": (check_parallelize_block_traffic_hidden, ("parallelize_block",)),
    "test_sequence_parallel_mlp": (check_sequence_parallel_mlp_hidden, ("SequenceParallelMLP",)),
    "test_sequence_parallel_traffic": (check_sequence_parallel_traffic_hidden, ("SequenceParallelMLP",)),
}
