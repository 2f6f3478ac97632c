"""Checks of chapter 07, part 2 (a ZeRO-1 sharded optimizer) against unsharded ``torch.optim.AdamW``.

Every rank trains the same small model (tied weight, a frozen layer, two param groups) on its rows of
the batch, averaging gradients with ``dist.all_reduce`` as DDP would, and steps the student's optimizer;
the judging side trains the same model on the whole batch with torch's AdamW and compares.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from course_lib.grading.attempt.rank_attempt import attempt, fail_with
from course_lib.grading.attempt.student_function import as_student_function

ADAMW = {"lr": 1e-2, "weight_decay": 0.1}
HYPERPARAMETERS = ("lr", "betas", "eps", "weight_decay")
ROWS_PER_RANK_UNIT = 12          # the batch: 12 rows, split evenly over 1, 2, 3 or 4 ranks
VISIBLE_TIMEOUT_S = 30


@dataclass(frozen=True)
class OptimizerCase:
    """A model of ``depth`` square layers of ``width``; ``add_head_at``: the step whose start adds the
    head as a new param group (None: it is in the optimizer from the start)."""

    width: int = 12
    depth: int = 4
    steps: int = 10
    add_head_at: int | None = None
    seed: int = 0


class TiedNet(nn.Module):
    """An input projection whose weight is reused (tied) as the output projection, tanh layers, a head."""

    def __init__(self, width: int, depth: int, vocab: int = 6):
        super().__init__()
        self.embed = nn.Linear(vocab, width, bias=False)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 3)
        self.layers[1].requires_grad_(False)  # a frozen layer: no gradient, so no step and no state

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            h = torch.tanh(layer(h))
        return h @ self.embed.weight, self.head(h)   # the tied weight is used twice


def make_model(case: OptimizerCase) -> TiedNet:
    torch.manual_seed(case.seed)
    return TiedNet(case.width, case.depth).double()  # float64: sums in another order agree to ~1e-15


def param_groups(model: TiedNet, case: OptimizerCase) -> list[dict]:
    """Two groups with their own hyperparameters; the head joins later when ``add_head_at`` is set."""
    half = len(model.layers) // 2
    first = [model.embed.weight, *(p for layer in model.layers[:half] for p in layer.parameters())]
    second = [p for layer in model.layers[half:] for p in layer.parameters()]
    if case.add_head_at is None:
        second += list(model.head.parameters())
    return [{"params": first, "lr": 2e-2}, {"params": second, "weight_decay": 0.0}]


def head_group(model: TiedNet) -> dict:
    return {"params": list(model.head.parameters()), "lr": 5e-3}


def batch(case: OptimizerCase, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(case.seed * 7919 + step)
    return (torch.randn(ROWS_PER_RANK_UNIT, 6, generator=generator, dtype=torch.float64),
            torch.randn(ROWS_PER_RANK_UNIT, 3, generator=generator, dtype=torch.float64))


def loss_of(model: TiedNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    tied, head = model(x)
    return tied.pow(2).mean() + (head - y).pow(2).mean()


def train(model, optimizer, case: OptimizerCase, rows=slice(None), average=None) -> None:
    """The step loop both sides run; ``average`` (rank side) all-reduces the gradients."""
    for step in range(case.steps):
        if step == case.add_head_at:
            optimizer.add_param_group(head_group(model))
        optimizer.zero_grad()
        x, y = batch(case, step)
        loss_of(model, x[rows], y[rows]).backward()
        if average is not None:
            average(model)
        optimizer.step()


def reference(case: OptimizerCase) -> tuple[TiedNet, torch.optim.AdamW]:
    """Unsharded training: one process, the whole batch, torch's AdamW."""
    model = make_model(case)
    optimizer = torch.optim.AdamW(param_groups(model, case), **ADAMW)
    train(model, optimizer, case)
    return model, optimizer


def _average_gradients(model) -> None:
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


def _plain_state_dict(optimizer) -> dict:
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


def optimizer_side(rank, world_size, student, case: OptimizerCase):
    """Rank side: the student's optimizer trains this rank's rows; returns what the judge compares."""
    optimizer_class = student.resolve()
    model = make_model(case)
    optimizer = optimizer_class(param_groups(model, case), torch.optim.AdamW, **ADAMW)
    share = ROWS_PER_RANK_UNIT // world_size
    train(model, optimizer, case, slice(rank * share, (rank + 1) * share), _average_gradients)
    outcome = {"params": [p.detach().clone() for p in model.parameters()],
               "is_optimizer": isinstance(optimizer, torch.optim.Optimizer),
               "state_bytes": state_bytes(optimizer, model), "state_dict": _plain_state_dict(optimizer)}
    optimizer.zero_grad()
    outcome["grads_after_zero_grad"] = [None if p.grad is None else float(p.grad.abs().sum())
                                        for p in model.parameters()]
    return outcome


def run_optimizer(student, case: OptimizerCase, world_size: int, timeout: float):
    return attempt(optimizer_side, world_size, student, case, name="ShardedOptimizer", timeout=timeout)


def value_problems(run, case: OptimizerCase) -> list[str]:
    """Every rank's parameters after training equal unsharded AdamW's (float32 reorderings aside)."""
    if run.error:
        return [run.error]
    model, _ = reference(case)
    names = [name for name, _ in model.named_parameters()]
    problems = []
    for rank, outcome in enumerate(run.per_rank):
        for name, got, want in zip(names, outcome["params"], model.parameters(), strict=True):
            if not torch.allclose(got, want.detach(), rtol=1e-7, atol=1e-9):
                gap = float((got - want.detach()).abs().max())
                problems.append(f"rank {rank} of {run.world_size}: after {case.steps} steps `{name}` differs "
                                f"from torch.optim.AdamW's by up to {gap:.3g}")
    return problems


def unsharded_state_bytes(case: OptimizerCase) -> tuple[int, int]:
    """torch AdamW's state bytes for the whole model, and the largest single parameter's share of them."""
    model, optimizer = reference(case)
    per_parameter = [state_bytes({"state": entry}, model) for entry in optimizer.state.values()]
    return sum(per_parameter), max(per_parameter)


def memory_problems(run, case: OptimizerCase) -> list[str]:
    """Each rank holds at most its 1/N of AdamW's state, give or take one parameter's share."""
    if run.error:
        return [run.error]
    total, largest = unsharded_state_bytes(case)
    limit = total / run.world_size + largest
    problems = [f"rank {rank} of {run.world_size} holds {outcome['state_bytes']} bytes of optimizer state; "
                f"unsharded AdamW holds {total}, so a rank's share should be at most "
                f"{total}/{run.world_size} + one parameter's ({largest}) = {limit:.0f}"
                for rank, outcome in enumerate(run.per_rank) if outcome["state_bytes"] > limit]
    held = sum(outcome["state_bytes"] for outcome in run.per_rank)
    if held < 0.9 * total:
        problems.append(f"the {run.world_size} ranks hold {held} bytes of optimizer state together, less "
                        f"than AdamW's {total}: every parameter's state must live on some rank")
    return problems


def api_problems(run, case: OptimizerCase) -> list[str]:
    """A torch Optimizer; zero_grad clears every gradient; state_dict splits torch's across ranks."""
    if run.error:
        return [run.error]
    _, optimizer = reference(case)
    want = optimizer.state_dict()
    problems, owners = [], set()
    for rank, outcome in enumerate(run.per_rank):
        where = f"rank {rank} of {run.world_size}"
        if not outcome["is_optimizer"]:
            problems.append(f"{where}: ShardedOptimizer must subclass torch.optim.Optimizer")
        if any(g not in (None, 0.0) for g in outcome["grads_after_zero_grad"]):
            problems.append(f"{where}: after zero_grad() some gradients are still there; clear every "
                            "parameter's, not only the ones this rank steps")
        saved = outcome["state_dict"]
        if "error" in saved:
            problems.append(f"{where}: state_dict() raised {saved['error']}")
            continue
        problems += _group_problems(where, saved["param_groups"], want["param_groups"])
        for index, entry in saved["state"].items():
            owners.add(index)
            if index not in want["state"] or not _same_entry(entry, want["state"][index]):
                problems.append(f"{where}: state_dict()['state'][{index}] differs from torch AdamW's entry")
    missing = sorted(set(want["state"]) - set(owners))   # (held twice is the memory test's business)
    if missing:
        problems.append(f"no rank's state_dict()['state'] holds entries {missing} (torch AdamW has them)")
    return problems


def _same_entry(entry: dict, reference_entry: dict) -> bool:
    return all(k in entry and entry[k].shape == v.shape and torch.allclose(entry[k], v, rtol=1e-4, atol=1e-6)
               for k, v in reference_entry.items() if v.dim() > 0)


def _group_problems(where: str, got: list[dict], want: list[dict]) -> list[str]:
    if len(got) != len(want):
        return [f"{where}: state_dict() has {len(got)} param groups, torch AdamW {len(want)}"]
    problems = []
    for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        for key in ("params", *HYPERPARAMETERS):
            value = list(theirs[key]) if key == "betas" else theirs[key]
            if mine[key] != value:
                problems.append(f"{where}: param group {index} has {key}={mine[key]}, torch AdamW {value}")
    return problems


VISIBLE_VALUES, VISIBLE_MEMORY = OptimizerCase(), OptimizerCase(width=24, depth=8, steps=2)
VISIBLE_API = OptimizerCase(steps=6, add_head_at=3)


def check_sharded_optimizer_values(ShardedOptimizer, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: 10 AdamW steps (two param groups, a tied and a frozen weight) equal torch's."""
    run = run_optimizer(as_student_function(ShardedOptimizer, "ShardedOptimizer"), VISIBLE_VALUES,
                        world_size, VISIBLE_TIMEOUT_S)
    fail_with(value_problems(run, VISIBLE_VALUES), "ShardedOptimizer differs from unsharded AdamW")
    print(f"ShardedOptimizer: {VISIBLE_VALUES.steps} steps on {world_size} ranks equal torch.optim.AdamW's")


def check_sharded_optimizer_memory(ShardedOptimizer, world_size: int = 4) -> None:  # noqa: N803
    """Visible test: each rank keeps about 1/N of AdamW's state, and together they keep all of it."""
    run = run_optimizer(as_student_function(ShardedOptimizer, "ShardedOptimizer"), VISIBLE_MEMORY,
                        world_size, VISIBLE_TIMEOUT_S)
    fail_with(memory_problems(run, VISIBLE_MEMORY),
              "ShardedOptimizer does not shard the optimizer state")
    total, _ = unsharded_state_bytes(VISIBLE_MEMORY)
    print(f"ShardedOptimizer: state per rank {[o['state_bytes'] for o in run.per_rank]} bytes, "
          f"unsharded AdamW {total} bytes")


def check_sharded_optimizer_api(ShardedOptimizer, world_size: int = 2) -> None:  # noqa: N803
    """Visible test: add_param_group mid-training, zero_grad and state_dict behave as torch's do."""
    run = run_optimizer(as_student_function(ShardedOptimizer, "ShardedOptimizer"), VISIBLE_API,
                        world_size, VISIBLE_TIMEOUT_S)
    fail_with(value_problems(run, VISIBLE_API) + api_problems(run, VISIBLE_API),
              "ShardedOptimizer does not behave as a torch optimizer")
    print("ShardedOptimizer: add_param_group, zero_grad and state_dict behave as torch.optim.AdamW's")
