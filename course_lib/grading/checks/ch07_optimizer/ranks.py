"""The rank side of chapter 07's ZeRO-1 checks: a small model trained with the student's ShardedOptimizer.

Every rank trains the same model (a tied weight, a frozen layer, optionally a large frozen projection, two
param groups) on its rows of the batch, averaging gradients with ``dist.all_reduce`` as DDP would; some
steps go through ``step(closure)``, one step's traffic is recorded, and the optimizer may be rebuilt from
its own ``state_dict()`` halfway. The judging side (ch07_optimizer.py) trains the same with torch's AdamW.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from course_lib.grading.checks.ch07_zero.probes import closure_of
from course_lib.real import record_traffic

ADAMW = {"lr": 1e-2, "weight_decay": 0.1}
HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay")
ROWS_PER_RANK_UNIT = 12          # the batch: 12 rows, split evenly over 1, 2, 3 or 4 ranks


@dataclass(frozen=True)
class OptimizerCase:
    """A model of ``depth`` square layers of ``width``; ``add_head_at``: the step whose start adds the
    head as a new param group (None: it is in the optimizer from the start); ``frozen_wide``: a frozen
    projection to ``frozen_wide`` x width features (0: none); ``closures``: odd steps call step(closure);
    ``reload_at``: the step at whose start the optimizer is rebuilt from its own state_dict()."""

    width: int = 12
    depth: int = 4
    steps: int = 10
    add_head_at: int | None = None
    seed: int = 0
    frozen_wide: int = 0
    closures: bool = False
    reload_at: int | None = None


class TiedNet(nn.Module):
    """An input projection whose weight is reused (tied) as the output projection, tanh layers, a head."""

    def __init__(self, width: int, depth: int, vocab: int = 6, frozen_wide: int = 0):
        super().__init__()
        self.embed = nn.Linear(vocab, width, bias=False)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 3)
        self.layers[1].requires_grad_(False)  # a frozen layer: no gradient, so no step and no state
        self.frozen = nn.Linear(width, frozen_wide * width, bias=False).requires_grad_(False) \
            if frozen_wide else None

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        head = self.head(h)
        if self.frozen is not None:
            head = head + 0.01 * self.frozen(h)[:, :3]
        return h @ self.embed.weight, head   # the tied weight is used twice


def make_model(case: OptimizerCase) -> TiedNet:
    torch.manual_seed(case.seed)
    # float64: sums in another order agree to ~1e-15
    return TiedNet(case.width, case.depth, frozen_wide=case.frozen_wide).double()


def param_groups(model: TiedNet, case: OptimizerCase) -> list[dict]:
    """Two groups with their own hyperparameters; the head joins later when ``add_head_at`` is set."""
    half = len(model.layers) // 2
    first = [model.embed.weight, *(p for layer in model.layers[:half] for p in layer.parameters())]
    second = [p for layer in model.layers[half:] for p in layer.parameters()]
    if model.frozen is not None:
        second.append(model.frozen.weight)
    if case.add_head_at is None:
        second += list(model.head.parameters())
    return [{"params": first, "lr": 2e-2}, {"params": second, "weight_decay": 0.0}]


def head_group(model: TiedNet) -> dict:
    return {"params": list(model.head.parameters()), "lr": 5e-3}


def groups_at(model: TiedNet, case: OptimizerCase, step: int) -> list[dict]:
    """The param groups an optimizer holds at the start of ``step`` (the head's once it was added)."""
    added = case.add_head_at is not None and step > case.add_head_at
    return param_groups(model, case) + ([head_group(model)] if added else [])


def batch(case: OptimizerCase, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(case.seed * 7919 + step)
    return (torch.randn(ROWS_PER_RANK_UNIT, 6, generator=generator, dtype=torch.float64),
            torch.randn(ROWS_PER_RANK_UNIT, 3, generator=generator, dtype=torch.float64))


def loss_of(model: TiedNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    tied, head = model(x)
    return tied.pow(2).mean() + (head - y).pow(2).mean()


def train(model, optimizer, case: OptimizerCase, rows=slice(None), average=None, rebuild=None) -> dict:
    """The step loop both sides run; ``average`` (rank side) all-reduces the gradients, ``rebuild``
    makes a new optimizer from the old one's state_dict() at ``case.reload_at``.

    Returns the optimizer trained last, each closure step's (returned, computed) losses and whether the
    closure ran with gradients on, and the last plain step's recorded traffic."""
    out = {"closure_losses": [], "closure_grad_enabled": [], "step_events": []}
    for step in range(case.steps):
        if step == case.add_head_at:
            optimizer.add_param_group(head_group(model))
        if rebuild is not None and step == case.reload_at:
            optimizer = rebuild(optimizer, step)
        x, y = batch(case, step)

        def compute_loss(optimizer=optimizer, x=x, y=y):
            optimizer.zero_grad()
            loss = loss_of(model, x[rows], y[rows])
            loss.backward()
            if average is not None:
                average(model)
            return loss

        if case.closures and step % 2:
            closure = closure_of(compute_loss)
            returned = optimizer.step(closure)
            out["closure_losses"].append((_number(returned), _number(closure.losses[-1])
                                          if closure.losses else None))
            out["closure_grad_enabled"] += closure.calls
        else:
            compute_loss()
            if not dist.is_initialized():   # the judge's reference, in one process
                optimizer.step()
                continue
            with record_traffic() as log:
                optimizer.step()
            out["step_events"] = [(str(e.op), int(e.nbytes)) for e in log.events]
    out["optimizer"] = optimizer
    return out


def _number(value):
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    return float(value) if isinstance(value, (float, int)) else repr(value)[:80]


def average_gradients(model) -> None:
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world_size


def state_bytes(optimizer, model) -> int:
    """Bytes of every tensor (not 0-d) reachable from the optimizer that is not a parameter or gradient."""
    skip = {t.untyped_storage().data_ptr() for p in model.parameters() for t in (p, p.grad) if t is not None}
    seen_objects, seen_storages, total, stack = set(), set(), 0, [(optimizer, 0)]
    while stack:
        item, depth = stack.pop()
        if id(item) in seen_objects or depth > 8 or isinstance(item, nn.Module):
            continue
        seen_objects.add(id(item))
        if isinstance(item, torch.Tensor):
            pointer = item.untyped_storage().data_ptr()
            if item.dim() > 0 and pointer not in skip and pointer not in seen_storages:
                seen_storages.add(pointer)
                total += item.untyped_storage().nbytes()
        elif isinstance(item, dict):
            stack += [(v, depth + 1) for v in (*item.keys(), *item.values())]
        elif isinstance(item, (list, tuple, set)):
            stack += [(v, depth + 1) for v in item]
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            stack += [(v, depth + 1) for v in vars(item).values()]
    return total


def plain_state_dict(optimizer) -> dict:
    try:
        saved = optimizer.state_dict()
        state = {int(k): {name: v.detach().clone() for name, v in entry.items()
                          if isinstance(v, torch.Tensor) and v.dim() > 0}
                 for k, entry in saved["state"].items()}
        groups = [{"params": [int(i) for i in g["params"]],
                   **{h: [float(v) for v in g[h]] if h == "betas" else float(g[h]) for h in HYPERPARAMETERS}}
                  for g in saved["param_groups"]]
        return {"state": state, "param_groups": groups}
    except Exception as error:  # noqa: BLE001 - judged on the other side
        return {"error": f"{type(error).__name__}: {error}"[:300]}


@dataclass(frozen=True)
class OptimizerOutcome:
    """One rank after training with the student's optimizer: its parameters, whether the optimizer is a
    torch Optimizer, the bytes of state it holds, its state_dict() (torch's format, or {"error": ...}),
    each closure step's (returned, computed) losses and grad mode, one step()'s calls (op, nbytes), and
    each gradient's size after zero_grad() (None: cleared)."""

    params: list
    is_optimizer: bool
    state_bytes: int
    state_dict: dict
    closure_losses: list
    closure_grad_enabled: list
    step_events: list
    grads_after_zero_grad: list


def optimizer_side(rank, world_size, student, case: OptimizerCase):
    """Rank side: the student's optimizer trains this rank's rows; returns what the judge compares."""
    optimizer_class = student.resolve()
    model = make_model(case)

    def rebuild(old, step):
        saved = copy.deepcopy(old.state_dict())
        fresh = optimizer_class(groups_at(model, case, step), torch.optim.AdamW, **ADAMW)
        fresh.load_state_dict(saved)
        return fresh

    optimizer = optimizer_class(param_groups(model, case), torch.optim.AdamW, **ADAMW)
    share = ROWS_PER_RANK_UNIT // world_size
    trained = train(model, optimizer, case, slice(rank * share, (rank + 1) * share), average_gradients,
                    rebuild)
    optimizer = trained.pop("optimizer")
    outcome = {"params": [p.detach().clone() for p in model.parameters()],
               "is_optimizer": isinstance(optimizer, torch.optim.Optimizer),
               "state_bytes": state_bytes(optimizer, model), "state_dict": plain_state_dict(optimizer),
               **trained}
    optimizer.zero_grad()
    outcome["grads_after_zero_grad"] = [None if p.grad is None else float(p.grad.abs().sum())
                                        for p in model.parameters()]
    return outcome
