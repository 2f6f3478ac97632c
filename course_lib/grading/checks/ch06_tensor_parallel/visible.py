"""Visible checks of chapter 06's exercise, and the comparison with DTensor's ``parallelize_module``.

Every check compares the student's layers with the unsharded nn.Linear / MLP / transformer block (or with
PyTorch's own tensor parallelism): no parallel layer is implemented here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from course_lib.grading.attempt.judge_runner import failures, ranks_of, run_answer, runs_until_failure
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch06_tensor_parallel.judge import _close, traffic_problems, value_problems
from course_lib.grading.checks.ch06_tensor_parallel.ranks import (
    NAMES,
    LayerCase,
    _sharded,
    backpropagate,
    build_full,
    case_tensors,
    run_layers,
)
from course_lib.grading.checks.ch06_tensor_parallel.shards import shard_layouts, shard_problems
from course_lib.grading.checks.ch06_vocab_loss.visible import TP_MODULES

# DTensor's tensor parallelism (parallelize_module, ColwiseParallel, RowwiseParallel) places the collectives
# this exercise is about, through functional collectives the traffic recorder does not see.
REFUSAL = Refusal("your tensor-parallel code", modules=TP_MODULES,
                  why="the exercise is to split the layers and place the collectives yourself")

VISIBLE_WORLD_SIZES = (1, 2, 4)
VISIBLE_TIMEOUT_S = 20
VISIBLE_SEED = 2024
DTENSOR_TIMEOUT_S = 60
VISIBLE_CASES = {"column": LayerCase("column"), "row": LayerCase("row"), "mlp": LayerCase("mlp"),
                 "block": LayerCase("block", dim=16, hidden=32, heads=4)}


def students_of(**candidates) -> dict:
    """{name: StudentFunction} for the given functions or classes (or StudentFunctions), each under the
    exercise's refusal."""
    return {name: as_student_function(candidate, name, refusal=REFUSAL)
            for name, candidate in candidates.items()}


def layer_runs(students: dict, kind: str, world_sizes=VISIBLE_WORLD_SIZES, case: LayerCase | None = None,
               seed: int = VISIBLE_SEED, timeout: float = VISIBLE_TIMEOUT_S) -> list:
    """One run per world size of one case; stops at the first run that raises or hangs."""
    return runs_until_failure(
        lambda world_size: run_layers(students, world_size, [case or VISIBLE_CASES[kind]], seed, timeout),
        world_sizes)


def _check_shards(function, name: str, kind: str, holds: str) -> None:
    layouts = shard_layouts(VISIBLE_WORLD_SIZES, random.Random(VISIBLE_SEED))
    problems = shard_problems(students_of(**{name: function}), kind, layouts, VISIBLE_SEED, VISIBLE_TIMEOUT_S)
    fail_with(problems, f"{name} does not give each rank its {kind}-parallel shard")
    print(f"{name}: {holds} on {VISIBLE_WORLD_SIZES} ranks; a size that does not divide raises ValueError")


def check_shard_columns(shard_columns) -> None:
    """Visible test: each rank's column shard gives its slice of the output features; odd sizes raise."""
    _check_shards(shard_columns, "shard_columns", "column", "every rank's shard gives its output features")


def check_shard_rows(shard_rows) -> None:
    """Visible test: row shards applied to their input slices sum to the layer; odd sizes raise."""
    _check_shards(shard_rows, "shard_rows", "row", "the partial outputs sum to the layer's output")


def _check_values(students: dict, kind: str, what: str) -> None:
    problems = [p for run in layer_runs(students, kind) for p in value_problems(run)]
    fail_with(problems, f"{what} differs from the unsharded model")
    print(f"{what}: output and every gradient equal the unsharded model's on {VISIBLE_WORLD_SIZES} ranks")


def check_column_parallel_linear(ColumnParallelLinear) -> None:  # noqa: N803 - the student's class
    """Visible test: rank r's output is its slice of nn.Linear's; input and weight gradients match."""
    _check_values(students_of(ColumnParallelLinear=ColumnParallelLinear), "column", "ColumnParallelLinear")


def check_row_parallel_linear(RowParallelLinear) -> None:  # noqa: N803
    """Visible test: from its input slice, every rank gets nn.Linear's whole output (bias once)."""
    _check_values(students_of(RowParallelLinear=RowParallelLinear), "row", "RowParallelLinear")


def check_tensor_parallel_mlp(ColumnParallelLinear, RowParallelLinear) -> None:  # noqa: N803
    """Visible test: the MLP with up column-parallel and down row-parallel equals the unsharded MLP."""
    students = students_of(ColumnParallelLinear=ColumnParallelLinear, RowParallelLinear=RowParallelLinear)
    _check_values(students, "mlp", "the tensor-parallel MLP")


def check_tensor_parallel_mlp_traffic(ColumnParallelLinear, RowParallelLinear) -> None:  # noqa: N803
    """Visible test: one all-reduce of the output in forward, one of the input gradient in backward."""
    students = students_of(ColumnParallelLinear=ColumnParallelLinear, RowParallelLinear=RowParallelLinear)
    problems = [p for run in layer_runs(students, "mlp", world_sizes=(2, 4)) for p in traffic_problems(run)]
    fail_with(problems, "the tensor-parallel MLP does not communicate like Megatron's")
    case = VISIBLE_CASES["mlp"]
    print(f"the tensor-parallel MLP: exactly one all-reduce of {case.batch * case.seq * case.dim * 4} B "
          "forward and one backward, on 2 and 4 ranks")


def megatron_mlp_plan() -> dict:
    """DTensor's plan for the MLP: ``up`` split by output features, ``down`` by input features."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"up": ColwiseParallel(), "down": RowwiseParallel()}


@dataclass(frozen=True)
class BesideDTensor:
    """One rank's output, input gradient and parameter gradients ({what: tensor}), under DTensor's plan and
    with your layers."""

    dtensor: dict
    yours: dict


def _dtensor_and_yours(rank, world_size, students, case, seed, plan):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world_size,))
    yours = _sharded(case, build_full(case, seed), *(students[n].resolve() for n in NAMES[2:]))  # fails first
    models = {"dtensor": parallelize_module(build_full(case, seed), mesh, plan), "yours": yours}
    results = {}
    for label, model in models.items():
        x, upstream = case_tensors(case, seed)
        x.requires_grad_(True)
        out = model(x)
        backpropagate(out, upstream)
        grads = {name: getattr(p.grad, "to_local", lambda g=p.grad: g)().detach().clone()
                 for name, p in model.named_parameters()}
        results[label] = {"output": out.detach().clone(), "input gradient": x.grad.detach().clone(), **grads}
    return results


def compare_with_dtensor(ColumnParallelLinear, RowParallelLinear, plan: dict | None = None,  # noqa: N803
                         world_size: int = 2, case: LayerCase | None = None) -> dict:
    """Your MLP and DTensor's ``parallelize_module(mlp, mesh, plan)``, side by side on real ranks.

    Raises AssertionError if any rank's output, input gradient or gradient shard differs; returns the
    largest difference per quantity.
    """
    # Imported once here, not once per forked rank: parallelize_module pulls in torch._dynamo (seconds).
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    case = case or VISIBLE_CASES["mlp"]
    students = students_of(ColumnParallelLinear=ColumnParallelLinear, RowParallelLinear=RowParallelLinear)
    plan = megatron_mlp_plan() if plan is None else plan
    run = run_answer(_dtensor_and_yours, world_size, students, case, VISIBLE_SEED, plan,
                     record=BesideDTensor, text=FailureText("your MLP beside DTensor's"),
                     timeout=DTENSOR_TIMEOUT_S, one_per_rank=True)
    fail_with(failures([run]), "your tensor-parallel MLP and DTensor's could not be run side by side")
    problems, largest = [], {}
    for each in ranks_of(run):
        for what, theirs in each.outcome.dtensor.items():
            yours = each.outcome.yours.get(what)
            if not _close(yours, theirs, case.dtype):
                problems.append(f"rank {each.rank}: {what} is {getattr(yours, 'shape', yours)}-shaped or "
                                f"differs from DTensor's (shape {tuple(theirs.shape)})")
            else:
                largest[what] = max(largest.get(what, 0.0), (yours - theirs).abs().max().item())
    fail_with(problems, "your tensor-parallel MLP differs from DTensor's parallelize_module")
    return largest
