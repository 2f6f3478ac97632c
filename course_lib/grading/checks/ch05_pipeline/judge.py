"""The student-facing side of chapter 05's pipeline-stage checks: a stage's gradients and loss against
single-process training (computed here), its messages against its op list's, and op lists that disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import failures, judging
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.models import STACK_WIDTH, make_layer_stack

FORBIDDEN_REASON = "a pipeline stage talks to its neighbours with send/recv/isend/irecv only"
SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
MICRO_BATCH = 3            # samples per micro-batch
# Two stages whose orders disagree: stage 0 waits for micro-batch 0's gradient, stage 1 for micro-batch 1.
MISMATCHED_OPS = [[("F", 0), ("B", 0), ("F", 1), ("B", 1)], [("F", 1), ("F", 0), ("B", 0), ("B", 1)]]


def batch(seed: int, microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch (inputs, targets) of ``microbatches`` micro-batches, drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    size = (microbatches * MICRO_BATCH, STACK_WIDTH)
    return torch.randn(size, generator=generator), torch.randn(size, generator=generator)


def reference(seed: int, microbatches: int) -> tuple[float, list[torch.Tensor]]:
    """Loss and every parameter's gradient of the whole model on the whole batch, in one process."""
    model = make_layer_stack(seed)
    inputs, targets = batch(seed, microbatches)
    loss = nn.functional.mse_loss(model(inputs), targets)
    loss.backward()
    return loss.item(), [p.grad for p in model.parameters()]


@dataclass(frozen=True)
class StageOutcome:
    """One stage after the step: the loss it returned (the last stage; None elsewhere), its parameters'
    gradients, and its calls [op, peer, nbytes]."""

    loss: float | None
    grads: list
    events: list


@dataclass(frozen=True)
class StageRun(RankRun):
    """One step on ``world_size`` stage ranks with op lists ``ops`` of ``kind``: per rank its
    ``StageOutcome`` (``records``), or why nothing came back."""

    kind: str = ""
    microbatches: int = 0
    ops: list = ()

    @property
    def stages(self) -> int:
        return self.world_size


@judging
def gradient_problems(run: StageRun) -> list[str]:
    """Each stage's gradients and the last stage's loss against single-process training of the batch."""
    loss, grads = reference(run.seed, run.microbatches)
    where = f"{run.stages} stages, {run.microbatches} micro-batches, {run.kind} op lists"
    problems = []
    got_loss = run.records[-1].loss
    if got_loss is None or abs(got_loss - loss) > 1e-5 * max(1.0, abs(loss)):
        problems.append(f"{where}: the last stage returned loss {got_loss}, the whole batch's loss is "
                        f"{loss:.6f} (the mean of the micro-batch losses)")
    got = [g for outcome in run.records for g in outcome.grads]
    for index, (mine, want) in enumerate(zip(got, grads, strict=True)):
        if mine is None or not torch.allclose(mine, want, rtol=1e-4, atol=1e-6):
            stage = next(s for s, n in enumerate(_boundaries(run)) if index < n)
            scale = "" if mine is None else f" (yours / expected = {(mine.norm() / want.norm()).item():.3g})"
            problems.append(f"{where}: stage {stage}'s parameter {index} has gradient "
                            f"{'None' if mine is None else mine.reshape(-1)[:3].tolist()}..., expected "
                            f"{want.reshape(-1)[:3].tolist()}...{scale}")
            break
    return problems


def _boundaries(run: StageRun) -> list[int]:
    counts = [len(outcome.grads) for outcome in run.records]
    return [sum(counts[:s + 1]) for s in range(len(counts))]


def expected_sends(ops, stage: int, stages: int) -> list[int]:
    """The peers ``stage`` sends to, in order: the next one after a forward, the previous after a backward."""
    peers = []
    for phase, _ in ops:
        peer = stage + 1 if phase == "F" else stage - 1
        if 0 <= peer < stages:
            peers.append(peer)
    return peers


@judging
def traffic_problems(run: StageRun) -> list[str]:
    """Per stage: sends in op order to the right neighbour, one activation or gradient each; as many recvs."""
    problems, message_bytes = [], MICRO_BATCH * STACK_WIDTH * 4
    for stage, outcome in enumerate(run.records):
        where = f"{run.stages} stages, {run.kind} op lists, stage {stage}"
        events = outcome.events
        other = sorted({op for op, _, _ in events if op not in SENDS | RECEIVES})
        sends = [peer for op, peer, _ in events if op in SENDS]
        receives = sorted(peer for op, peer, _ in events if op in RECEIVES)
        sizes = sorted({nbytes for op, _, nbytes in events if op in SENDS | RECEIVES})
        want = expected_sends(run.ops[stage], stage, run.stages)
        if other:
            problems.append(f"{where}: called {', '.join(other)}; {FORBIDDEN_REASON}")
        if sends != want:
            problems.append(f"{where}: sent to stages {sends}; its ops {run.ops[stage]} send, in that "
                            f"order, to {want} (an activation to s+1 after each forward, a gradient to s-1 "
                            "after each backward)")
        if receives != sorted(expected_sends(run.ops[stage], stage, run.stages)):
            problems.append(f"{where}: received from stages {receives}, expected one message from each "
                            f"neighbour per micro-batch: {sorted(want)}")
        if sizes and sizes != [message_bytes]:
            problems.append(f"{where}: messages of {sizes} bytes; every activation and gradient of a "
                            f"micro-batch is {MICRO_BATCH}x{STACK_WIDTH} float32 = {message_bytes} bytes")
    return problems


def mismatch_problems(completed: StageRun, mismatched: StageRun) -> list[str]:
    """A step with matching op lists runs, and one with lists that disagree stops (raises, or hangs)."""
    if not completed.completed:
        return [f"first, a step with matching op lists must run: {reason}"
                for reason in failures([completed])]
    if mismatched.completed:
        return [f"with mismatched op lists {MISMATCHED_OPS} (stage 0 waits for micro-batch 0's gradient "
                "while stage 1 waits for micro-batch 1's activation) your stages still finished: each stage "
                "must run exactly its own op list, in its order"]
    return []
