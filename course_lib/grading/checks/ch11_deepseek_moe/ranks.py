"""Running chapter 11's DeepSeek-V3 MoE part on real ranks: cases rebuilt from a seed, the student's layer,
its traffic, the rows each routed expert ran on, and its gradients.

Every process rebuilds the same tokens, router logits, expert-selection bias, upstream gradient, routed
experts and shared expert from the case and the seed; rank r takes its own tokens, its routed experts
(r·E/N to (r+1)·E/N - 1) and a copy of the shared expert; consecutive ranks form the case's nodes. A
forward pre-hook on each routed expert records the rows it is called on, so the judge sees which tokens
reached which node. Ranks return plain data only; the judge (judge.py) compares it with the one-process
MoE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, RankRun, frames_after
from course_lib.grading.checks.ch11_expert_parallel.ranks import DTYPES, _events, _filled, _grad
from course_lib.models import FeedForward
from course_lib.real import record_traffic

ROUTINGS = ("random", "bias_takes_all")
BIAS_SPREAD = 0.1    # the bias's standard deviation: enough to change many tokens' top k of the sigmoids
TAKES_ALL = 2.0      # one expert's bias in "bias_takes_all": above any other s + b, as s lies in (0, 1)


@dataclass(frozen=True)
class DeepSeekCase:
    """Tokens per rank (one entry per rank), routed experts per rank, top-k, ranks per node, the most
    nodes a token may use, and how the bias leans.

    routing: "random" (standard normal logits, a small random bias); "bias_takes_all" (the same, and one
    expert's bias so large that it is every token's choice: a layer that drops at a capacity loses tokens).
    """

    tokens: tuple
    experts_per_rank: int
    k: int
    ranks_per_node: int = 1
    max_nodes: int = 1
    hidden: int = 32
    ffn: int = 16
    routing: str = "random"
    dtype: str = "float32"

    @property
    def world_size(self) -> int:
        return len(self.tokens)

    @property
    def experts(self) -> int:
        return self.world_size * self.experts_per_rank

    @property
    def nodes(self) -> int:
        return self.world_size // self.ranks_per_node

    @property
    def experts_per_node(self) -> int:
        return self.experts_per_rank * self.ranks_per_node

    def node_of_rank(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def describe(self) -> str:
        return (f"{self.world_size} rank(s) with {list(self.tokens)} tokens, {self.experts} routed experts "
                f"({self.experts_per_rank} per rank) and a shared one, {self.nodes} node(s) of "
                f"{self.ranks_per_node} rank(s), k={self.k}, at most {self.max_nodes} node(s) a token, "
                f"hidden {self.hidden}, {self.routing} routing, {self.dtype}")


@dataclass
class DeepSeekData:
    """Everything of a case, for all ranks: what each rank slices its share from."""

    tokens: torch.Tensor           # (total tokens, hidden)
    logits: torch.Tensor           # (total tokens, experts)
    bias: torch.Tensor             # (experts,): the expert-selection bias, no gradient
    upstream: torch.Tensor         # dL/d(output), (total tokens, hidden)
    experts: list                  # every routed expert, identical FeedForward modules on every process
    shared: nn.Module              # the shared expert, one copy on every rank
    offsets: list                  # first token of each rank, and the total at the end

    def rows(self, rank: int) -> slice:
        return slice(self.offsets[rank], self.offsets[rank + 1])


def case_data(case: DeepSeekCase, seed: int) -> DeepSeekData:
    """The case's data, identical on every process that passes the same seed."""
    generator = torch.Generator().manual_seed(seed)
    dtype, total = DTYPES[case.dtype], sum(case.tokens)
    tokens = torch.randn(total, case.hidden, generator=generator, dtype=torch.float64)
    logits = torch.randn(total, case.experts, generator=generator, dtype=torch.float64)
    bias = BIAS_SPREAD * torch.randn(case.experts, generator=generator, dtype=torch.float64)
    if case.routing == "bias_takes_all":
        bias[seed % case.experts] = TAKES_ALL
    upstream = torch.randn(total, case.hidden, generator=generator, dtype=torch.float64)
    experts = [_filled(FeedForward(case.hidden, case.ffn), generator, dtype) for _ in range(case.experts)]
    shared = _filled(FeedForward(case.hidden, case.ffn), generator, dtype)
    offsets = [sum(case.tokens[:r]) for r in range(case.world_size + 1)]
    return DeepSeekData(tokens.to(dtype), logits.to(dtype), bias.to(dtype), upstream.to(dtype), experts,
                        shared, offsets)


@dataclass(frozen=True)
class DeepSeekOutcome:
    """One rank's layer in one case: its output (or what it returned instead, as text) and its forward's
    calls (op, nbytes, split sizes) and the rows each of its routed experts was called on (a tensor, or
    None when it never ran); with a backward, its calls and the gradients of its tokens, its router logits,
    its routed experts' parameters and its copy of the shared expert's."""

    out: object
    forward: list
    expert_inputs: list | None = None
    backward: list | None = None
    tokens_grad: object = None
    logits_grad: object = None
    expert_grads: list | None = None
    shared_grads: dict | None = None


def _parameter_grads(module: nn.Module) -> dict:
    return {name: _grad(parameter) for name, parameter in module.named_parameters()}


def _recording_inputs(experts: nn.ModuleList) -> list:
    """One list per expert, filled with the rows each call of it receives (by a forward pre-hook)."""
    inputs = [[] for _ in experts]
    for expert, seen in zip(experts, inputs, strict=True):
        expert.register_forward_pre_hook(lambda module, args, seen=seen: seen.append(
            args[0].detach().clone() if args and isinstance(args[0], torch.Tensor) else None))
    return inputs


def _stacked(seen: list):
    rows = [row for row in seen if row is not None and row.dim() == 2]
    return torch.cat(rows) if rows else None


def _run_case(fn, rank: int, case: DeepSeekCase, seed: int, backward: bool) -> dict:
    data = case_data(case, seed)
    mine = data.rows(rank)
    tokens = data.tokens[mine].clone().requires_grad_(True)
    logits = data.logits[mine].clone().requires_grad_(True)
    per_rank = case.experts_per_rank
    local = nn.ModuleList(data.experts[rank * per_rank:(rank + 1) * per_rank])
    inputs = _recording_inputs(local)
    with record_traffic() as forward:
        out = fn(tokens, logits, data.bias.clone(), local, data.shared, case.k, case.ranks_per_node,
                 case.max_nodes)
    outcome = {"out": out.detach().clone() if isinstance(out, torch.Tensor) else repr(out)[:200],
               "forward": _events(forward), "expert_inputs": [_stacked(seen) for seen in inputs]}
    if backward and isinstance(out, torch.Tensor) and out.requires_grad:
        with record_traffic() as backward_log:
            (out * data.upstream[mine]).sum().backward()
        outcome.update(backward=_events(backward_log), tokens_grad=_grad(tokens), logits_grad=_grad(logits),
                       expert_grads=[_parameter_grads(expert) for expert in local],
                       shared_grads=_parameter_grads(data.shared))
    return outcome


def _run_cases(rank, world_size, student, cases, seed, backward):
    fn = student.resolve()
    return [_run_case(fn, rank, case, seed + 101 * index, backward) for index, case in enumerate(cases)]


def run_cases(student, cases, seed: int, timeout: float, backward: bool) -> RankRun:
    """The cases (one world size) on real ranks; a failure or a hang lands in the RankRun, never raised.
    ``backward``: also the backward, its traffic and every gradient."""
    cases = list(cases)
    world_size = cases[0].world_size
    text = FailureText(
        f"deepseek_moe_forward ({cases[0].describe()})",
        hung=("{subject} did not finish on {world_size} ranks within {timeout:g} s, so the test stopped it: "
              "a deadlock. Every rank must make the same all_to_all_single calls, each expecting exactly "
              "the rows the others send it (exchange the counts first)."),
        died=("a rank running {subject} was killed without a Python error ({summary}). gloo aborts a rank "
              "that receives more bytes than its output split sizes leave room for: does every rank know "
              "how many rows each other rank sends it? Exchange the counts first."),
        raised="{subject} raised on {world_size} ranks: {summary}",
        frames=lambda remote: frames_after(remote, __file__))
    return run_answer(_run_cases, world_size, student, cases, seed, backward, record=DeepSeekOutcome,
                      text=text, timeout=timeout, cases=cases, seed=seed)
