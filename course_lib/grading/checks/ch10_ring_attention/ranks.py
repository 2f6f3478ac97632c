"""The rank side of chapter 10's ring-attention checks: each rank's chunk of q, k, v rebuilt from a seed,
the student's ring attention run on it under the traffic and compute recorders.

Ranks only run the student's function and record what it did; ``run_student`` brings back one plain
outcome per case and rank (or why there is none), and ``ch10_ring_attention_judge`` decides what is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.real import record_traffic
from course_lib.real.chapter_runs.sequence_split import layout_positions
from course_lib.real.launch.errors import ForbiddenCallError
from course_lib.real.record.compute_log import record_compute, warm_up

FORBIDDEN = ("collectives",)   # every torch.distributed collective, barrier included
FORBIDDEN_REASON = "ring attention passes keys and values with send/recv/isend/irecv only"
DTYPES = {"float32": torch.float32, "float64": torch.float64}
HUNG_TEXT = ("{subject} did not finish on {world_size} ranks within {timeout:g} s (a deadlock: does every "
             "rank's send have a matching receive on its neighbour, posted so that nobody waits for a rank "
             "that is itself waiting?), so the test stopped it.")
FORBIDDEN_TEXT = "{subject} used a collective, which this exercise forbids: {summary}"
RAISED = "raised "   # how AttentionOutcome.returned starts for a tolerated case that raised


@dataclass(frozen=True)
class AttentionCase:
    """One call: sizes of each rank's chunk, dtype, mask and layout.

    ``logits`` scales the queries so that scores reach about that size (1e4 for the stability part),
    keys growing along the sequence so that later blocks hold larger scores; ``strided`` hands q, k, v
    as non-contiguous views (as a model's (batch, seq, heads, dim) activations transposed are).
    """

    batch: int
    heads: int
    chunk: int
    head_dim: int
    dtype: str = "float64"
    causal: bool = False
    layout: str = "contiguous"
    logits: float = 1.0
    strided: bool = False

    def shape(self, world_size: int) -> tuple[int, int, int, int]:
        """The whole sequence's (batch, heads, world_size x chunk, head_dim)."""
        return self.batch, self.heads, world_size * self.chunk, self.head_dim

    @property
    def tolerance(self) -> float:
        """Largest difference allowed from attention computed in float64 on one process."""
        exact = 1e-10 if self.dtype == "float64" else 1e-5
        return exact if self.logits == 1.0 else (1e-8 if self.dtype == "float64" else 2e-3)

    def describe(self, world_size: int) -> str:
        mask = "causal" if self.causal else "no mask"
        view = ", non-contiguous views" if self.strided else ""
        big = f", scores up to about {self.logits:g}" if self.logits != 1.0 else ""
        return (f"{world_size} ranks, chunk (batch, heads, chunk, head_dim) = "
                f"{(self.batch, self.heads, self.chunk, self.head_dim)}, {self.dtype}, {mask}, {self.layout} "
                f"layout{view}{big}")


def whole_inputs(case: AttentionCase, seed: int, index: int, world_size: int):
    """q, k, v of the whole sequence in float64: what every rank's chunk is cut from."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + index * 7919 + world_size) % 2**63)
    shape = case.shape(world_size)
    q, k, v = (torch.randn(shape, generator=generator, dtype=torch.float64) for _ in range(3))
    if case.logits != 1.0:
        length = q.shape[2]
        growth = 1 + 3 * torch.arange(length, dtype=torch.float64) / length
        q = q * (case.logits / math.sqrt(case.head_dim))
        k = k * growth[:, None]
    return q, k, v


def rank_inputs(case: AttentionCase, seed: int, index: int, rank: int, world_size: int):
    """This rank's chunk of q, k, v in the case's dtype (non-contiguous views when the case says so)."""
    positions = torch.tensor(layout_positions(world_size * case.chunk, world_size, rank, case.layout))
    chunks = []
    for whole in whole_inputs(case, seed, index, world_size):
        chunk = whole.index_select(2, positions).to(DTYPES[case.dtype])
        if case.strided:   # the same values, laid out (batch, chunk, heads, dim) and seen transposed
            chunk = chunk.transpose(1, 2).contiguous().transpose(1, 2)
        chunks.append(chunk)
    return chunks


def _run_cases(rank, world_size, student, cases, seed, tolerant=()):
    """Rank side: the student's function on every case, its traffic and work recorded; no judging. A case
    whose index is in ``tolerant`` may raise (not a refusal): it comes back with no output."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        q, k, v = rank_inputs(case, seed, index, rank, world_size)
        layout = {"layout": case.layout} if case.layout != "contiguous" else {}
        try:
            with record_traffic(forbid=FORBIDDEN, reason=FORBIDDEN_REASON) as traffic, \
                    record_compute() as work:
                returned = function(q, k, v, causal=case.causal, **layout)
        except ForbiddenCallError:
            raise
        except Exception as error:  # noqa: BLE001 - judged by the part that owns the case, not here
            if index not in tolerant:
                raise
            returned = error
        raised = f"{RAISED}{type(returned).__name__}: {returned}"[:300] if isinstance(returned, Exception) \
            else None
        outcomes.append({
            "out": returned.detach().clone() if isinstance(returned, torch.Tensor) else None,
            "returned": raised or type(returned).__name__,
            "events": [(str(e.op), e.peer, int(e.nbytes)) for e in traffic.events],
            "dispatched": list(work.collectives()),
            "flops": int(work.flops()),
            "arithmetic": int(work.arithmetic()),
            "peak": int(work.peak_bytes),
        })
    return outcomes


@dataclass(frozen=True)
class AttentionOutcome:
    """One rank's side of one case: the output, the name of what came back, its traffic as (op, peer,
    nbytes), the communication ops below Python that were not point-to-point, its products' FLOPs, the
    most bytes of new tensors it held at once, and all its arithmetic (products' FLOPs plus the elements
    its other arithmetic touched: a product written as a broadcast multiply and a sum counts there)."""

    out: torch.Tensor | None
    returned: str
    events: list
    dispatched: list
    flops: int
    peak: int
    arithmetic: int = 0


def run_student(student, world_size: int, cases, seed: int, timeout: float, tolerant=()) -> RankRun:
    """Every case on ``world_size`` real ranks in one run; a failure or a hang is recorded, never raised.
    ``tolerant``: indices of cases that may raise without failing the run (another part judges them)."""
    text = FailureText(student.name, hung=HUNG_TEXT, forbidden=FORBIDDEN_TEXT, frames=_student_frames)
    warm_up()
    return run_answer(_run_cases, world_size, student, list(cases), seed, tuple(tolerant),
                      record=AttentionOutcome, text=text, timeout=timeout, cases=cases, seed=seed)


def _student_frames(remote_traceback: str) -> str:
    return frames_after(remote_traceback, __file__)
