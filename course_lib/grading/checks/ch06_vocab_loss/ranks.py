"""Chapter 06's vocabulary-parallel cross-entropy on the ranks: the cases, the student's loss and backward on
each rank's slice of the logits with their traffic recorded, and PyTorch's loss_parallel beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.real import record_traffic

NAME = "vocab_parallel_cross_entropy"
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class LossCase:
    """``tokens`` rows of logits over ``vocab`` classes, drawn as ``offset + scale * randn`` (an offset past
    88.7 overflows exp in float32); ``splits`` gives each rank's slice width (default: as even as possible,
    the first ranks one wider); ``upstream`` is the gradient that reaches the loss in backward (a scaled
    loss: AMP's scaler, averaging over accumulation steps)."""

    tokens: int
    vocab: int
    dtype: str = "float32"
    scale: float = 3.0
    offset: float = 0.0
    splits: tuple | None = None
    upstream: float = 1.0

    def slices(self, world_size: int) -> list[tuple[int, int]]:
        widths = self.splits or [self.vocab // world_size + (r < self.vocab % world_size)
                                 for r in range(world_size)]
        starts = [sum(widths[:r]) for r in range(world_size)]
        return [(start, start + width) for start, width in zip(starts, widths, strict=True)]

    def describe(self, world_size: int) -> str:
        widths = [stop - start for start, stop in self.slices(world_size)]
        scaled = "" if self.upstream == 1.0 else f", backward from {self.upstream:g} x the loss"
        return (f"{self.tokens} tokens, vocabulary {self.vocab} split {widths} over {world_size} rank(s), "
                f"{self.dtype}, logits {self.offset:g} +- {3 * self.scale:g}{scaled}")


def case_tensors(case: LossCase, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole logits (tokens x vocab, in the case's dtype) and the target class of every token."""
    generator = torch.Generator().manual_seed(seed)
    logits = case.offset + case.scale * torch.randn(case.tokens, case.vocab, generator=generator,
                                                    dtype=torch.float64)
    target = torch.randint(case.vocab, (case.tokens,), generator=generator)
    return logits.to(DTYPES[case.dtype]), target


@dataclass(frozen=True)
class LossOutcome:
    """One rank's loss in one case: the loss (float64), the gradient of its slice of the logits (None when
    there is none), and its forward's and backward's calls (op, nbytes)."""

    loss: float
    grad: torch.Tensor | None
    forward: list
    backward: list


def _run_losses(rank, world_size, student, cases, seed):
    """Rank side: the student's loss and backward on this rank's slice of each case, and their traffic."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        logits, target = case_tensors(case, seed + index)
        start, stop = case.slices(world_size)[rank]
        local = logits[:, start:stop].clone().requires_grad_(True)
        with record_traffic() as forward:
            loss = function(local, target.clone(), start)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise TypeError(f"{NAME} must return the mean loss as a 0-dimensional tensor, got "
                            f"{getattr(loss, 'shape', type(loss).__name__)}")
        with record_traffic() as backward:
            loss.backward(torch.full_like(loss, case.upstream))
        outcomes.append({"loss": loss.detach().to(torch.float64).item(),
                         "grad": None if local.grad is None else local.grad.detach().clone(),
                         "forward": [(e.op, int(e.nbytes)) for e in forward.events],
                         "backward": [(e.op, int(e.nbytes)) for e in backward.events]})
    return outcomes


def run_losses(student, world_size: int, cases, seed: int, timeout: float) -> RankRun:
    """The cases on ``world_size`` real ranks; a failure or a hang is recorded in the run, never raised."""
    cases = list(cases)
    text = FailureText(f"{NAME} on {world_size} rank(s)", frames=lambda tb: frames_after(tb, __file__))
    return run_answer(_run_losses, world_size, student, cases, seed, record=LossOutcome, text=text,
                      timeout=timeout, cases=cases, seed=seed)


def _yours_and_loss_parallel(rank, world_size, student, case, seed):
    """Rank side: the student's loss with its recorded calls, then DTensor's loss_parallel with its calls
    (counted by DTensor's CommDebugMode: its collectives start in C++, out of the recorder's sight)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel

    yours = LossOutcome(**_run_losses(rank, world_size, student, [case], seed)[0])
    logits, target = case_tensors(case, seed)
    sharded = distribute_tensor(logits, init_device_mesh("cpu", (world_size,)), [Shard(1)]).requires_grad_()
    with CommDebugMode() as comm, loss_parallel():
        loss = nn.functional.cross_entropy(sharded, target)
        loss.backward()
    counts = {str(op).rsplit(".", 1)[-1]: count for op, count in comm.get_comm_counts().items()}
    mine = [op for op, _ in yours.forward + yours.backward]
    return {"yours": (yours.loss, {op: mine.count(op) for op in dict.fromkeys(mine)}),
            "loss_parallel": (loss.to_local().item(), counts)}


@dataclass(frozen=True)
class SideBySide:
    """One rank's loss and its collectives ({op: calls in forward and backward}), yours and
    loss_parallel's."""

    yours: tuple
    loss_parallel: tuple
