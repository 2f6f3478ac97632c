"""Checks of chapter 05's second exercise: one pipeline stage run for real, from an op list, on gloo ranks.

Each rank runs the student's function on its stage of a seeded layer stack while its traffic is recorded;
the judging side recomputes single-process gradients itself and compares gradients and messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.dist import record_traffic
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with, frames_after, run_on_ranks
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch05_pipeline.visible import PIPELINING
from course_lib.models import STACK_WIDTH, make_layer_stack, split_into_stages
from course_lib.sim import pipeline_schedule

FORBIDDEN_REASON = "a pipeline stage talks to its neighbours with send/recv/isend/irecv only"
REFUSAL = Refusal("run_stage", modules=PIPELINING,
                  why="the exercise is to run the stage's forwards, backwards and messages yourself")
SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})
MICRO_BATCH = 3            # samples per micro-batch
VISIBLE_TIMEOUT_S = 6
# Two stages whose orders disagree: stage 0 waits for micro-batch 0's gradient, stage 1 for micro-batch 1.
MISMATCHED_OPS = [[("F", 0), ("B", 0), ("F", 1), ("B", 1)], [("F", 1), ("F", 0), ("B", 0), ("B", 1)]]


def warm_autograd() -> None:
    """A first backward with an explicit gradient imports sympy (seconds); do it once before forking."""
    x = torch.ones(2, requires_grad=True)
    (x * 2).backward(torch.ones(2))


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


def course_ops(kind: str, stages: int, microbatches: int) -> list:
    """The course's op lists as ("F"|"B", m) pairs: the part-2 input, whoever wrote part 1."""
    return [[op[:2] for op in stage] for stage in pipeline_schedule(kind, stages, microbatches).ops]


def _run_stage(rank, world_size, student, ops, seed, microbatches):
    """Rank side: this rank's stage of the model, the student's step on it, its gradients and traffic."""
    function = student.resolve()
    module = split_into_stages(make_layer_stack(seed), world_size)[rank]
    inputs, targets = batch(seed, microbatches)
    first, last = rank == 0, rank == world_size - 1
    with record_traffic(forbid=("collectives",), reason=FORBIDDEN_REASON) as log:
        loss = function(module, list(ops[rank]), (MICRO_BATCH, STACK_WIDTH),
                        inputs=list(inputs.chunk(microbatches)) if first else None,
                        targets=list(targets.chunk(microbatches)) if last else None,
                        loss_fn=nn.functional.mse_loss if last else None)
    return {"loss": float(loss) if last and isinstance(loss, (int, float, torch.Tensor)) else None,
            "grads": [None if p.grad is None else p.grad.clone() for p in module.parameters()],
            "events": [[str(e.op), e.peer, int(e.nbytes)] for e in log.events]}


@dataclass(frozen=True)
class StageRun:
    """One step on ``stages`` ranks: per rank what came back, or why nothing did."""

    kind: str
    stages: int
    microbatches: int
    seed: int
    ops: list
    outcomes: tuple = ()
    error: str | None = None
    hung: bool = False


def _failure_text(where: str) -> FailureText:
    return FailureText(
        where,
        hung=("{subject} did not finish within {timeout:g} s, so the test stopped it (a deadlock: two stages "
              "each waiting for the other)."),
        forbidden="{subject} used a collective, which this exercise forbids: {summary}",
        not_written="{subject} is not written yet (it raises NotImplementedError): {summary}",
        raised="{subject} raised: {summary}",
        crashed="running {subject} failed: {reason}",
        frames=lambda remote_traceback: frames_after(remote_traceback, __file__))


def run_student(student, kind: str, stages: int, microbatches: int, seed: int, timeout: float,
                ops=None) -> StageRun:
    """The student's stage on ``stages`` real ranks with ``kind``'s op lists (or ``ops``); never raises."""
    warm_autograd()
    ops = ops or course_ops(kind, stages, microbatches)
    where = f"{student.name} on {stages} stages, {microbatches} micro-batches, {kind} op lists"
    run = run_on_ranks(_run_stage, stages, student, ops, seed, microbatches, text=_failure_text(where),
                       timeout=timeout)
    return StageRun(kind, stages, microbatches, seed, ops, run.per_rank, run.error, run.hung)


def gradient_problems(run: StageRun) -> list[str]:
    """Each stage's gradients and the last stage's loss against single-process training of the batch."""
    if run.error:
        return [run.error]
    loss, grads = reference(run.seed, run.microbatches)
    where = f"{run.stages} stages, {run.microbatches} micro-batches, {run.kind} op lists"
    problems = []
    got_loss = run.outcomes[-1]["loss"]
    if got_loss is None or abs(got_loss - loss) > 1e-5 * max(1.0, abs(loss)):
        problems.append(f"{where}: the last stage returned loss {got_loss}, the whole batch's loss is "
                        f"{loss:.6f} (the mean of the micro-batch losses)")
    got = [g for outcome in run.outcomes for g in outcome["grads"]]
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
    counts = [len(outcome["grads"]) for outcome in run.outcomes]
    return [sum(counts[:s + 1]) for s in range(len(counts))]


def expected_sends(ops, stage: int, stages: int) -> list[int]:
    """The peers ``stage`` sends to, in order: the next one after a forward, the previous after a backward."""
    peers = []
    for phase, _ in ops:
        peer = stage + 1 if phase == "F" else stage - 1
        if 0 <= peer < stages:
            peers.append(peer)
    return peers


def traffic_problems(run: StageRun) -> list[str]:
    """Per stage: sends in op order to the right neighbour, one activation or gradient each; as many recvs."""
    if run.error:
        return [run.error]
    problems, message_bytes = [], MICRO_BATCH * STACK_WIDTH * 4
    for stage, outcome in enumerate(run.outcomes):
        where = f"{run.stages} stages, {run.kind} op lists, stage {stage}"
        events = outcome["events"]
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


def run_mismatched(student, seed: int, timeout: float) -> StageRun:
    """The student's stages given op lists that disagree (stage 0 waits on micro-batch 0, stage 1 on 1)."""
    return run_student(student, "mismatched", 2, 2, seed, timeout, ops=MISMATCHED_OPS)


def mismatch_problems(completed: StageRun, mismatched: StageRun) -> list[str]:
    """A step with matching op lists runs, and one with lists that disagree stops (raises, or hangs)."""
    if completed.error:
        return [f"first, a step with matching op lists must run: {completed.error}"]
    if mismatched.error is None:
        return [f"with mismatched op lists {MISMATCHED_OPS} (stage 0 waits for micro-batch 0's gradient "
                "while stage 1 waits for micro-batch 1's activation) your stages still finished: each stage "
                "must run exactly its own op list, in its order"]
    return []


def _visible(run_stage, kind: str, stages: int = 3, microbatches: int = 4) -> StageRun:
    student = as_student_function(run_stage, "run_stage", refusal=REFUSAL)
    return run_student(student, kind, stages, microbatches, seed=5, timeout=VISIBLE_TIMEOUT_S)


def check_run_stage_gradients(run_stage, kind: str = "1f1b", stages: int = 3, microbatches: int = 4) -> None:
    """Visible test: a step with ``kind``'s op lists gives single-process gradients and loss."""
    run = _visible(run_stage, kind, stages, microbatches)
    fail_with(gradient_problems(run), f"run_stage with {kind} op lists does not train like one process")
    print(f"run_stage: {kind} op lists on {stages} ranks, {microbatches} micro-batches: loss and every "
          "gradient equal single-process training")


def check_run_stage_traffic(run_stage, stages: int = 3, microbatches: int = 4) -> None:
    """Visible test: exactly one message per op and neighbour, sent in op order."""
    run = _visible(run_stage, "1f1b", stages, microbatches)
    fail_with(traffic_problems(run), "run_stage's messages are not the pipeline's")
    print(f"run_stage: on {stages} ranks each stage sent one {MICRO_BATCH}x{STACK_WIDTH} tensor per op to "
          "its neighbour, in op order, and nothing else")


def check_run_stage_mismatch(run_stage, timeout: float = 3) -> None:
    """Visible test: op lists that disagree stop with an error (here after a short timeout)."""
    student = as_student_function(run_stage, "run_stage", refusal=REFUSAL)
    completed = run_student(student, "gpipe", 2, 2, seed=5, timeout=VISIBLE_TIMEOUT_S)
    mismatched = run_mismatched(student, 5, timeout) if completed.error is None else completed
    fail_with(mismatch_problems(completed, mismatched), "run_stage does not follow its op list")
    print("run_stage: stages given op lists that disagree were stopped, not silently finished:\n  "
          + "\n  ".join(mismatched.error.splitlines()[:4]))
