"""The rank side of chapter 03's DDP checks: train with the student's DDP (or torch's) on real ranks.

Models (ch03_ddp_models) and data are rebuilt from a seed on every rank; each rank returns plain data
(gradients, final parameters, recorded traffic, when each gradient was ready), and the judging side
(ch03_ddp_judge) recomputes everything it expects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch._dynamo  # noqa: F401 - DDP's constructor imports it: once here (5 s) instead of in every rank
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun
from course_lib.grading.checks.ch03_ddp.models import MODELS, build_model  # noqa: F401 - MODELS re-exported
from course_lib.real import record_traffic, run_ranks

LEARNING_RATE, STEPS, PER_RANK_BATCH = 0.05, 5, 4


def global_batches(name: str, seed: int, world_size: int, steps: int) -> list[tuple]:
    """``steps`` (input, target) pairs of world_size * PER_RANK_BATCH samples for model ``name``."""
    generator = torch.Generator().manual_seed(seed)
    shape = (8, 16) if name == "transformer block" else (6,)
    out_shape = (8, 16) if name == "transformer block" else (2,)
    size = world_size * PER_RANK_BATCH
    return [(torch.randn(size, *shape, generator=generator),
             torch.randn(size, *out_shape, generator=generator)) for _ in range(steps)]


@dataclass(frozen=True)
class DDPCase:
    """One training run: which model, which bucket size (MB, or None), how many SGD steps."""

    model: str
    bucket_size_mb: float | None = 25.0
    steps: int = STEPS

    def describe(self, world_size: int) -> str:
        return (f"{self.model} on {world_size} rank(s), bucket_size_mb={self.bucket_size_mb}, "
                f"{self.steps} SGD steps (lr {LEARNING_RATE})")


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in module.state_dict(keep_vars=True).items()}


def _note_ready_gradients(model: nn.Module, ready: list) -> None:
    """Each time a parameter's gradient is complete, note when in ``ready[-1]`` (the current step's list).

    Registered before the student's DDP wraps the model, so for every parameter this note is taken
    before the student's own hook runs: an all-reduce launched from that hook starts after it."""
    for param in model.parameters():
        if param.requires_grad:
            param.register_post_accumulate_grad_hook(lambda _: ready[-1].append(time.perf_counter()))


@dataclass(frozen=True)
class TrainingOutcome:
    """One rank's training in one case: its gradients per step ({name: tensor or None}), its final state,
    when each step's gradients were ready, its communication calls (op, nbytes, start, end) and its timed
    phases (label, start, end)."""

    grads: list
    final: dict
    ready: list
    events: list
    spans: list


@dataclass(frozen=True)
class BroadcastOutcome:
    """One rank after ``DDP(model)``: its state before and after, whether ``.module`` is the very model and
    ``ddp(x)`` the model's output, and the communication the constructor made."""

    before: dict
    after: dict
    module_kept: bool
    forward_runs_module: bool
    ops: list


def _train(rank, world_size, wrap, case: DDPCase, seed: int, finish: bool) -> dict:
    """Train one case with ``wrap(model)``, recording traffic, when each forward/backward ran and when
    each gradient was ready."""
    model = build_model(case.model, seed)
    shard = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
    grads, ready = [], []
    _note_ready_gradients(model, ready)
    with record_traffic() as log:
        with log.span("construct"):
            wrapped = wrap(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        for inputs, targets in global_batches(case.model, seed, world_size, case.steps):
            optimizer.zero_grad(set_to_none=True)
            ready.append([])
            with log.span("forward"):
                loss = nn.functional.mse_loss(wrapped(inputs[shard]), targets[shard])
            with log.span("backward"):
                loss.backward()
            if finish:
                wrapped.finish_gradient_synchronization()
            grads.append({name: None if p.grad is None else p.grad.detach().clone()
                          for name, p in model.named_parameters()})
            optimizer.step()
    return {"grads": grads, "final": _snapshot(model), "ready": ready,
            "events": [(e.op, int(e.nbytes), e.start, e.end) for e in log.events],
            "spans": [tuple(span) for span in log.spans]}


def _student_rank(rank, world_size, student, cases, seed):
    ddp_class = student.resolve()
    return [_train(rank, world_size, lambda m, c=case: ddp_class(m, bucket_size_mb=c.bucket_size_mb), case,
                   seed, finish=True) for case in cases]


def _torch_rank(rank, world_size, cases, seed):
    def wrap(model, case):
        if world_size == 1:
            return model
        return DistributedDataParallel(model, bucket_cap_mb=case.bucket_size_mb or 1e-6,
                                       find_unused_parameters=case.model == "unused layer")
    return [_train(rank, world_size, lambda m, c=case: wrap(m, c), case, seed, finish=False)["final"]
            for case in cases]


def _broadcast_rank(rank, world_size, student, seed):
    """Each rank builds the model from its own seed, with buffers holding its rank; then wraps it."""
    model = build_model("batch norm", seed + rank)
    with torch.no_grad():
        for buffer in model.buffers():
            buffer.fill_(rank + 1)
    before = _snapshot(model)
    with record_traffic() as log:
        ddp = student.resolve()(model, bucket_size_mb=25.0)
    probe = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed))
    model.eval()
    with torch.no_grad():
        same_output = bool(torch.equal(ddp(probe), model(probe)))
    return {"before": before, "after": _snapshot(model), "module_kept": getattr(ddp, "module", None) is model,
            "forward_runs_module": same_output, "ops": [e.op for e in log.events]}


def torch_ddp_finals(world_size: int, cases, seed: int, timeout: float) -> list[list[dict]]:
    """torch.nn.parallel.DistributedDataParallel trained on the same data: [case][rank] final state."""
    per_rank = run_ranks(_torch_rank, world_size, list(cases), seed, timeout=timeout)
    return [[per_rank[rank][index] for rank in range(world_size)] for index in range(len(cases))]


# DDP's own words for a hang (its ranks wait inside DDP's hooks, not in the student's collectives) and the
# whole end of a rank's traceback, as the DDP checks have always shown them.
DDP_HUNG = ("{subject} did not finish on {world_size} ranks within {timeout:g} s (a rank waits for something "
            "that never comes), so the test stopped it.")
DDP_FAILURE = FailureText("DDP", hung=DDP_HUNG, frames=lambda traceback: traceback.strip()[-2500:])


def run_student(student, world_size: int, cases, seed: int, timeout: float, kind: str = "train") -> RankRun:
    """Run the student's DDP on ``world_size`` ranks; a failure or a hang is recorded, never raised.

    ``kind="broadcast"`` runs only the construction: each rank then sends one ``BroadcastOutcome``.
    """
    if kind == "broadcast":
        return run_answer(_broadcast_rank, world_size, student, seed, record=BroadcastOutcome,
                          text=DDP_FAILURE, timeout=timeout, seed=seed, one_per_rank=True)
    return run_answer(_student_rank, world_size, student, list(cases), seed, record=TrainingOutcome,
                      text=DDP_FAILURE, timeout=timeout, cases=cases, seed=seed)
