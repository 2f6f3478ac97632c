"""Running chapter 11's exercise on real ranks: cases rebuilt from a seed, the student's dispatch, traffic.

Every process rebuilds the same tokens, router logits, upstream gradient and experts from the case and the
seed; rank r takes its own tokens and its experts (r·E/N to (r+1)·E/N - 1). Ranks return plain data only
(tensors, numbers, lists); the judge (ch11_expert_parallel_judge) compares it with the one-process MoE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.models import FeedForward
from course_lib.real import record_traffic

DTYPES = {"float32": torch.float32, "float64": torch.float64}
ROUTINGS = ("random", "one_takes_all", "idle_expert")
SKEW = 8.0   # added to (or taken from) one expert's logits: far beyond a standard normal's spread
ROUTER_ONLY = "router"   # run_cases(backward=ROUTER_ONLY): after the forward, the router's gradient only


@dataclass(frozen=True)
class MoECase:
    """Tokens per rank (one entry per rank), experts per rank, top-k and how the router leans.

    routing: "random" (standard normal logits), "one_takes_all" (one expert is every token's first
    choice), "idle_expert" (one expert is nobody's choice). capacity_factor None: nothing is dropped.
    """

    tokens: tuple
    experts_per_rank: int
    k: int
    hidden: int = 8
    ffn: int = 16
    routing: str = "random"
    dtype: str = "float32"
    capacity_factor: float | None = None

    @property
    def world_size(self) -> int:
        return len(self.tokens)

    @property
    def experts(self) -> int:
        return self.world_size * self.experts_per_rank

    def describe(self) -> str:
        capacity = "" if self.capacity_factor is None else f", capacity_factor={self.capacity_factor:g}"
        return (f"{self.world_size} rank(s) with {list(self.tokens)} tokens, {self.experts} experts "
                f"({self.experts_per_rank} per rank), k={self.k}, hidden {self.hidden}, {self.routing} "
                f"routing, {self.dtype}{capacity}")


@dataclass
class CaseData:
    """Everything of a case, for all ranks: what each rank slices its share from."""

    tokens: torch.Tensor           # (total tokens, hidden)
    logits: torch.Tensor           # (total tokens, experts)
    upstream: torch.Tensor         # dL/d(output), (total tokens, hidden)
    experts: list                  # every expert, as identical FeedForward modules on every process
    offsets: list                  # first token of each rank, and the total at the end

    def rows(self, rank: int) -> slice:
        return slice(self.offsets[rank], self.offsets[rank + 1])


def _filled(module: nn.Module, generator: torch.Generator, dtype) -> nn.Module:
    module = module.to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return module


def case_data(case: MoECase, seed: int) -> CaseData:
    """The case's data, identical on every process that passes the same seed."""
    generator = torch.Generator().manual_seed(seed)
    dtype, total = DTYPES[case.dtype], sum(case.tokens)
    tokens = torch.randn(total, case.hidden, generator=generator, dtype=torch.float64)
    logits = torch.randn(total, case.experts, generator=generator, dtype=torch.float64)
    leaning = seed % case.experts
    if case.routing == "one_takes_all":
        logits[:, leaning] += SKEW
    elif case.routing == "idle_expert":
        logits[:, leaning] -= SKEW
    upstream = torch.randn(total, case.hidden, generator=generator, dtype=torch.float64)
    experts = [_filled(FeedForward(case.hidden, case.ffn), generator, dtype) for _ in range(case.experts)]
    offsets = [sum(case.tokens[:r]) for r in range(case.world_size + 1)]
    return CaseData(tokens.to(dtype), logits.to(dtype), upstream.to(dtype), experts, offsets)


def _events(log) -> list:
    return [(e.op, int(e.nbytes), None if e.sent_to is None else list(e.sent_to)) for e in log.events]


@dataclass(frozen=True)
class MoEOutcome:
    """One rank's MoE forward in one case: its output (or what it returned instead, as text) and its
    forward's calls (op, nbytes, split sizes); with a backward, its calls and the gradients of its tokens,
    its router logits and its experts' parameters (the router's alone for ROUTER_ONLY)."""

    out: object
    forward: list
    backward: list | None = None
    tokens_grad: object = None
    logits_grad: object = None
    expert_grads: list | None = None


def _run_case(fn, rank: int, case: MoECase, seed: int, backward: bool) -> dict:
    data = case_data(case, seed)
    mine = data.rows(rank)
    tokens = data.tokens[mine].clone().requires_grad_(True)
    logits = data.logits[mine].clone().requires_grad_(True)
    per_rank = case.experts_per_rank
    local = nn.ModuleList(data.experts[rank * per_rank:(rank + 1) * per_rank])
    options = {} if case.capacity_factor is None else {"capacity_factor": case.capacity_factor}
    with record_traffic() as forward:
        out = fn(tokens, logits, local, case.k, **options)
    outcome = {"out": out.detach().clone() if isinstance(out, torch.Tensor) else repr(out)[:200],
               "forward": _events(forward)}
    if backward == ROUTER_ONLY and isinstance(out, torch.Tensor):
        outcome.update(logits_grad=_router_grad(out, data.upstream[mine], logits))
    elif backward and isinstance(out, torch.Tensor):
        with record_traffic() as backward_log:
            (out * data.upstream[mine]).sum().backward()
        outcome.update(backward=_events(backward_log), tokens_grad=_grad(tokens), logits_grad=_grad(logits),
                       expert_grads=[{name: _grad(p) for name, p in expert.named_parameters()}
                                     for expert in local])
    return outcome


def _router_grad(out: torch.Tensor, upstream: torch.Tensor, logits: torch.Tensor):
    """The router logits' gradient alone: autograd runs only the part of the graph that reaches them (the
    gates), never the all-to-alls' backward; None when the output does not depend on them."""
    if not out.requires_grad:
        return None
    grad, = torch.autograd.grad((out * upstream).sum(), logits, allow_unused=True)
    return None if grad is None else grad.detach().clone()


def _grad(tensor: torch.Tensor):
    return None if tensor.grad is None else tensor.grad.detach().clone()


def _run_cases(rank, world_size, student, cases, seed, backward):
    fn = student.resolve()
    return [_run_case(fn, rank, case, seed + 101 * index, backward) for index, case in enumerate(cases)]


def run_cases(student, cases, seed: int, timeout: float, backward: bool | str) -> RankRun:
    """The cases (one world size) on real ranks; a failure or a hang lands in the RankRun, never raised.
    ``backward``: True for the whole backward (traffic and every gradient), ROUTER_ONLY for the router
    logits' gradient alone (no communication), False for the forward only."""
    cases = list(cases)
    world_size = cases[0].world_size
    text = FailureText(
        f"expert_parallel_forward ({cases[0].describe()})",
        hung=("{subject} did not finish on {world_size} ranks within {timeout:g} s, so the test stopped it: "
              "a deadlock. Every rank must make the same all_to_all_single calls, each expecting exactly "
              "the rows the others send it (exchange the counts first)."),
        died=("a rank running {subject} was killed without a Python error ({summary}). gloo aborts a rank "
              "that receives more bytes than its output split sizes leave room for (\"Received data size "
              "doesn't match expected size\"): does every rank know how many rows each other rank sends "
              "it? Exchange the counts first."),
        raised="{subject} raised on {world_size} ranks: {summary}",
        frames=lambda remote: frames_after(remote, __file__))
    return run_answer(_run_cases, world_size, student, cases, seed, backward, record=MoEOutcome, text=text,
                      timeout=timeout, cases=cases, seed=seed)
