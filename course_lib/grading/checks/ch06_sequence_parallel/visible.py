"""Visible checks of chapter 06's block and sequence-parallel parts: the student's code against the
unsharded block and sub-layer, and its recorded traffic; no parallel layer is implemented here.
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import runs_until_failure
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch06_sequence_parallel.judge import PartCase, traffic_problems, value_problems
from course_lib.grading.checks.ch06_sequence_parallel.ranks import run_parts
from course_lib.grading.checks.ch06_tensor_parallel.visible import REFUSAL

VISIBLE_SEED = 2024
VISIBLE_TIMEOUT_S = 20
VISIBLE_CASES = {"block": PartCase("block", dim=16, hidden=32, heads=4),
                 "sp": PartCase("sp", seq=8, dim=8, hidden=16)}


def students_of(**candidates) -> dict:
    """{name: StudentFunction}, each under the tensor-parallel refusal (DTensor, course_lib)."""
    return {name: as_student_function(candidate, name, refusal=REFUSAL)
            for name, candidate in candidates.items()}


def part_runs(students: dict, kind: str, world_sizes, case: PartCase | None = None, seed: int = VISIBLE_SEED,
              timeout: float = VISIBLE_TIMEOUT_S) -> list:
    """One run per world size of one case; stops at the first run that raises or hangs."""
    return runs_until_failure(
        lambda world_size: run_parts(students, world_size, [case or VISIBLE_CASES[kind]], seed, timeout),
        world_sizes)


def _check(students, kind, judge, world_sizes, what, holds):
    problems = [p for run in part_runs(students, kind, world_sizes) for p in judge(run)]
    fail_with(problems, what)
    print(f"{holds} on {world_sizes} ranks")


def check_parallelize_block(parallelize_block) -> None:
    """Visible test: every Linear of the block split, output and every gradient as the unsharded block's."""
    _check(students_of(parallelize_block=parallelize_block), "block", value_problems, (1, 2, 4),
           "the tensor-parallel block differs from the unsharded block",
           "parallelize_block: every Linear split; output and every gradient equal the unsharded block's")


def check_parallelize_block_traffic(parallelize_block) -> None:
    """Visible test: one all-reduce for the attention and one for the MLP in the forward, nothing else."""
    _check(students_of(parallelize_block=parallelize_block), "block", traffic_problems, (2, 4),
           "the tensor-parallel block does not communicate like Megatron's",
           "parallelize_block: one all-reduce per attention and per MLP forward, only all-reduces backward,")


def check_sequence_parallel_mlp(SequenceParallelMLP) -> None:  # noqa: N803 - the student's class
    """Visible test: this rank's tokens of x + mlp(norm(x)) and every gradient, after synchronisation."""
    _check(students_of(SequenceParallelMLP=SequenceParallelMLP), "sp", value_problems, (1, 2, 4),
           "the sequence-parallel MLP differs from the unsharded sub-layer",
           "SequenceParallelMLP: this rank's tokens and every gradient equal the unsharded sub-layer's")


def check_sequence_parallel_traffic(SequenceParallelMLP) -> None:  # noqa: N803
    """Visible test: g and g-bar each way; the replicated parameters' gradients all-reduced."""
    _check(students_of(SequenceParallelMLP=SequenceParallelMLP), "sp", traffic_problems, (2, 4),
           "the sequence-parallel MLP does not communicate like Korthikanti's",
           "SequenceParallelMLP: all-gather + reduce-scatter forward and backward, then the norm's and "
           "down's bias gradients all-reduced,")
