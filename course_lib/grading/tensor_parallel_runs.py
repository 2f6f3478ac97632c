"""Running and judging chapter 06's exercise: the student's shards and parallel layers on real ranks.

Ranks only run the student's code on inputs rebuilt from a seed and record traffic; the judging side
compares with the unsharded nn.Linear, MLP and transformer block (and their activations), computed here.
"""

from __future__ import annotations

import random
import traceback
from dataclasses import dataclass, field

import torch
from torch import nn

from course_lib.dist import ForbiddenCallError, RankFailure, RanksHungError, record_traffic, run_ranks
from course_lib.grading.ring_checks import _student_frames
from course_lib.models import FeedForward, TransformerBlock

NAMES = ("shard_columns", "shard_rows", "ColumnParallelLinear", "RowParallelLinear")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
COLUMN_LAYERS = ("up", "q", "k", "v")     # split by output features under the Megatron plan
ROW_LAYERS = ("down", "out")              # split by input features


@dataclass(frozen=True)
class LayerCase:
    """One model to shard: ``kind`` is column, row, mlp or block; sizes of the input (batch, seq, dim)."""

    kind: str
    batch: int = 2
    seq: int = 3
    dim: int = 8
    hidden: int = 16
    heads: int = 4
    dtype: str = "float32"

    def describe(self, world_size: int) -> str:
        return (f"{self.kind} on {world_size} rank(s), input ({self.batch}, {self.seq}, "
                f"{self.dim if self.kind != 'row' else self.hidden}), hidden {self.hidden}, {self.dtype}")


def _filled(module: nn.Module, seed: int, dtype) -> nn.Module:
    """``module`` in ``dtype`` with every parameter redrawn from ``seed`` (same on every process)."""
    generator = torch.Generator().manual_seed(seed)
    module = module.to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return module


def build_full(case: LayerCase, seed: int) -> nn.Module:
    """The unsharded model of a case, identical on every process that passes the same seed."""
    dtype = DTYPES[case.dtype]
    model = {"column": lambda: nn.Linear(case.dim, case.hidden),
             "row": lambda: nn.Linear(case.hidden, case.dim),
             "mlp": lambda: FeedForward(case.dim, case.hidden),
             "block": lambda: TransformerBlock(case.dim, case.heads, case.hidden)}[case.kind]()
    return _filled(model, seed, dtype)


def case_tensors(case: LayerCase, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The full input and the full upstream gradient (dL/d output) of a case."""
    generator = torch.Generator().manual_seed(seed + 7)
    width_in = case.hidden if case.kind == "row" else case.dim
    width_out = case.hidden if case.kind == "column" else case.dim
    dtype = DTYPES[case.dtype]
    x = torch.randn(case.batch, case.seq, width_in, generator=generator, dtype=torch.float64).to(dtype)
    upstream = torch.randn(case.batch, case.seq, width_out, generator=generator, dtype=torch.float64)
    return x, upstream.to(dtype)


def backpropagate(out: torch.Tensor, upstream: torch.Tensor) -> None:
    """Backward with dL/d(out) = upstream, through a scalar loss: out.backward(upstream) would import
    sympy (seconds, and memory in every forked rank) on its first use."""
    (out * upstream).sum().backward()


def _sharded(case: LayerCase, full: nn.Module, column_cls, row_cls) -> nn.Module:
    """The case's model with the student's layers in place of the Linear layers the plan splits."""
    if case.kind == "column":
        return column_cls(full)
    if case.kind == "row":
        return row_cls(full)
    for parent in ([full] if case.kind == "mlp" else [full.attention, full.feed_forward]):
        for name, child in list(parent.named_children()):
            if name in COLUMN_LAYERS:
                setattr(parent, name, column_cls(child))
            elif name in ROW_LAYERS:
                setattr(parent, name, row_cls(child))
    return full


def _run_layer_cases(rank, world_size, students, cases, seed):
    """Rank side: build, forward and backward each case with the student's layers; record the traffic."""
    column_cls, row_cls = (students[name].resolve() if name in students else None for name in NAMES[2:])
    outcomes = []
    for index, case in enumerate(cases):
        case_seed = seed + 101 * index
        x, upstream = case_tensors(case, case_seed)
        if case.kind == "row":  # a row-parallel layer gets this rank's slice of the input features
            x = torch.tensor_split(x, world_size, dim=-1)[rank].clone()
        if case.kind == "column":
            upstream = torch.tensor_split(upstream, world_size, dim=-1)[rank]
        x.requires_grad_(True)
        model = _sharded(case, build_full(case, case_seed), column_cls, row_cls)
        with record_traffic() as forward_log:
            out = model(x)
        with record_traffic() as backward_log:
            backpropagate(out, upstream)
        grads = {name: (None if p.grad is None else p.grad.detach().clone())
                 for name, p in model.named_parameters()}
        outcomes.append({"out": out.detach().clone(), "input_grad": x.grad.detach().clone(), "grads": grads,
                         "forward": [(e.op, int(e.nbytes)) for e in forward_log.events],
                         "backward": [(e.op, int(e.nbytes)) for e in backward_log.events]})
    return outcomes


@dataclass
class LayerRun:
    """What one world size gave: per case, per rank, the outcome dict; or an error for the whole run."""

    world_size: int
    cases: list[LayerCase]
    seed: int
    outcomes: list[list[dict]] = field(default_factory=list)   # [case][rank]
    error: str | None = None


def run_layers(students: dict, world_size: int, cases, seed: int, timeout: float) -> LayerRun:
    """Run the cases on ``world_size`` real ranks; a failure or hang is recorded, never raised."""
    run = LayerRun(world_size, list(cases), seed)
    try:
        per_rank = run_ranks(_run_layer_cases, world_size, students, run.cases, seed, timeout=timeout,
                             plain_results=True)
    except RanksHungError as error:
        run.error = (f"the {cases[0].kind} case did not finish on {world_size} ranks within {timeout:g} s "
                     f"(a deadlock: do all ranks call the same collectives in the same order?)\n{error}")
    except RankFailure as error:
        lead = ("not written yet (it raises NotImplementedError)"
                if error.exc_type == NotImplementedError.__name__ else f"raised: {error.summary}")
        if error.exc_type == ForbiddenCallError.__name__:
            lead = f"made a forbidden call: {error.summary}"
        run.error = (f"{cases[0].describe(world_size)}: your code {lead}\n--- rank {error.rank} ---\n"
                     f"{_student_frames(error.remote_traceback)}")
    except Exception as error:  # noqa: BLE001 - the judge must report, whatever went wrong
        run.error = f"running on {world_size} ranks failed: {traceback.format_exception_only(error)[-1]}"
    else:
        run.outcomes = [[per_rank[r][i] for r in range(world_size)] for i in range(len(run.cases))]
    return run


def _reference(case: LayerCase, seed: int):
    """Unsharded forward and backward: output, input and parameter grads, each Linear's (input, dL/dout)."""
    full, (x, upstream) = build_full(case, seed), case_tensors(case, seed)
    x.requires_grad_(True)
    seen: dict[str, list] = {}
    for path, module in full.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(_keeper(seen, path.rsplit(".", 1)[-1] or case.kind))
    out = full(x)
    backpropagate(out, upstream)
    grads = {name: p.grad for name, p in full.named_parameters()}
    return out.detach(), x.grad, grads, seen


def _keeper(seen: dict, name: str):
    def keep(module, inputs, output):
        seen[name] = [inputs[0].detach()]
        output.register_hook(lambda grad: seen[name].append(grad.detach()))
    return keep


def _expected_grad(case, name, full_grad, seen, rank, world_size):
    """A parameter's gradient on ``rank``: the local Linear's closed form on this rank's activations."""
    layer, _, what = name.rpartition(".")
    layer = layer.rsplit(".", 1)[-1] if layer else case.kind
    split = ("column" if layer in COLUMN_LAYERS + ("column",)
             else "row" if layer in ROW_LAYERS + ("row",) else None)
    if split is None:
        return full_grad  # replicated (LayerNorm): the whole gradient on every rank
    x, grad_out = seen[layer]
    if split == "column":
        grad_out = torch.tensor_split(grad_out, world_size, dim=-1)[rank]
    else:
        x = torch.tensor_split(x, world_size, dim=-1)[rank]
    flat_grad, flat_x = grad_out.reshape(-1, grad_out.shape[-1]), x.reshape(-1, x.shape[-1])
    return flat_grad.T @ flat_x if what == "weight" else flat_grad.sum(0)


def _close(actual, expected, dtype: str) -> bool:
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    tolerance = 1e-4 if dtype == "float32" else 1e-9
    return bool(torch.allclose(actual.to(expected.dtype), expected, rtol=tolerance, atol=tolerance))


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else repr(t)


def value_problems(run: LayerRun) -> list[str]:
    """Output, input gradient and every parameter gradient against the unsharded model, per rank."""
    if run.error:
        return [run.error]
    problems, n = [], run.world_size
    for index, (case, outcomes) in enumerate(zip(run.cases, run.outcomes, strict=True)):
        out, input_grad, grads, seen = _reference(case, run.seed + 101 * index)
        if case.kind == "column":
            out = torch.tensor_split(out, n, dim=-1)
        if case.kind == "row":
            input_grad = torch.tensor_split(input_grad, n, dim=-1)
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {case.describe(n)}"
            want = {"output": out[rank] if case.kind == "column" else out,
                    "input gradient": input_grad[rank] if case.kind == "row" else input_grad}
            want |= {f"{name}.grad": _expected_grad(case, name, g, seen, rank, n)
                     for name, g in grads.items()}
            got = {"output": outcome["out"], "input gradient": outcome["input_grad"], **{
                f"{name}.grad": g for name, g in outcome["grads"].items()}}
            for what, expected in want.items():
                if not _close(got.get(what), expected, case.dtype):
                    problems.append(_mismatch(where, what, got.get(what), expected))
    return problems


def _mismatch(where: str, what: str, got, expected) -> str:
    if got is None:
        return f"{where}: no {what} (a parameter named weight/bias missing, or it got no gradient)"
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return f"{where}: {what} has shape {_shape(got)}, expected {_shape(expected)}"
    error = (got.to(expected.dtype) - expected).abs().max().item()
    ratio = (got.to(expected.dtype).norm() / expected.norm().clamp_min(1e-30)).item()
    return (f"{where}: {what} differs from the unsharded model's by up to {error:.3g} "
            f"(its norm is {ratio:.3g}x the expected one)")


def traffic_problems(run: LayerRun) -> list[str]:
    """Exactly one all-reduce of the MLP's output in forward and one of its input gradient in backward."""
    if run.error:
        return [run.error]
    problems = []
    for case, outcomes in zip(run.cases, run.outcomes, strict=True):
        nbytes = case.batch * case.seq * case.dim * torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
        expected = [("all_reduce", nbytes)]
        for rank, outcome in enumerate(outcomes):
            for phase in ("forward", "backward"):
                recorded = [tuple(event) for event in outcome[phase]]
                if recorded != expected:
                    problems.append(f"rank {rank}, {case.describe(run.world_size)}, {phase}:\n"
                                    f"    recorded: {_calls(recorded)}\n    expected: {_calls(expected)}")
    return problems


def _calls(events) -> str:
    return ", ".join(f"{op} of {nbytes} B" for op, nbytes in events) or "no collective at all"


# -- the shard functions: run on one process, judged against nn.Linear's own output ----------------

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
                                 "bias": None if shard_bias is None else shard_bias.detach().clone()})
            except ValueError as error:
                per_rank.append({"value_error": str(error)})
        results.append(per_rank)
    return results


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
