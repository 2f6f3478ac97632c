"""The student-facing side of chapter 06's block and sequence-parallel checks: outputs and gradients against
the unsharded block or sub-layer (computed here), traffic against the pattern, with what differs and where.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import cases_of, judging
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch06_tensor_parallel.judge import (
    DTYPES,
    _close,
    _filled,
    _mismatch,
    backpropagate,
)
from course_lib.models import TransformerBlock

LINEARS = ("q", "k", "v", "out", "up", "down")
SYNCED = ("norm.weight", "norm.bias", "down.bias")    # whole on every rank under sequence parallelism


@dataclass(frozen=True)
class PartCase:
    """``kind`` block: a transformer block, input (batch, seq, dim); ``kind`` sp: the MLP sub-layer
    x + mlp(norm(x)) in Megatron's (seq, batch, dim) layout, each rank given seq / N consecutive tokens."""

    kind: str
    batch: int = 2
    seq: int = 4
    dim: int = 16
    hidden: int = 32
    heads: int = 4
    dtype: str = "float32"

    def describe(self, world_size: int) -> str:
        shape = (self.batch, self.seq, self.dim) if self.kind == "block" else (self.seq, self.batch, self.dim)
        return f"{self.kind} on {world_size} rank(s), whole input {shape}, hidden {self.hidden}, {self.dtype}"

    @property
    def nbytes(self) -> int:
        """Bytes of one whole activation (the all-reduced, all-gathered or reduce-scattered buffer)."""
        return self.batch * self.seq * self.dim * torch.empty(0, dtype=DTYPES[self.dtype]).element_size()


class PreNormMLP(nn.Module):
    """The MLP half of a pre-norm block: x + down(gelu(up(norm(x)))); parameters norm.*, up.*, down.*."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def build_full(case: PartCase, seed: int) -> nn.Module:
    model = (TransformerBlock(case.dim, case.heads, case.hidden) if case.kind == "block"
             else PreNormMLP(case.dim, case.hidden))
    return _filled(model, seed, DTYPES[case.dtype])


def case_tensors(case: PartCase, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole input and the whole upstream gradient."""
    generator = torch.Generator().manual_seed(seed + 7)
    shape = (case.batch, case.seq, case.dim) if case.kind == "block" else (case.seq, case.batch, case.dim)
    x, upstream = (torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(2))
    return x.to(DTYPES[case.dtype]), upstream.to(DTYPES[case.dtype])


def my_tokens(t: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's consecutive tokens of a (seq, batch, dim) tensor."""
    return torch.tensor_split(t, world_size, dim=0)[rank]


def reference(case: PartCase, seed: int):
    """Unsharded forward and backward: output, input gradient, parameter gradients, each Linear's
    (input, dL/d output) keyed by its short name."""
    full, (x, upstream) = build_full(case, seed), case_tensors(case, seed)
    x.requires_grad_(True)
    seen: dict[str, list] = {}
    for path, module in full.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(_keeper(seen, path.rsplit(".", 1)[-1]))
    out = full(x)
    backpropagate(out, upstream)
    return out.detach(), x.grad, {name: p.grad for name, p in full.named_parameters()}, seen


def _keeper(seen: dict, name: str):
    def keep(module, inputs, output):
        seen[name] = [inputs[0].detach()]
        output.register_hook(lambda grad: seen[name].append(grad.detach()))
    return keep


def linear_of(name: str) -> str | None:
    """The Linear a parameter belongs to (its nearest enclosing q, k, v, out, up or down), or None."""
    return next((part for part in reversed(name.split(".")[:-1]) if part in LINEARS), None)


def split_of(shape, full_shape, world_size: int) -> str | None:
    """column (output features split), row (input features split) or None, from the shard's shape."""
    out_features, in_features = full_shape
    if tuple(shape) == (out_features // world_size, in_features):
        return "column"
    if tuple(shape) == (out_features, in_features // world_size):
        return "row"
    return None


def shard_grad(what: str, split: str, seen_pair, rank: int, world_size: int) -> torch.Tensor:
    """The closed-form gradient of this rank's shard of a Linear (weight or bias)."""
    x, grad_out = seen_pair
    if split == "column":
        grad_out = torch.tensor_split(grad_out, world_size, dim=-1)[rank]
    else:
        x = torch.tensor_split(x, world_size, dim=-1)[rank]
    flat_grad, flat_x = grad_out.reshape(-1, grad_out.shape[-1]), x.reshape(-1, x.shape[-1])
    return flat_grad.T @ flat_x if what == "weight" else flat_grad.sum(0)


def _expected(case, name, full_grad, seen, splits, rank, n):
    short, what = linear_of(name), name.rpartition(".")[2]
    if short is None or (case.kind == "sp" and name in SYNCED):
        return full_grad
    return shard_grad(what, splits.get(short, "column"), seen[short], rank, n)


@judging
def value_problems(run: RankRun) -> list[str]:
    """Every Linear split (from its weight's shape), output, input gradient and every parameter gradient."""
    problems, n = [], run.world_size
    for index, case, outcomes in cases_of(run):
        out, input_grad, grads, seen = reference(case, run.seed + 101 * index)
        shapes = {linear_of(name): tuple(g.shape) for name, g in grads.items()
                  if name.endswith(".weight") and linear_of(name)}
        for rank, outcome in enumerate(outcomes):
            where = f"rank {rank}, {case.describe(n)}"
            splits = {}
            for short, full_shape in shapes.items():
                got = outcome.shapes.get(short)
                splits[short] = split_of(got, full_shape, n) if got else None
                if splits[short] is None and n > 1:
                    problems.append(f"{where}: `{short}` is not split: its weight is {got or 'missing'}, "
                                    f"neither {full_shape[0] // n, full_shape[1]} (by output features) nor "
                                    f"{full_shape[0], full_shape[1] // n} (by input features)")
            if any(s is None for s in splits.values()) and n > 1:
                continue
            if case.kind == "sp":
                want = {"output": my_tokens(out, rank, n), "input gradient": my_tokens(input_grad, rank, n)}
            else:
                want = {"output": out, "input gradient": input_grad}
            want |= {f"{name}.grad": _expected(case, name, g, seen, splits, rank, n)
                     for name, g in grads.items()}
            got = {"output": outcome.out, "input gradient": outcome.input_grad,
                   **{f"{name}.grad": g for name, g in outcome.grads.items()}}
            problems += [_mismatch(where, what, got.get(what), expected) for what, expected in want.items()
                         if not _close(got.get(what), expected, case.dtype)]
    return problems


def _kind(op: str) -> str:
    return next((k for k in ("all_gather", "reduce_scatter") if op.startswith(k)), op)


def expected_traffic(case: PartCase, world_size: int) -> dict[str, list]:
    """phase -> the calls a phase must make (None: any number of all-reduces of the activation's bytes)."""
    if case.kind == "block":
        return {"forward": [("all_reduce", case.nbytes)] * 2, "backward": None}
    size = torch.empty(0, dtype=DTYPES[case.dtype]).element_size()
    return {"forward": [("all_gather", case.nbytes), ("reduce_scatter", case.nbytes)],
            "backward": [("all_gather", case.nbytes), ("reduce_scatter", case.nbytes)],
            "synchronization": ("all_reduce", 3 * case.dim * size)}


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """The block: two all-reduces of the activation forward (attention, MLP), backward only all-reduces of
    it. Sequence parallel: all-gather then reduce-scatter of the whole activation forward, the same
    backward, and all-reduces of the norm's and down's bias gradients, 3 * dim elements, to synchronise."""
    problems = []
    for _, case, outcomes in cases_of(run):
        expected = expected_traffic(case, run.world_size)
        for rank, outcome in enumerate(outcomes):
            for phase, want in expected.items():
                recorded = [(_kind(op), nbytes) for op, nbytes in getattr(outcome, phase)]
                if phase == "synchronization":
                    op, total = want
                    right = ({o for o, _ in recorded} == {op} and sum(b for _, b in recorded) == total)
                    want_text = f"{op}s of {total} B in all (3 x dim elements)"  # which ones is the student's
                elif want is None:
                    right = bool(recorded) and all(call == ("all_reduce", case.nbytes) for call in recorded)
                    want_text = f"only all_reduces of {case.nbytes} B (the input gradient's)"
                else:
                    right, want_text = recorded == want, calls(want)
                if not right:
                    problems.append(f"rank {rank}, {case.describe(run.world_size)}, {phase}:\n"
                                    f"    recorded: {calls(recorded)}\n    expected: {want_text}")
    return problems


def calls(events) -> str:
    return ", ".join(f"{op} of {nbytes} B" for op, nbytes in events) or "no collective at all"
