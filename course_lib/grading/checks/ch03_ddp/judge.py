"""The judges of chapter 03's DDP exercise: what the student's DDP did on real ranks, against what it should.

Expected values come from single-process training on the whole batch (computed here) and from torch's
own DistributedDataParallel on the same data; overlap, volume and buckets come from the recorded traffic
and from when each gradient was ready. Each judge returns a list of problems (empty: passed).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import cases_of, judging, ranks_of
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch03_ddp.ranks import (
    LEARNING_RATE,
    DDPCase,
    TrainingOutcome,
    build_model,
    global_batches,
    torch_ddp_finals,
)

COMMUNICATION = frozenset({"all_reduce", "isend", "irecv", "send", "recv", "reduce", "reduce_scatter",
                           "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor", "broadcast"})
RTOL, ATOL = 1e-4, 1e-5


class Call(NamedTuple):
    """One communication call a rank recorded (ranks send them back as plain tuples)."""

    op: str
    nbytes: int
    start: float
    end: float


class Phase(NamedTuple):
    """A forward or backward of one training step, as a rank timed it."""

    label: str
    start: float
    end: float


def single_process(case: DDPCase, seed: int, world_size: int) -> tuple[list[dict], dict]:
    """Gradients of every step and the final state of plain training on the whole global batch."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny models: more threads only spin and wait, 20-50x slower on a busy machine
    try:
        return _train_alone(case, seed, world_size)
    finally:
        torch.set_num_threads(threads)


def _train_alone(case: DDPCase, seed: int, world_size: int) -> tuple[list[dict], dict]:
    model = build_model(case.model, seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    grads = []
    for inputs, targets in global_batches(case.model, seed, world_size, case.steps):
        optimizer.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(inputs), targets).backward()
        grads.append({name: None if p.grad is None else p.grad.clone()
                      for name, p in model.named_parameters()})
        optimizer.step()
    return grads, {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()}


def _close(actual, expected) -> bool:
    if expected is None:
        return actual is None or (isinstance(actual, torch.Tensor) and not bool(actual.any()))
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return False
    return bool(torch.allclose(actual, expected, rtol=RTOL, atol=ATOL))


def _first_difference(actual: dict, expected: dict) -> str | None:
    for name, want in expected.items():
        got = actual.get(name)
        if not _close(got, want):
            shown = "nothing" if got is None else f"{got.reshape(-1)[:4].tolist()}"
            wanted = "no gradient (or zeros)" if want is None else f"{want.reshape(-1)[:4].tolist()}"
            return f"{name}: expected {wanted}..., got {shown}..."
    return None


@judging
def value_problems(run: RankRun, compare_with_torch: bool = True, timeout: float = 30) -> list[str]:
    """Every rank's averaged gradients (each step) and final parameters against single-process training,
    and against torch's DistributedDataParallel on the same data."""
    problems = []
    torch_finals = (torch_ddp_finals(run.world_size, run.cases, run.seed, timeout) if compare_with_torch
                    else None)
    for index, case, outcomes in cases_of(run):
        grads, final = single_process(case, run.seed, run.world_size)
        where = case.describe(run.world_size)
        for rank, outcome in enumerate(outcomes):
            for step, (got, want) in enumerate(zip(outcome.grads, grads, strict=True)):
                wrong = _first_difference(got, want)
                if wrong:
                    problems.append(f"{where}, rank {rank}, step {step}: after finish_gradient_"
                                    "synchronization() the gradient should be the average over ranks "
                                    f"(= single-process training on the whole batch); {wrong}")
                    break
            wrong = _first_difference(outcome.final, final)
            if wrong:
                problems.append(f"{where}, rank {rank}: final parameters differ from single-process "
                                f"training; {wrong}")
            wrong = torch_finals and _first_difference(outcome.final, torch_finals[index][rank])
            if wrong:
                problems.append(f"{where}, rank {rank}: final parameters differ from torch's "
                                f"DistributedDataParallel; {wrong}")
    return problems


def steps_of(outcome: TrainingOutcome) -> list[tuple[float, float, list]]:
    """Per training step: when its forward started, when its backward ended, its communication events."""
    phases = [Phase(*span) for span in outcome.spans]
    calls = [Call(*event) for event in outcome.events]
    forwards = [phase for phase in phases if phase.label == "forward"]
    backwards = [phase for phase in phases if phase.label == "backward"]
    bounds = [phase.start for phase in forwards[1:]] + [float("inf")]
    return [(forward.start, backward.end, [c for c in calls if forward.start <= c.start < bound])
            for forward, backward, bound in zip(forwards, backwards, bounds, strict=True)]


@judging
def overlap_problems(run: RankRun) -> list[str]:
    """In every step the first communication call starts before loss.backward() returns."""
    problems = []
    for _, case, outcomes in cases_of(run):
        for rank, outcome in enumerate(outcomes):
            for step, (_, backward_end, events) in enumerate(steps_of(outcome)):
                sent = [e for e in events if e.op in COMMUNICATION]
                if not sent:
                    problems.append(f"{case.describe(run.world_size)}, rank {rank}, step {step}: no "
                                    "communication recorded at all in this step")
                elif sent[0].start >= backward_end:
                    late = (sent[0].start - backward_end) * 1e3
                    # the first late step is drawn; the others would only repeat the picture
                    drawing = "" if problems else (
                        "; your recorded step:\n" + step_timeline_text(outcome, step))
                    problems.append(f"{case.describe(run.world_size)}, rank {rank}, step {step}: the "
                                    f"first {sent[0].op} started {late:.2f} ms after loss.backward() "
                                    "returned; launch each bucket's all-reduce from a gradient hook, during "
                                    f"the backward{drawing}")
                    break
    return problems


TIMELINE_WIDTH = 48   # characters of the bar drawn for one step
TIMELINE_ROWS = 12    # communication calls shown (a DDP with one bucket per parameter makes dozens)


def step_timeline_text(outcome: TrainingOutcome, step: int) -> str:
    """One rank's training step as text: forward, backward and each communication call, in ms from the
    step's start, with a bar per row, so a student sees where their traffic fell against the backward."""
    start, _, events = steps_of(outcome)[step]
    forward, backward = ([phase for phase in map(Phase._make, outcome.spans) if phase.label == label][step]
                         for label in ("forward", "backward"))
    sent = [e for e in events if e.op in COMMUNICATION]
    rows = [(phase.label, phase.start, phase.end, "") for phase in (forward, backward)]
    rows += [(call.op, call.start, call.end, f"{call.nbytes} bytes") for call in sent[:TIMELINE_ROWS]]
    stop = max(end for _, _, end, _ in rows)
    scale = TIMELINE_WIDTH / max(stop - start, 1e-9)
    lines = []
    for label, begin, end, note in rows:
        left = min(int((begin - start) * scale), TIMELINE_WIDTH - 1)
        width = max(1, min(int((end - start) * scale), TIMELINE_WIDTH) - left)
        bar = (" " * left + "#" * width).ljust(TIMELINE_WIDTH)
        lines.append(f"    {label:<12} {(begin - start) * 1e3:8.2f} - {(end - start) * 1e3:8.2f} ms |{bar}| "
                     f"{note}".rstrip())
    if len(sent) > TIMELINE_ROWS:
        lines.append(f"    ... and {len(sent) - TIMELINE_ROWS} more communication calls")
    return "\n".join(lines)


def unique_trainable_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


@judging
def volume_problems(run: RankRun) -> list[str]:
    """Each step all-reduces exactly the trainable parameters' bytes: frozen ones never, tied ones once."""
    problems = []
    for _, case, outcomes in cases_of(run):
        expected = unique_trainable_bytes(build_model(case.model, run.seed))
        for rank, outcome in enumerate(outcomes):
            for step, (_, _, events) in enumerate(steps_of(outcome)):
                reduced = sum(e.nbytes for e in events if e.op == "all_reduce")
                if reduced != expected:
                    problems.append(f"{case.describe(run.world_size)}, rank {rank}, step {step}: all-reduced "
                                    f"{reduced} bytes, but the trainable parameters hold {expected} bytes (a "
                                    "tied parameter counts once, a frozen one not at all)")
                    break
    return problems


@judging
def broadcast_problems(run: RankRun) -> list[str]:
    """After construction every rank holds rank 0's parameters and buffers; .module and forward work."""
    problems = []
    rank_zero = build_model("batch norm", run.seed)
    with torch.no_grad():
        for buffer in rank_zero.buffers():
            buffer.fill_(1)
    rank_zero = rank_zero.state_dict()
    for rank, outcome in enumerate(run.records):
        wrong = _first_difference(outcome.after, rank_zero)
        if wrong:
            problems.append(f"rank {rank}: after DDP(model) the model should hold rank 0's parameters and "
                            f"buffers (broadcast from rank 0); {wrong}")
        if not outcome.module_kept:
            problems.append(f"rank {rank}: ddp.module should be the very model you wrapped")
        if not outcome.forward_runs_module:
            problems.append(f"rank {rank}: ddp(x) should return what the wrapped model returns for x")
    return problems


@judging
def silence_problems(run: RankRun) -> list[str]:
    """On one rank: not a single communication call."""
    used = sorted({Call(*e).op for each in ranks_of(run) for e in each.outcome.events})
    return [f"on 1 rank DDP should send nothing, but it called {', '.join(used)}"] if used else []
