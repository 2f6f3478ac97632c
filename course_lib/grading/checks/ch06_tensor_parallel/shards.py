"""Chapter 06's shard functions on one process, judged against nn.Linear's own output.

``shard_columns``/``shard_rows`` must cut a layer's weight (and bias) so that each rank's piece
reproduces its share of the whole layer, and refuse with ValueError sizes that do not split evenly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import judging, ranks_of, run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun
from course_lib.grading.checks.ch06_tensor_parallel.judge import _close, _filled, _shape
from course_lib.grading.checks.ch06_tensor_parallel.ranks import NAMES, _student_frames


@dataclass(frozen=True)
class ShardOutcome:
    """One rank's shard of one layout: its weight and bias, which of the layer's tensors an optimizer step
    on it changes (a view's), or the ValueError's words when it refused the sizes."""

    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    trains: list = field(default_factory=list)
    value_error: str | None = None


def _shard_cases(kind: str, layouts) -> list[tuple[int, int]]:
    """(layout index, rank) for every rank of every layout of ``kind`` (column: even indices, row: odd)."""
    first = 0 if kind == "column" else 1
    return [(index, r) for index in range(first, len(layouts), 2) for r in range(layouts[index][2])]


def _run_shards(rank, world_size, student, layouts, seed, cases):
    """One process: the student's shard for every (layout index, rank) case, cut from the layout's layer."""
    function = student.resolve()
    linears, outcomes = {}, []
    for index, r in cases:
        in_features, out_features, n, bias = layouts[index]
        if index not in linears:   # one layer per layout: every rank's shard is cut from the same weights
            linears[index] = _filled(nn.Linear(in_features, out_features, bias=bias), seed + index,
                                     torch.float32)
        linear = linears[index]
        try:
            weight, shard_bias = function(linear, r, n)
            outcomes.append({"weight": weight.detach().clone(),
                             "bias": None if shard_bias is None else shard_bias.detach().clone(),
                             "trains": _trains_the_layer(linear, weight, shard_bias)})
        except ValueError as error:
            outcomes.append({"value_error": str(error)})
    return outcomes


def _trains_the_layer(linear: nn.Linear, weight, bias) -> list[str]:
    """Which of the layer's tensors an optimizer step on the shard changes (views share their memory);
    the layer is put back as it was, so the next rank's shard is cut from the same weights."""
    saved = {name: p.detach().clone() for name, p in linear.named_parameters()}
    with torch.no_grad():
        for shard in (weight, bias):
            if isinstance(shard, torch.Tensor) and shard.is_floating_point():
                shard.sub_(0.5)       # what one SGD step with gradient 0.5 and lr 1 does to a parameter
        changed = [name for name, p in linear.named_parameters() if not torch.equal(p, saved[name])]
        for name, p in linear.named_parameters():
            p.copy_(saved[name])
    return changed


def shard_layouts(world_sizes, rng: random.Random) -> list[tuple]:
    """(in, out, N, bias), column then row: sizes divisible by N, and ones that are not (ValueError)."""
    layouts = []
    for n in world_sizes:
        a, b = n * rng.randint(1, 3), n * rng.randint(2, 4) + (1 if n == 1 else 0)
        layouts += [(a + 1, b, n, True), (b, a + 1, n, True), (a + 2, b, n, False), (b, a + 2, n, False)]
    odd = max(world_sizes) + 1 if max(world_sizes) > 1 else None
    if odd:
        n = max(world_sizes)
        layouts += [(3, n * 2 + 1, n, True), (n * 2 + 1, 3, n, True)]
    return layouts


def run_shards(students: dict, kind: str, layouts, seed: int, timeout: float) -> RankRun:
    """The student's shard function of ``kind`` (column/row) on its layouts, in one process; a failure or a
    hang is recorded in the run, never raised."""
    name = NAMES[0] if kind == "column" else NAMES[1]
    cases = _shard_cases(kind, layouts)
    text = FailureText(name, raised="{subject} raised: {summary}", frames=_student_frames,
                       hung=f"the shard functions did not return within {timeout:g} s")
    return run_answer(_run_shards, 1, students[name], list(layouts), seed, cases, record=ShardOutcome,
                      text=text, timeout=timeout, cases=cases)


@judging
def _layout_problems(run: RankRun, kind: str, layouts, seed: int) -> list[str]:
    """Every layout's shards, rank by rank, judged against the layer they were cut from."""
    by_layout: dict[int, list[ShardOutcome]] = {}
    for each in ranks_of(run):
        by_layout.setdefault(each.case[0], []).append(each.outcome)
    problems = []
    for index, per_rank in by_layout.items():
        problems += _judge_shards(kind, layouts[index], per_rank, seed + index)
    return problems


def shard_problems(students: dict, kind: str, layouts, seed: int, timeout: float) -> list[str]:
    """For kind column/row: every rank's shard reproduces nn.Linear; sizes not divisible raise ValueError."""
    return _layout_problems(run_shards(students, kind, layouts, seed, timeout), kind, layouts, seed)


def _judge_shards(kind: str, layout, per_rank, seed: int) -> list[str]:
    in_features, out_features, n, bias = layout
    name = "shard_columns" if kind == "column" else "shard_rows"
    where = f"{name}(nn.Linear({in_features}, {out_features}, bias={bias}), rank, {n})"
    divisible = (out_features if kind == "column" else in_features) % n == 0
    if not divisible:
        if all(shard.value_error is not None for shard in per_rank):
            return []
        return [f"{where}: {out_features if kind == 'column' else in_features} features do not split evenly "
                f"over {n} ranks, so it must raise ValueError (saying so), not return a shard"]
    linear = _filled(nn.Linear(in_features, out_features, bias=bias), seed, torch.float32)
    x = torch.randn(5, in_features, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = linear(x)
        return _shard_value_problems(kind, where, linear, x, full, per_rank, n)


def _shard_value_problems(kind, where, linear, x, full, per_rank, n) -> list[str]:
    if any(shard.value_error is not None for shard in per_rank):
        return [f"{where}: raised ValueError although the sizes divide evenly"]
    shared = next(((r, shard.trains) for r, shard in enumerate(per_rank) if shard.trains), None)
    if shared:
        rank, names = shared
        return [f"{where}, rank {rank}: one optimizer step on your shard changed the layer's "
                f"{' and '.join(names)}: the shard shares its memory (a view), so training it trains the "
                "original; return new tensors"]
    problems, total = [], torch.zeros_like(full)
    for r, shard in enumerate(per_rank):
        inputs = x if kind == "column" else torch.tensor_split(x, n, dim=-1)[r]
        bias = shard.bias if kind == "column" else None
        try:
            local = nn.functional.linear(inputs, shard.weight, bias)
        except RuntimeError as error:
            problems.append(f"{where}, rank {r}: a layer from your shard (weight {_shape(shard.weight)}) "
                            f"cannot take its input {_shape(inputs)}: {str(error).splitlines()[0]}")
            continue
        if kind == "column" and not _close(local, torch.tensor_split(full, n, dim=-1)[r], "float32"):
            problems.append(f"{where}, rank {r}: linear(x, weight, bias) with your shard is not output "
                            f"features {r}/{n} of the whole layer's output")
        total = total + local if local.shape == full.shape else total
    if kind == "row" and not problems:
        full_bias = linear.bias.detach() if linear.bias is not None else None
        got_bias = per_rank[0].bias
        if (full_bias is None) != (got_bias is None) or (full_bias is not None
                                                         and not torch.equal(got_bias, full_bias)):
            problems.append(f"{where}: the bias returned must be the layer's whole bias (None if none)")
        elif not _close(total + (0 if full_bias is None else full_bias), full, "float32"):
            problems.append(f"{where}: the sum over ranks of linear(x_r, weight_r) plus the bias is not the "
                            "whole layer's output (x_r: rank r's slice of the input features)")
    return problems
