"""Judging chapter 06's vocabulary-parallel cross-entropy: each rank's loss and gradient against
F.cross_entropy on the whole logits (float64), and the traffic of per-token values only, drawn when wrong.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import cases_of, judging
from course_lib.grading.attempt.rank_attempt import RankRun

from .ranks import LossCase, LossOutcome, case_tensors


def reference(case: LossCase, seed: int) -> tuple[float, torch.Tensor]:
    """F.cross_entropy (mean over tokens) of the whole logits, in float64, and its gradient (times the
    case's upstream gradient)."""
    logits, target = case_tensors(case, seed)
    logits = logits.to(torch.float64).requires_grad_(True)
    loss = nn.functional.cross_entropy(logits, target)
    loss.backward(torch.tensor(case.upstream, dtype=torch.float64))
    return loss.item(), logits.grad


def _tolerance(case: LossCase) -> float:
    return 1e-10 if case.dtype == "float64" else 1e-4


@judging
def value_problems(run: RankRun) -> list[str]:
    """Every rank's loss equals F.cross_entropy on the whole logits."""
    problems = []
    for index, case, outcomes in cases_of(run):
        want, _ = reference(case, run.seed + index)
        for rank, outcome in enumerate(outcomes):
            got = outcome.loss
            if not abs(got - want) <= _tolerance(case) * max(1.0, abs(want)):
                problems.append(f"rank {rank}, {case.describe(run.world_size)}: loss {got:.6g}, "
                                f"F.cross_entropy on the whole logits gives {want:.6g}")
    return problems


@judging
def gradient_problems(run: RankRun) -> list[str]:
    """Every rank's gradient is its slice of the gradient of F.cross_entropy on the whole logits."""
    problems = []
    for index, case, outcomes in cases_of(run):
        _, full = reference(case, run.seed + index)
        slices = case.slices(run.world_size)
        for rank, ((start, stop), outcome) in enumerate(zip(slices, outcomes, strict=True)):
            want, got = full[:, start:stop], outcome.grad
            where = f"rank {rank}, {case.describe(run.world_size)}"
            if got is None or got.shape != want.shape:
                shape = "missing" if got is None else tuple(got.shape)
                problems.append(f"{where}: the gradient of your slice is {shape}, expected "
                                f"{tuple(want.shape)}")
                continue
            got = got.to(torch.float64)
            if not torch.allclose(got, want, rtol=_tolerance(case), atol=_tolerance(case)):
                ratio = (got.norm() / want.norm().clamp_min(1e-30)).item()
                problems.append(f"{where}: gradient differs from the slice of F.cross_entropy's by up to "
                                f"{(got - want).abs().max().item():.3g} (its norm is {ratio:.3g}x the "
                                "expected one)")
    return problems


def _sent(outcome: LossOutcome) -> int:
    return sum(nbytes for _, nbytes in outcome.forward + outcome.backward)


def _calls(events) -> str:
    return ", ".join(f"{op} of {nbytes} B" for op, nbytes in events) or "nothing"


@judging
def traffic_problems(run: RankRun, pair: tuple[int, int] = (0, 1)) -> list[str]:
    """Only all-reduces, and the same bytes for the two cases in ``pair`` (same tokens, vocabularies
    of different sizes): per-token values cross the ranks, never the logits. Draws both recordings."""
    small, large = (run.cases[i] for i in pair)
    problems = []
    for rank, per_case in enumerate(run.records):
        a, b = per_case[pair[0]], per_case[pair[1]]
        others = sorted({op for outcome in (a, b) for op, _ in outcome.forward + outcome.backward
                         if op != "all_reduce"})
        if others or _sent(a) != _sent(b):
            why = (f"it called {', '.join(others)}: the logits stay where they are, only per-token values "
                   "may cross the ranks (all-reduces)" if others else
                   "the bytes grow with the vocabulary: something the size of the logits crossed the ranks")
            problems.append(
                f"rank {rank} of {run.world_size}, {small.tokens} tokens: {why}\n"
                f"    vocabulary {small.vocab}: forward {_calls(a.forward)}; "
                f"backward {_calls(a.backward)}\n"
                f"    vocabulary {large.vocab}: forward {_calls(b.forward)}; "
                f"backward {_calls(b.backward)}\n"
                f"    expected: all-reduces of per-token values only, the same for both vocabularies (e.g. "
                f"loss_parallel's three of {small.tokens} values each in forward, nothing in backward)")
    return problems
