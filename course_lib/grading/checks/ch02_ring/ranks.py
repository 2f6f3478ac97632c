"""The rank side of chapter 02's ring checks: inputs rebuilt from a seed, the student's ring run on them.

Ranks only run the student's function and record its traffic; ``run_student`` brings back one
``RingOutcome`` per case and rank (or why there is none) and ``ring_judge`` decides what is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.real import record_traffic

FORBIDDEN = ("collectives",)  # every torch.distributed collective, barrier included
FORBIDDEN_REASON = "the ring exercise must be built from send/recv/isend/irecv"
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}
KINDS = ("reduce_scatter", "all_gather", "all_reduce")
HUNG_TEXT = ("{subject} did not finish on {world_size} ranks within {timeout:g} s (a deadlock, or a loop "
             "that never ends), so the test stopped it.")
FORBIDDEN_TEXT = "{subject} used a collective, which this exercise forbids: {summary}"


@dataclass(frozen=True)
class RingCase:
    """One input: its shape, dtype name, and whether the tensor is a strided (non-contiguous) view."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    strided: bool = False

    @property
    def numel(self) -> int:
        return int(torch.Size(self.shape).numel())


def rank_input(case: RingCase, seed: int, index: int, rank: int, world_size: int, kind: str):
    """The tensor rank ``rank`` hands to the student in case ``index``, and the base it views (or None).

    For all_gather, only chunk ``rank`` holds data; the others hold junk that must be overwritten.
    """
    generator = torch.Generator().manual_seed((seed * 1_000_003 + index * 1009 + rank) % 2**63)
    dtype = DTYPES[case.dtype]
    if dtype.is_floating_point:
        values = torch.randn(case.shape, generator=generator, dtype=torch.float64).to(dtype)
    else:
        values = torch.randint(-1000, 1000, case.shape, generator=generator, dtype=dtype)
    if kind == "all_gather":
        junk = torch.full_like(values.view(-1), -7777)
        junk_chunks, value_chunks = torch.tensor_split(junk, world_size), torch.tensor_split(values.view(-1),
                                                                                             world_size)
        junk_chunks[rank].copy_(value_chunks[rank])
        values = junk.view(case.shape)
    if not case.strided:
        return values, None
    base = torch.full((*case.shape, 2), -5555, dtype=dtype)
    base[..., 0] = values
    return base[..., 0], base


def expected_result(case: RingCase, seed: int, index: int, world_size: int, kind: str) -> torch.Tensor:
    """What every rank's tensor must hold afterwards (for reduce_scatter: only chunk ``rank`` counts)."""
    inputs = [rank_input(case, seed, index, rank, world_size, kind)[0] for rank in range(world_size)]
    if kind == "all_gather":
        pieces = [torch.tensor_split(inputs[o].reshape(-1), world_size)[o] for o in range(world_size)]
        return torch.cat(pieces).view(case.shape)
    exact = torch.stack([x.to(torch.float64) if x.is_floating_point() else x for x in inputs]).sum(0)
    return exact.to(DTYPES[case.dtype])


@dataclass(frozen=True)
class RingOutcome:
    """One rank's side of one case: its tensor afterwards, the base a strided view came from, what the
    function returned, its traffic as (op, peer, nbytes), and dist.all_reduce's answer when asked for."""

    after: torch.Tensor
    base: torch.Tensor | None
    returned: torch.Tensor | None
    events: list
    torch_all_reduce: torch.Tensor | None = None


def _run_cases(rank, world_size, student, kind, cases, seed, compare_with_torch):
    """Rank side: run the student's function on every case, recording its traffic; no judging here."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        tensor, base = rank_input(case, seed, index, rank, world_size, kind)
        reference = None
        if compare_with_torch and kind == "all_reduce":
            reference = tensor.clone()
            dist.all_reduce(reference)
        with record_traffic(forbid=FORBIDDEN, reason=FORBIDDEN_REASON) as log:
            returned = function(tensor)
        outcomes.append({
            "after": tensor.detach().clone(),
            "base": None if base is None else base.clone(),
            "returned": returned.detach().clone() if isinstance(returned, torch.Tensor) else None,
            "events": [(str(e.op), e.peer, int(e.nbytes)) for e in log.events],
            "torch_all_reduce": reference,
        })
    return outcomes


def run_student(student, kind: str, world_size: int, cases, seed: int, timeout: float,
                compare_with_torch: bool = False) -> RankRun:
    """Run every case on ``world_size`` real ranks; a failure or a hang is recorded, never raised."""
    text = FailureText(student.name, hung=HUNG_TEXT, forbidden=FORBIDDEN_TEXT, frames=_student_frames)
    return run_answer(_run_cases, world_size, student, kind, list(cases), seed, compare_with_torch,
                      record=RingOutcome, text=text, timeout=timeout, cases=cases, seed=seed)


def _student_frames(remote_traceback: str) -> str:
    return frames_after(remote_traceback, __file__)
