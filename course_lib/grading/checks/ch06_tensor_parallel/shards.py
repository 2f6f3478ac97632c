"""Chapter 06's shard functions on one process, judged against nn.Linear's own output.

``shard_columns``/``shard_rows`` must cut a layer's weight (and bias) so that each rank's piece
reproduces its share of the whole layer, and refuse with ValueError sizes that do not split evenly.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from course_lib.dist import RankFailure, RanksHungError, run_ranks
from course_lib.grading.checks.ch06_tensor_parallel.judge import _close, _filled, _shape
from course_lib.grading.checks.ch06_tensor_parallel.ranks import NAMES, _student_frames


def _run_shards(rank, world_size, students, layouts, seed):
    shard_columns, shard_rows = (students[name].resolve() if name in students else None for name in NAMES[:2])
    results = []
    for index, (in_features, out_features, n, bias) in enumerate(layouts):
        linear = _filled(nn.Linear(in_features, out_features, bias=bias), seed + index, torch.float32)
        function = shard_columns if index % 2 == 0 else shard_rows
        per_rank = []
        if function is None:
            results.append(per_rank)
            continue
        for r in range(n):
            try:
                weight, shard_bias = function(linear, r, n)
                per_rank.append({"weight": weight.detach().clone(),
                                 "bias": None if shard_bias is None else shard_bias.detach().clone(),
                                 "trains": _trains_the_layer(linear, weight, shard_bias)})
            except ValueError as error:
                per_rank.append({"value_error": str(error)})
        results.append(per_rank)
    return results


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


def shard_problems(students: dict, kind: str, layouts, seed: int, timeout: float) -> list[str]:
    """For kind column/row: every rank's shard reproduces nn.Linear; sizes not divisible raise ValueError."""
    try:
        results = run_ranks(_run_shards, 1, students, layouts, seed, timeout=timeout, plain_results=True)[0]
    except RankFailure as error:
        name = NAMES[0] if kind == "column" else NAMES[1]
        return [f"{name} raised: {error.summary}\n{_student_frames(error.remote_traceback)}"]
    except RanksHungError:
        return [f"the shard functions did not return within {timeout:g} s"]
    first = 0 if kind == "column" else 1
    problems = []
    for index in range(first, len(layouts), 2):
        problems += _judge_shards(kind, layouts[index], results[index], seed + index)
    return problems


def _judge_shards(kind: str, layout, per_rank, seed: int) -> list[str]:
    in_features, out_features, n, bias = layout
    name = "shard_columns" if kind == "column" else "shard_rows"
    where = f"{name}(nn.Linear({in_features}, {out_features}, bias={bias}), rank, {n})"
    divisible = (out_features if kind == "column" else in_features) % n == 0
    if not divisible:
        if all("value_error" in shard for shard in per_rank):
            return []
        return [f"{where}: {out_features if kind == 'column' else in_features} features do not split evenly "
                f"over {n} ranks, so it must raise ValueError (saying so), not return a shard"]
    linear = _filled(nn.Linear(in_features, out_features, bias=bias), seed, torch.float32)
    x = torch.randn(5, in_features, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = linear(x)
        return _shard_value_problems(kind, where, linear, x, full, per_rank, n)


def _shard_value_problems(kind, where, linear, x, full, per_rank, n) -> list[str]:
    if any("value_error" in shard for shard in per_rank):
        return [f"{where}: raised ValueError although the sizes divide evenly"]
    shared = next(((r, shard["trains"]) for r, shard in enumerate(per_rank) if shard.get("trains")), None)
    if shared:
        rank, names = shared
        return [f"{where}, rank {rank}: one optimizer step on your shard changed the layer's "
                f"{' and '.join(names)}: the shard shares its memory (a view), so training it trains the "
                "original; return new tensors"]
    problems, total = [], torch.zeros_like(full)
    for r, shard in enumerate(per_rank):
        inputs = x if kind == "column" else torch.tensor_split(x, n, dim=-1)[r]
        bias = shard["bias"] if kind == "column" else None
        try:
            local = nn.functional.linear(inputs, shard["weight"], bias)
        except RuntimeError as error:
            problems.append(f"{where}, rank {r}: a layer from your shard (weight {_shape(shard['weight'])}) "
                            f"cannot take its input {_shape(inputs)}: {str(error).splitlines()[0]}")
            continue
        if kind == "column" and not _close(local, torch.tensor_split(full, n, dim=-1)[r], "float32"):
            problems.append(f"{where}, rank {r}: linear(x, weight, bias) with your shard is not output "
                            f"features {r}/{n} of the whole layer's output")
        total = total + local if local.shape == full.shape else total
    if kind == "row" and not problems:
        full_bias = linear.bias.detach() if linear.bias is not None else None
        got_bias = per_rank[0]["bias"]
        if (full_bias is None) != (got_bias is None) or (full_bias is not None
                                                         and not torch.equal(got_bias, full_bias)):
            problems.append(f"{where}: the bias returned must be the layer's whole bias (None if none)")
        elif not _close(total + (0 if full_bias is None else full_bias), full, "float32"):
            problems.append(f"{where}: the sum over ranks of linear(x_r, weight_r) plus the bias is not the "
                            "whole layer's output (x_r: rank r's slice of the input features)")
    return problems
