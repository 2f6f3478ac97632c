"""The rank side of chapter 07's FSDP checks: the student's FSDP trains a small model on real ranks.

Each rank wraps the same small model, trains its rows of the batch for a few SGD steps, records one
step's traffic (the forward and backward apart from finish_gradient_synchronization) and what the process
really holds (``LiveTensorBytes``) at every layer's forward and backward and at the end of the forward,
beside the same measurements of the plain model (its activations: the baseline). ch07_fsdp.py judges.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.checks.ch07_zero.probes import (
    LiveTensorBytes,
    drop_gradients_at_once,
    measure_at_every_layer,
    watch_tie,
)
from course_lib.real import record_traffic

ROWS = 12                      # the batch, split evenly over 1, 2, 3 or 4 ranks


@dataclass(frozen=True)
class FSDPCase:
    """``units`` blocks (Linear + tanh) of ``width``, then a Linear head; ``dtype``: compute_dtype.

    ``tied``: the middle block ends with a second Linear holding the first one's weight, the way a
    language model's output layer holds its embedding's (one parameter, two modules, two uses).
    """

    width: int = 16
    units: int = 6
    steps: int = 3
    dtype: str | None = None
    seed: int = 0
    tied: bool = False

    def model(self) -> nn.Sequential:
        torch.manual_seed(self.seed)
        blocks = [nn.Sequential(nn.Linear(self.width, self.width), nn.Tanh()) for _ in range(self.units)]
        if self.tied:
            middle = blocks[self.units // 2]
            middle.append(nn.Linear(self.width, self.width))
            middle[2].weight = middle[0].weight
        return nn.Sequential(*blocks, nn.Linear(self.width, 3))

    def tied_pair(self, model: nn.Sequential) -> tuple[nn.Module, nn.Module]:
        """The two modules holding the tied weight (``tied`` only)."""
        middle = model[self.units // 2]
        return middle[0], middle[2]

    @property
    def tied_names(self) -> str:
        return f"`{self.units // 2}.0.weight` and `{self.units // 2}.2.weight`"

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 7919 + step)
        return torch.randn(ROWS, self.width, generator=generator), torch.randn(ROWS, 3, generator=generator)

    def unit_bytes(self, world_size: int, itemsize: int) -> list[int]:
        """Bytes of each unit's padded flat buffer: what one all-gather or reduce-scatter of it moves."""
        numels = [sum(p.numel() for p in child.parameters()) for child in self.model().children()
                  if any(True for _ in child.parameters())]
        return [-(-numel // world_size) * world_size * itemsize for numel in numels]


def reference(case: FSDPCase) -> dict[str, torch.Tensor]:
    """Single-process float32 training on the whole batch: the parameters after ``case.steps`` SGD steps."""
    model = case.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(case.steps):
        x, y = case.batch(step)
        optimizer.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        optimizer.step()
    return {name: p.detach() for name, p in model.named_parameters()}


def _events(log) -> list[tuple[str, int]]:
    return [(str(e.op), int(e.nbytes)) for e in log.events]


def _leaves(model) -> list:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def activation_baseline(case: FSDPCase, rows: slice) -> dict[str, int]:
    """Most bytes the plain model holds at the same points of one step, in its forward and in its
    backward, its gradients dropped as soon as they are made: its activations, which any FSDP holds too."""
    model = case.model()   # built outside the probe: its parameters are not counted
    drop_gradients_at_once(model)
    probe = LiveTensorBytes()
    measure_at_every_layer(_leaves(model), probe)
    with probe:
        x, y = case.batch(0)
        loss = (model(x[rows]) - y[rows]).pow(2).mean()
        probe.measure("forward")
        loss.backward()
    return probe.peaks()


@dataclass(frozen=True)
class FSDPOutcome:
    """One rank after training with the student's FSDP: gather_full_params() ({name: float32 tensor}), the
    first step's calls (op, nbytes) before and inside finish_gradient_synchronization(), the tensor bytes
    held at the peak and by the plain model's activations ({"forward": .., "backward": ..}), per forward
    whether the tied modules saw one weight, its shards' and gradients' dtypes, and its shards' bytes."""

    full: dict
    events: list
    finish_events: list
    peak: dict
    baseline: dict
    ties: list
    shard_dtypes: list
    grad_dtypes: list
    shard_bytes: int


def fsdp_side(rank, world_size, student, case: FSDPCase):
    """Rank side: the student's FSDP trains this rank's rows; returns what the judge compares."""
    fsdp_class = student.resolve()
    share = ROWS // world_size
    rows = slice(rank * share, (rank + 1) * share)
    baseline = activation_baseline(case, rows) if case.dtype is None else {}
    ties: list[bool] = []      # per forward: did both modules of the tied weight see the same values?
    probe = LiveTensorBytes()
    with probe:   # the model is built inside: whatever of it the FSDP keeps counts, as do its shards
        model = case.model()
        if case.tied:
            watch_tie(*case.tied_pair(model), ties)
        fsdp = fsdp_class(model, compute_dtype=getattr(torch, case.dtype) if case.dtype else None)
        measure_at_every_layer(_leaves(model), probe)
        shards = list(fsdp.parameters())
        optimizer = torch.optim.SGD(shards, lr=0.1)
        events, finish = [], []
        for step in range(case.steps):
            x, y = case.batch(step)
            optimizer.zero_grad()
            with record_traffic() as log:
                loss = (fsdp(x[rows]).float() - y[rows]).pow(2).mean()
                probe.measure("forward")   # the end of the forward: what autograd keeps counts
                loss.backward()
            with record_traffic() as finish_log:
                fsdp.finish_gradient_synchronization()
            if step == 0:
                events, finish = _events(log), _events(finish_log)
            optimizer.step()
        peak = probe.peaks()
    full = {str(name): tensor.detach().float().clone() for name, tensor in fsdp.gather_full_params().items()}
    return {"full": full, "events": events, "finish_events": finish, "peak": peak, "baseline": baseline,
            "ties": ties, "shard_dtypes": sorted({str(p.dtype) for p in shards}),
            "grad_dtypes": sorted({str(p.grad.dtype) for p in shards if p.grad is not None}),
            "shard_bytes": sum(p.numel() * p.element_size() for p in shards)}
