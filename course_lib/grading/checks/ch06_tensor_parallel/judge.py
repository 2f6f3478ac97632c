"""The student-facing side of chapter 06's layer checks: each rank's outputs and gradients against the
unsharded layer's (computed here), and its traffic against the Megatron pattern, with what differs and where.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import cases_of, judging
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.models import FeedForward, TransformerBlock

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


@judging
def value_problems(run: RankRun) -> list[str]:
    """Output, input gradient and every parameter gradient against the unsharded model, per rank."""
    problems, n = [], run.world_size
    for index, case, outcomes in cases_of(run):
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
            got = {"output": outcome.out, "input gradient": outcome.input_grad, **{
                f"{name}.grad": g for name, g in outcome.grads.items()}}
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


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """Exactly one all-reduce of the MLP's output in forward and one of its input gradient in backward."""
    problems = []
    for _, case, outcomes in cases_of(run):
        nbytes = case.batch * case.seq * case.dim * torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
        expected = [("all_reduce", nbytes)]
        for rank, outcome in enumerate(outcomes):
            for phase in ("forward", "backward"):
                recorded = [tuple(event) for event in getattr(outcome, phase)]
                if recorded != expected:
                    problems.append(f"rank {rank}, {case.describe(run.world_size)}, {phase}:\n"
                                    f"    recorded: {_calls(recorded)}\n    expected: {_calls(expected)}")
    return problems


def _calls(events) -> str:
    return ", ".join(f"{op} of {nbytes} B" for op, nbytes in events) or "no collective at all"
