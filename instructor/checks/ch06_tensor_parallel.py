"""Hidden checks of chapter 06 (instructor-only): column/row shards and the tensor-parallel layers.

Each check runs the student's code on real gloo ranks for world sizes 4, 2, 1 and 3 (the shard functions
also for 8), with sizes and values drawn at grading time from a seed taken from os.urandom, in float32
(even world sizes) and float64 (odd ones). Every expected value comes from the unsharded nn.Linear, MLP
or transformer block computed here, in the judging process, never from the student's code; each failure
message names the seed.

Test cells of solutions/06_tensor_parallel/06_tensor_parallel.ipynb, their points, and their hidden checks:

  grade_id                              points  hidden check
  test_shard_columns                       2    check_shard_columns_hidden(shard_columns)
  test_shard_rows                          2    check_shard_rows_hidden(shard_rows)
  test_column_parallel_linear              2    check_column_parallel_linear_hidden(ColumnParallelLinear)
  test_row_parallel_linear                 3    check_row_parallel_linear_hidden(RowParallelLinear)
  test_tensor_parallel_mlp                 2    check_tensor_parallel_mlp_hidden(Column.., Row..)
  test_tensor_parallel_mlp_traffic         2    check_tensor_parallel_mlp_traffic_hidden(Column.., Row..)
                                          --
                                          13

(The whole transformer block, its splits chosen by the student, is graded in ch06_sequence_parallel.py.)

What each one demands (every check fails if the code raises or hangs):
- shards: on every rank, a layer made of the column shard gives that rank's slice of the output
  features; the row shards, fed their slices of the input features, sum (plus the whole bias, returned
  once) to the layer's output; an optimizer step on a shard leaves the layer as it was (new tensors, not
  views); a size that does not divide by N raises ValueError.
- layers, MLP: on every rank the output, the input gradient and every parameter gradient equal
  the unsharded model's (for a sharded parameter: the local layer's gradient on this rank's activations).
- traffic: on 2, 3 and 4 ranks exactly one all_reduce of the MLP's output bytes in forward and one of
  its input gradient's in backward, and no other collective (values are not judged here).
Every run is under the exercise's refusal (course_lib, DTensor and the functional collectives: REFUSAL in
course_lib/grading/checks/ch06_tensor_parallel/visible.py), which costs the check that meets it. The expected
points of known-wrong submissions: autograde_tests/fixtures/tensor_parallel/expected_scores.json.
"""

from __future__ import annotations

import random

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch06_tensor_parallel.judge import traffic_problems, value_problems
from course_lib.grading.checks.ch06_tensor_parallel.ranks import LayerCase, run_layers
from course_lib.grading.checks.ch06_tensor_parallel.shards import shard_layouts, shard_problems
from course_lib.grading.checks.ch06_tensor_parallel.visible import REFUSAL, students_of

from ._seeds import fresh_seed

WORLD_SIZES = (4, 2, 1, 3)          # the usual case first, so a wrong layer fails fast
SHARD_WORLD_SIZES = (1, 2, 3, 4, 8)
TIMEOUT_S = 20                      # per run of one world size; a correct layer needs well under 1 s
POINTS = {"test_shard_columns": 2, "test_shard_rows": 2, "test_column_parallel_linear": 2,
          "test_row_parallel_linear": 3, "test_tensor_parallel_mlp": 2, "test_tensor_parallel_mlp_traffic": 2}


def hidden_cases(kind: str, world_size: int, rng: random.Random) -> list[LayerCase]:
    """One case: sizes divisible by 1, 2, 3 and 4 (12 heads for the block); float64 on odd world sizes."""
    dim = 24 if kind == "block" else 12 * rng.randint(1, 2)
    return [LayerCase(kind, batch=rng.randint(1, 3), seq=rng.randint(2, 4), dim=dim,
                      hidden=12 * rng.randint(2, 3), heads=12,
                      dtype="float64" if world_size % 2 else "float32")]


def _with_seed(problems: list[str], seed: int) -> list[str]:
    return [f"{p}\n  (hidden test seed {seed})" for p in dict.fromkeys(problems)]


def _layer_problems(students: dict, kind: str, judge, world_sizes=WORLD_SIZES) -> tuple[list[str], int]:
    seed = fresh_seed(5)
    rng = random.Random(seed)

    def run_one(world_size: int):
        return run_layers(students, world_size, hidden_cases(kind, world_size, rng), seed, TIMEOUT_S)

    return [p for run in runs_until_failure(run_one, world_sizes) for p in judge(run)], seed


def _check_shards(student, name: str, kind: str) -> None:
    seed = fresh_seed(5)
    layouts = shard_layouts(SHARD_WORLD_SIZES, random.Random(seed))
    problems = shard_problems(students_of(**{name: student}), kind, layouts, seed, TIMEOUT_S)
    fail_with(_with_seed(problems, seed), f"{name} is wrong on hidden sizes")


def check_shard_columns_hidden(shard_columns) -> None:
    """Column shards reproduce each rank's output features for many sizes; odd sizes raise ValueError."""
    _check_shards(shard_columns, "shard_columns", "column")


def check_shard_rows_hidden(shard_rows) -> None:
    """Row shards sum to the layer (bias once) for many sizes; odd sizes raise ValueError."""
    _check_shards(shard_rows, "shard_rows", "row")


def check_column_parallel_linear_hidden(ColumnParallelLinear) -> None:  # noqa: N803 - the student's class
    """Output slice, input gradient and shard gradients of one column-parallel layer."""
    problems, seed = _layer_problems(students_of(ColumnParallelLinear=ColumnParallelLinear), "column",
                                     value_problems)
    fail_with(_with_seed(problems, seed), "ColumnParallelLinear is wrong on hidden cases")


def check_row_parallel_linear_hidden(RowParallelLinear) -> None:  # noqa: N803
    """Whole output (bias once), input-slice gradient and shard gradients of one row-parallel layer."""
    problems, seed = _layer_problems(students_of(RowParallelLinear=RowParallelLinear), "row", value_problems)
    fail_with(_with_seed(problems, seed), "RowParallelLinear is wrong on hidden cases")


def _pair(column, row) -> dict:
    return students_of(ColumnParallelLinear=column, RowParallelLinear=row)


def check_tensor_parallel_mlp_hidden(ColumnParallelLinear, RowParallelLinear) -> None:  # noqa: N803
    """The Megatron MLP equals the unsharded one in output and every gradient."""
    problems, seed = _layer_problems(_pair(ColumnParallelLinear, RowParallelLinear), "mlp", value_problems)
    fail_with(_with_seed(problems, seed), "the tensor-parallel MLP is wrong on hidden cases")


def check_tensor_parallel_mlp_traffic_hidden(ColumnParallelLinear, RowParallelLinear) -> None:  # noqa: N803
    """One all-reduce of the right size forward, one backward, nothing else (2, 3 and 4 ranks)."""
    problems, seed = _layer_problems(_pair(ColumnParallelLinear, RowParallelLinear), "mlp", traffic_problems,
                                     world_sizes=(4, 2, 3))
    fail_with(_with_seed(problems, seed), "the tensor-parallel MLP does not communicate like Megatron's")


EXERCISE = Exercise(
    "ch06_tensor_parallel", "06_tensor_parallel",
    answers=("shard_columns", "shard_rows", "ColumnParallelLinear", "RowParallelLinear"),
    points=POINTS, fixtures="tensor_parallel", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_shard_columns": (check_shard_columns_hidden, ("shard_columns",)),
    "test_shard_rows": (check_shard_rows_hidden, ("shard_rows",)),
    "test_column_parallel_linear": (check_column_parallel_linear_hidden, ("ColumnParallelLinear",)),
    "test_row_parallel_linear": (check_row_parallel_linear_hidden, ("RowParallelLinear",)),
    "test_tensor_parallel_mlp": (
        check_tensor_parallel_mlp_hidden, ("ColumnParallelLinear", "RowParallelLinear")),
    "test_tensor_parallel_mlp_traffic": (
        check_tensor_parallel_mlp_traffic_hidden, ("ColumnParallelLinear", "RowParallelLinear")),
}
