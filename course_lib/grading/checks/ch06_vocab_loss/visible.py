"""Checks of chapter 06's vocabulary-parallel cross-entropy: each rank holds a vocabulary slice of the logits.

Ranks run the student's loss on their slice of logits rebuilt from a seed, record the traffic of its forward
and backward, and return the loss and their slice's gradient; the judging side compares them with
F.cross_entropy on the whole logits (in float64), and checks that the bytes sent do not grow with the
vocabulary (no logits gathered). No vocabulary-parallel loss is implemented here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.dist import record_traffic, run_ranks
from course_lib.grading.attempt.rank_attempt import (
    FailureText,
    RankRun,
    fail_with,
    frames_after,
    run_on_ranks,
)
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function

NAME = "vocab_parallel_cross_entropy"
# DTensor (parallelize_module, loss_parallel) and the functional collectives it runs on place collectives
# for you, and their traffic starts in C++ where the traffic recorder does not see it.
TP_MODULES = ("torch.distributed.tensor", "torch.distributed._functional_collectives")
REFUSAL = Refusal(NAME, modules=TP_MODULES,
                  why="the exercise is to compute the loss from the slices yourself, as loss_parallel does")
DTYPES = {"float32": torch.float32, "float64": torch.float64}
VISIBLE_WORLD_SIZES = (2, 3)
VISIBLE_TIMEOUT_S = 20
VISIBLE_SEED = 2024


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


VISIBLE_CASES = (LossCase(6, 11), LossCase(6, 29), LossCase(5, 13, offset=120.0), LossCase(4, 7, "float64"))


def case_tensors(case: LossCase, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole logits (tokens x vocab, in the case's dtype) and the target class of every token."""
    generator = torch.Generator().manual_seed(seed)
    logits = case.offset + case.scale * torch.randn(case.tokens, case.vocab, generator=generator,
                                                    dtype=torch.float64)
    target = torch.randint(case.vocab, (case.tokens,), generator=generator)
    return logits.to(DTYPES[case.dtype]), target


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
    return run_on_ranks(_run_losses, world_size, student, cases, seed, text=text, timeout=timeout,
                        cases=cases, seed=seed)


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


def value_problems(run: RankRun) -> list[str]:
    """Every rank's loss equals F.cross_entropy on the whole logits."""
    if run.error:
        return [run.error]
    problems = []
    for index, (case, outcomes) in enumerate(zip(run.cases, run.outcomes, strict=True)):
        want, _ = reference(case, run.seed + index)
        for rank, outcome in enumerate(outcomes):
            got = outcome["loss"]
            if not abs(got - want) <= _tolerance(case) * max(1.0, abs(want)):
                problems.append(f"rank {rank}, {case.describe(run.world_size)}: loss {got:.6g}, "
                                f"F.cross_entropy on the whole logits gives {want:.6g}")
    return problems


def gradient_problems(run: RankRun) -> list[str]:
    """Every rank's gradient is its slice of the gradient of F.cross_entropy on the whole logits."""
    if run.error:
        return [run.error]
    problems = []
    for index, (case, outcomes) in enumerate(zip(run.cases, run.outcomes, strict=True)):
        _, full = reference(case, run.seed + index)
        slices = case.slices(run.world_size)
        for rank, ((start, stop), outcome) in enumerate(zip(slices, outcomes, strict=True)):
            want, got = full[:, start:stop], outcome["grad"]
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


def _sent(outcome: dict) -> int:
    return sum(nbytes for _, nbytes in outcome["forward"] + outcome["backward"])


def _calls(events) -> str:
    return ", ".join(f"{op} of {nbytes} B" for op, nbytes in events) or "nothing"


def traffic_problems(run: RankRun, pair: tuple[int, int] = (0, 1)) -> list[str]:
    """Only all-reduces, and the same bytes for the two cases in ``pair`` (same tokens, vocabularies
    of different sizes): per-token values cross the ranks, never the logits. Draws both recordings."""
    if run.error:
        return [run.error]
    small, large = (run.cases[i] for i in pair)
    problems = []
    for rank, per_case in enumerate(zip(*run.outcomes, strict=True)):
        a, b = per_case[pair[0]], per_case[pair[1]]
        others = sorted({op for outcome in (a, b) for op, _ in outcome["forward"] + outcome["backward"]
                         if op != "all_reduce"})
        if others or _sent(a) != _sent(b):
            why = (f"it called {', '.join(others)}: the logits stay where they are, only per-token values "
                   "may cross the ranks (all-reduces)" if others else
                   "the bytes grow with the vocabulary: something the size of the logits crossed the ranks")
            problems.append(
                f"rank {rank} of {run.world_size}, {small.tokens} tokens: {why}\n"
                f"    vocabulary {small.vocab}: forward {_calls(a['forward'])}; "
                f"backward {_calls(a['backward'])}\n"
                f"    vocabulary {large.vocab}: forward {_calls(b['forward'])}; "
                f"backward {_calls(b['backward'])}\n"
                f"    expected: all-reduces of per-token values only, the same for both vocabularies (e.g. "
                f"loss_parallel's three of {small.tokens} values each in forward, nothing in backward)")
    return problems


def _visible(candidate, judge, what: str) -> None:
    student = as_student_function(candidate, NAME, refusal=REFUSAL)
    problems = []
    for world_size in VISIBLE_WORLD_SIZES:
        run = run_losses(student, world_size, VISIBLE_CASES, VISIBLE_SEED, VISIBLE_TIMEOUT_S)
        problems += judge(run)
        if run.error:
            break
    fail_with(problems, what, limit=3)


def check_vocab_parallel_loss_values(vocab_parallel_cross_entropy) -> None:
    """Visible test: the loss on 2 and 3 ranks equals F.cross_entropy on the whole logits, large ones too."""
    _visible(vocab_parallel_cross_entropy, value_problems,
             f"{NAME} is not the cross-entropy of the whole logits")
    print(f"{NAME}: the loss equals F.cross_entropy on the whole logits on {VISIBLE_WORLD_SIZES} ranks, "
          "vocabularies that do not divide and logits past exp's float32 range")


def check_vocab_parallel_loss_gradients(vocab_parallel_cross_entropy) -> None:
    """Visible test: each rank's gradient is its slice of F.cross_entropy's gradient."""
    _visible(vocab_parallel_cross_entropy, gradient_problems, f"{NAME}'s gradient is not F.cross_entropy's")
    print(f"{NAME}: every rank's gradient is its slice of F.cross_entropy's, on {VISIBLE_WORLD_SIZES} ranks")


def check_vocab_parallel_loss_traffic(vocab_parallel_cross_entropy) -> None:
    """Visible test: all-reduces only, the same bytes for vocabularies 11 and 29 (no logits gathered)."""
    _visible(vocab_parallel_cross_entropy, traffic_problems, f"{NAME} moves more than per-token values")
    print(f"{NAME}: only all-reduces of per-token values, the same bytes for vocabularies "
          f"{VISIBLE_CASES[0].vocab} and {VISIBLE_CASES[1].vocab}")


def _yours_and_loss_parallel(rank, world_size, student, case, seed):
    """Rank side: the student's loss with its recorded calls, then DTensor's loss_parallel with its calls
    (counted by DTensor's CommDebugMode: its collectives start in C++, out of the recorder's sight)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel

    yours = _run_losses(rank, world_size, student, [case], seed)[0]
    logits, target = case_tensors(case, seed)
    sharded = distribute_tensor(logits, init_device_mesh("cpu", (world_size,)), [Shard(1)]).requires_grad_()
    with CommDebugMode() as comm, loss_parallel():
        loss = nn.functional.cross_entropy(sharded, target)
        loss.backward()
    counts = {str(op).rsplit(".", 1)[-1]: count for op, count in comm.get_comm_counts().items()}
    mine = [op for op, _ in yours["forward"] + yours["backward"]]
    return {"yours": (yours["loss"], {op: mine.count(op) for op in dict.fromkeys(mine)}),
            "loss_parallel": (loss.to_local().item(), counts)}


def compare_with_loss_parallel(vocab_parallel_cross_entropy, world_size: int = 2,
                               case: LossCase = VISIBLE_CASES[0]) -> dict:
    """Your loss and PyTorch's loss_parallel on the same logits split over ``world_size`` ranks:
    {"yours" | "loss_parallel": (rank 0's loss, {collective: calls in forward and backward})}."""
    # Imported once here, not once per forked rank: DTensor's parallel package pulls in torch._dynamo.
    import torch._dynamo  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    student = as_student_function(vocab_parallel_cross_entropy, NAME, refusal=REFUSAL)
    return run_ranks(_yours_and_loss_parallel, world_size, student, case, VISIBLE_SEED, timeout=60,
                     plain_results=True)[0]
