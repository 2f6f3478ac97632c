"""The student-facing side of chapter 07's ShardedOptimizer checks: values against the unsharded
optimizer, optimizer state held per rank, its traffic, and the torch.optim API it keeps.
"""

from __future__ import annotations

import torch

from course_lib.grading.attempt.judge_runner import judging
from course_lib.grading.checks.ch07_optimizer.ranks import (
    ADAMW,
    HYPERPARAMETERS,
    OptimizerCase,
    OptimizerOutcome,
    groups_at,
    make_model,
    param_groups,
    state_bytes,
    train,
)
from course_lib.grading.checks.ch07_zero.visible import GATHERS

SENDS_PARAMETERS = ("broadcast", *GATHERS)


def reference(case: OptimizerCase):
    """Unsharded training: one process, the whole batch, torch's AdamW; (model, optimizer)."""
    model = make_model(case)
    trained = train(model, torch.optim.AdamW(param_groups(model, case), **ADAMW), case)
    return model, trained["optimizer"]


@judging
def value_problems(run, case: OptimizerCase) -> list[str]:
    """Every rank's parameters after training equal unsharded AdamW's (float64 reorderings aside)."""
    model, _ = reference(case)
    names = [name for name, _ in model.named_parameters()]
    problems = []
    for rank, outcome in enumerate(run.records):
        for name, got, want in zip(names, outcome.params, model.parameters(), strict=True):
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


def traffic_problems(run, case: OptimizerCase) -> list[str]:
    """One plain step() sends every updated parameter once: broadcasts or all-gathers of at least the
    trainable parameters' bytes and at most all of the parameters' (padding aside), nothing else."""
    model = make_model(case)
    params = [p for group in groups_at(model, case, case.steps - 1) for p in group["params"]]
    trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    everything = sum(p.numel() * p.element_size() for p in params)
    limit = everything + run.world_size * len(params) * 8
    problems = []
    for rank, outcome in enumerate(run.records):
        events = outcome.step_events
        others = sorted({op for op, _ in events if op not in SENDS_PARAMETERS})
        sent = sum(nbytes for op, nbytes in events if op in SENDS_PARAMETERS)
        where = f"rank {rank} of {run.world_size}: one step() recorded {len(events)} calls"
        if others:
            problems.append(f"{where}, among them {others}: the updated parameters need only reach the other "
                            "ranks once (broadcasts or all-gathers); the gradients were already averaged")
        elif not trainable <= sent <= limit:
            problems.append(f"{where} moving {sent} bytes; each updated parameter sent once is {trainable} "
                            f"bytes (the trainable parameters), at most {everything} with the frozen ones")
    return problems


@judging
def memory_problems(run, case: OptimizerCase) -> list[str]:
    """Each rank holds at most its 1/N of AdamW's state, give or take one parameter's share; one step()
    sends the updated parameters once."""
    total, largest = unsharded_state_bytes(case)
    limit = total / run.world_size + largest
    problems = [f"rank {rank} of {run.world_size} holds {outcome.state_bytes} bytes of optimizer state; "
                f"unsharded AdamW holds {total}, so a rank's share should be at most "
                f"{total}/{run.world_size} + one parameter's ({largest}) = {limit:.0f} (a frozen parameter "
                "has no state: it is nobody's share)"
                for rank, outcome in enumerate(run.records) if outcome.state_bytes > limit]
    held = sum(outcome.state_bytes for outcome in run.records)
    if held < 0.9 * total:
        problems.append(f"the {run.world_size} ranks hold {held} bytes of optimizer state together, less "
                        f"than AdamW's {total}: every parameter's state must live on some rank")
    return problems + traffic_problems(run, case)


def _closure_problems(where: str, outcome: OptimizerOutcome) -> list[str]:
    problems = []
    for index, (returned, computed) in enumerate(outcome.closure_losses):
        if not isinstance(returned, float) or computed is None or abs(returned - computed) > 1e-12:
            problems.append(f"{where}: step(closure) returned {returned}, not the closure's loss {computed} "
                            f"(closure step {index + 1}); call it once and return what it returned")
    return problems


@judging
def api_problems(run, case: OptimizerCase) -> list[str]:
    """A torch Optimizer; zero_grad clears every gradient; step(closure) returns the closure's loss;
    state_dict splits torch's across ranks (load_state_dict's round trip is in the values)."""
    want = reference(case)[1].state_dict()
    problems, owners = [], set()
    for rank, outcome in enumerate(run.records):
        where = f"rank {rank} of {run.world_size}"
        if not outcome.is_optimizer:
            problems.append(f"{where}: ShardedOptimizer must subclass torch.optim.Optimizer")
        if any(g not in (None, 0.0) for g in outcome.grads_after_zero_grad):
            problems.append(f"{where}: after zero_grad() some gradients are still there; clear every "
                            "parameter's, not only the ones this rank steps")
        problems += _closure_problems(where, outcome)
        saved = outcome.state_dict
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
