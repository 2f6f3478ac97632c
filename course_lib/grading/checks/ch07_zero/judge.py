"""The student-facing side of chapter 07's flat-parameter checks: shards, gathered parameters and
reduce-scattered gradients against the expected tensors, and the collectives each part may call.
"""

from __future__ import annotations

import torch

from course_lib.grading.checks.ch07_zero.ranks import FlatCase, ShardOutcome


def close(actual, expected) -> bool:
    if not isinstance(actual, torch.Tensor):
        return False
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if expected.is_floating_point():
        tolerance = 2e-2 if expected.dtype == torch.bfloat16 else 1e-5
        return bool(torch.allclose(actual.double(), expected.double(), rtol=tolerance, atol=tolerance))
    return bool(torch.equal(actual, expected))


def tensor_problem(where: str, got, shape, dtype: torch.dtype, what: str) -> str | None:
    """What is wrong with a returned tensor's kind, one thing at a time: type, dtype, then shape."""
    if not isinstance(got, torch.Tensor):
        return f"{where}: expected {what} as a tensor, got {summarize(got)}"
    if got.dtype != dtype:
        return f"{where}: {what} has dtype {got.dtype}; expected {dtype}, the dtype of the tensors given"
    if tuple(got.shape) != tuple(shape):
        return f"{where}: {what} has shape {tuple(got.shape)}; expected {tuple(shape)}"
    return None


def shard_problems(case: FlatCase, world_size: int, outcome: ShardOutcome) -> list[str]:
    """Size, dtype, refusal of mixed dtypes, inputs untouched: what can be said of one rank's shard alone."""
    where = case.describe(world_size)
    if case.mixed:
        return [] if outcome.raised and outcome.raised.startswith("TypeError") else [
            f"{where}: tensors of different dtypes cannot share one flat buffer: raise TypeError "
            f"(got {outcome.raised or 'no error'})"]
    if outcome.raised:
        return [f"{where}: raised {outcome.raised}"]
    problems = [] if outcome.unchanged else [f"{where}: the tensors you were given changed: leave them"]
    want = case.shard_numel(world_size)
    found = tensor_problem(where, outcome.shard, (want,), case.dtype,
                           f"the shard (1-D, ceil({case.numel}/{world_size}) = {want} elements)")
    return problems + ([found] if found else [])


def traffic_problems(case: FlatCase, world_size: int, events, allowed: tuple[str, ...], what: str) -> list:
    """Exactly one collective of ``allowed``, moving the whole padded buffer, and nothing else."""
    where = case.describe(world_size)
    want = case.bytes_moved(world_size)
    if len(events) != 1:
        return [f"{where}: expected exactly one {what}, recorded {[op for op, _ in events] or 'no call'}"]
    op, nbytes = events[0]
    if op not in allowed:
        return [f"{where}: expected one {what} ({' or '.join(allowed)}), recorded {op}"]
    if nbytes != want:
        return [f"{where}: the {what} moved {nbytes} bytes; the padded buffer is {world_size} shards of "
                f"{case.shard_numel(world_size)} elements = {want} bytes"]
    return []


def gathered_problems(where: str, got, expected: list[torch.Tensor]) -> list[str]:
    """The gathered list against the original tensors: count, then each tensor's dtype, shape, values."""
    if not isinstance(got, list) or len(got) != len(expected):
        return [f"{where}: expected a list of {len(expected)} tensors (the padding is not a parameter), "
                f"got {summarize(got)}"]
    for index, (mine, want) in enumerate(zip(got, expected, strict=True)):
        found = tensor_problem(where, mine, want.shape, want.dtype, f"tensor {index}")
        if found:
            return [found]
        if not close(mine, want):
            return [f"{where}: tensor {index} holds other values than the original "
                    f"({want.reshape(-1)[:3].tolist()}... expected, {mine.reshape(-1)[:3].tolist()}... got)"]
    return []


def summarize(value) -> str:
    """A short description of what a student's function returned, for messages."""
    if isinstance(value, list):
        return f"{len(value)} tensors of shapes {[tuple(getattr(v, 'shape', ())) for v in value]}"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
    return str(value)
