"""The rank side of chapter 10's overlap and backward checks: the student's forward ring run with its calls
and products timed in order, and the student's ``ring_attention_backward`` run on exact saved statistics.

Ranks only run the student's code and record what it did; ``judge.py`` decides what is wrong.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun
from course_lib.grading.checks.ch10_ring_attention.ranks import (
    DTYPES,
    FORBIDDEN,
    FORBIDDEN_REASON,
    FORBIDDEN_TEXT,
    HUNG_TEXT,
    AttentionCase,
    _student_frames,
    rank_inputs,
    whole_inputs,
)
from course_lib.real import record_traffic
from course_lib.real.chapter_runs.sequence_split import layout_positions
from course_lib.real.launch.errors import ForbiddenCallError
from course_lib.real.record.compute_log import _FLOPS, _elementwise, record_compute, warm_up


def whole_forward(case: AttentionCase, seed: int, index: int, world_size: int):
    """q, k, v, the output and its log-sum-exp per row (natural log, scores scaled by 1/sqrt(d)) and a
    gradient of the output for the whole sequence, in float64."""
    q, k, v = whole_inputs(case, seed, index, world_size)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if case.causal:
        length = q.shape[2]
        scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse[..., None]) @ v
    generator = torch.Generator().manual_seed((seed * 7 + index * 104_729 + world_size) % 2**63)
    grad_out = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    return q, k, v, out, lse, grad_out


def backward_inputs(case: AttentionCase, seed: int, index: int, rank: int, world_size: int):
    """This rank's q, k, v, out, lse, grad_out in the case's dtype, rows in the rank's layout."""
    positions = torch.tensor(layout_positions(world_size * case.chunk, world_size, rank, case.layout))
    return [whole.index_select(2, positions).to(DTYPES[case.dtype])
            for whole in whole_forward(case, seed, index, world_size)]


class _BlockWork(TorchDispatchMode):
    """Notes when the rank computed on a block: a product, or other arithmetic touching at least a block's
    scores' worth of elements (a product written as a broadcast multiply and a sum counts)."""

    def __init__(self, least: int):
        super().__init__()
        self.least, self.marks = least, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        start = time.perf_counter()
        result = func(*args, **kwargs)
        if func in _FLOPS or _elementwise(func, args, kwargs, result) >= self.least:
            self.marks.append(start)
        return result


def _timeline(traffic, work: _BlockWork) -> list:
    """The rank's calls and its work on blocks in the order they ran: ("post", op, peer), ("wait", op,
    peer) and ("compute",), sorted on the rank's own clock (only their order is kept)."""
    marks = [(e.start, 0, ("post", str(e.op), e.peer)) for e in traffic.events]
    marks += [(e.end, 2, ("wait", str(e.op), e.peer)) for e in traffic.events]
    marks += [(start, 1, ("compute",)) for start in work.marks]
    return [mark for _, _, mark in sorted(marks, key=lambda m: (m[0], m[1]))]


def _forward_cases(rank, world_size, student, cases, seed):
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        q, k, v = rank_inputs(case, seed, index, rank, world_size)
        blocks = _BlockWork(case.batch * case.heads * case.chunk ** 2)
        with record_traffic(forbid=FORBIDDEN, reason=FORBIDDEN_REASON) as traffic, blocks:
            returned = function(q, k, v, causal=case.causal)
        outcomes.append({"out": returned.detach().clone() if isinstance(returned, torch.Tensor) else None,
                         "timeline": _timeline(traffic, blocks)})
    return outcomes


def _backward_cases(rank, world_size, student, cases, seed):
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        q, k, v, out, lse, grad_out = backward_inputs(case, seed, index, rank, world_size)
        layout = {"layout": case.layout} if case.layout != "contiguous" else {}
        blocks = _BlockWork(case.batch * case.heads * case.chunk ** 2)
        try:
            with record_traffic(forbid=FORBIDDEN, reason=FORBIDDEN_REASON) as traffic, \
                    record_compute() as work, blocks:
                returned = function(q, k, v, out, lse, grad_out, causal=case.causal, **layout)
        except ForbiddenCallError:
            raise
        grads = [g.detach().clone() if isinstance(g, torch.Tensor) else None
                 for g in (returned if isinstance(returned, (tuple, list)) else [returned])]
        outcomes.append({
            "grads": grads, "returned": type(returned).__name__,
            "events": [(str(e.op), e.peer, int(e.nbytes)) for e in traffic.events],
            "dispatched": list(work.collectives()), "flops": int(work.flops()),
            "timeline": _timeline(traffic, blocks), "peak": int(work.peak_bytes)})
    return outcomes


@dataclass(frozen=True)
class ForwardOutcome:
    """One rank's forward in one case: its output, and its calls and products in order."""

    out: torch.Tensor | None
    timeline: list


@dataclass(frozen=True)
class BackwardOutcome:
    """One rank's backward in one case: what it returned (dq, dk, dv expected), its traffic as (op, peer,
    nbytes), the collectives below Python, its products' FLOPs, its calls and products in order, and the
    most bytes of new tensors it held at once."""

    grads: list
    returned: str
    events: list
    dispatched: list
    flops: int
    timeline: list
    peak: int = 0


def _run(rank_fn, record, student, world_size, cases, seed, timeout) -> RankRun:
    text = FailureText(student.name, hung=HUNG_TEXT, forbidden=FORBIDDEN_TEXT, frames=_student_frames)
    warm_up()
    return run_answer(rank_fn, world_size, student, list(cases), seed, record=record, text=text,
                      timeout=timeout, cases=cases, seed=seed)


def run_forward(student, world_size: int, cases, seed: int, timeout: float) -> RankRun:
    """The student's forward ring on every case, its timeline recorded; failures recorded, never raised."""
    return _run(_forward_cases, ForwardOutcome, student, world_size, cases, seed, timeout)


def run_backward(student, world_size: int, cases, seed: int, timeout: float) -> RankRun:
    """The student's ``ring_attention_backward`` on every case; failures recorded, never raised."""
    return _run(_backward_cases, BackwardOutcome, student, world_size, cases, seed, timeout)
