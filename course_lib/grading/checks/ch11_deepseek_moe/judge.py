"""Judging chapter 11's DeepSeek-V3 MoE part: the one-process layer every rank's result must equal, and the
traffic allowed (the routed rows only, none for the shared expert, none dropped).

The reference is examples/one_process_moe.py's dense MoE with DeepSeek-V3's gates (sigmoid affinities, the
bias only choosing), plus the shared expert, in float64, on the data the ranks rebuilt; nothing here
dispatches. The shared expert's gradient on a rank is that of the rank's own tokens: the layer sums nothing
across ranks (summing replicas' gradients is data parallelism's job, not the layer's).
"""

from __future__ import annotations

import torch

from course_lib.examples.one_process_moe import biased_top_k, dense_moe, sigmoid_gate_matrix
from course_lib.grading.attempt.judge_runner import cases_of
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch11_deepseek_moe.ranks import DeepSeekCase, case_data
from course_lib.grading.checks.ch11_expert_parallel.judge import (
    COUNT_BYTES,
    _calls_problem,
    _compare,
    _matrix,
    _row_bytes,
    dispatch_mismatch,
    judging,
    one_thread,
)


def reference(case: DeepSeekCase, seed: int) -> dict:
    """Output and gradients of tokens, logits, every routed expert and (per rank) the shared expert."""
    with one_thread():
        return _reference(case, seed)


def _chosen(case: DeepSeekCase, data) -> torch.Tensor:
    """Each token's experts, chosen as the ranks choose them, in the case's dtype (a float64 sigmoid could
    order two near-equal scores the other way)."""
    return biased_top_k(data.logits, data.bias, case.k)


def _reference(case: DeepSeekCase, seed: int) -> dict:
    data = case_data(case, seed)
    tokens = data.tokens.double().requires_grad_(True)
    logits = data.logits.double().requires_grad_(True)
    experts, shared = [expert.double() for expert in data.experts], data.shared.double()
    upstream = data.upstream.double()
    out = dense_moe(tokens, sigmoid_gate_matrix(logits, _chosen(case, data)), experts) + shared(tokens)
    (out * upstream).sum().backward()
    names, parameters = zip(*shared.named_parameters(), strict=True)
    shared_grads = []
    for rank in range(case.world_size):
        rows = data.rows(rank)
        mine = (shared(tokens.detach()[rows]) * upstream[rows]).sum()
        shared_grads.append(dict(zip(names, torch.autograd.grad(mine, parameters), strict=True)))
    return {"data": data, "out": out.detach(), "tokens_grad": tokens.grad, "logits_grad": logits.grad,
            "expert_grads": [{n: p.grad for n, p in expert.named_parameters()} for expert in experts],
            "shared_grads": shared_grads}


@judging
def value_problems(run: RankRun) -> list[str]:
    """Every rank's output against its rows of the one-process layer's."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = reference(case, run.seed + 101 * index)
        for rank, outcome in enumerate(outcomes):
            problems += _compare(f"rank {rank}, {case.describe()}", "output", outcome.out,
                                 expected["out"][expected["data"].rows(rank)], case.dtype)
    return problems


@judging
def gradient_problems(run: RankRun) -> list[str]:
    """Gradients of every rank's tokens and router logits, of the routed experts it holds and of its copy of
    the shared expert (from its own tokens)."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = reference(case, run.seed + 101 * index)
        for rank, outcome in enumerate(outcomes):
            where, rows = f"rank {rank}, {case.describe()}", expected["data"].rows(rank)
            if outcome.backward is None:
                problems.append(f"{where}: the output does not require a gradient (did the graph reach the "
                                "tokens, the router logits and the experts?)")
                continue
            for what in ("tokens_grad", "logits_grad"):
                problems += _compare(where, what.replace("_", "."), getattr(outcome, what),
                                     expected[what][rows], case.dtype)
            for i, grads in enumerate(outcome.expert_grads):
                expert = rank * case.experts_per_rank + i
                for name, wanted in expected["expert_grads"][expert].items():
                    problems += _compare(where, f"routed expert {expert}'s {name}.grad", grads.get(name),
                                         wanted, case.dtype)
            for name, wanted in expected["shared_grads"][rank].items():
                problems += _compare(where, f"the shared expert's {name}.grad (this rank's tokens only)",
                                     outcome.shared_grads.get(name), wanted, case.dtype)
    return problems


def routed_rows(case: DeepSeekCase, seed: int) -> tuple[list, list]:
    """[source][destination] (token, routed expert) pairs and distinct tokens the dispatch moves: the most
    and the fewest rows it may send (every pair: the layer is dropless)."""
    data = case_data(case, seed)
    chosen = torch.zeros_like(data.logits, dtype=torch.bool).scatter(1, _chosen(case, data), True)
    pairs, tokens = [], []
    for rank in range(case.world_size):
        routed = chosen[data.rows(rank)].view(-1, case.world_size, case.experts_per_rank)
        pairs.append(routed.sum((0, 2)).tolist())
        tokens.append(routed.any(-1).sum(0).tolist())
    return pairs, tokens


def _dispatch_problem(case: DeepSeekCase, seed: int, where: str, sent: list) -> list[str]:
    pairs, tokens = routed_rows(case, seed)
    return dispatch_mismatch(pairs, tokens, _row_bytes(case), sent, where,
                             "every (token, routed expert) pair reaches its expert, at most one row per "
                             "pair, at least one per token; the shared expert's rows never travel")


def _pattern_problems(case: DeepSeekCase, seed: int, outcomes: tuple) -> list[str]:
    where, n = case.describe(), case.world_size
    wrong_calls = _calls_problem(where, outcomes)
    if wrong_calls:
        return [wrong_calls]
    counts, dispatch, combine = ([outcome.forward[i][2] for outcome in outcomes] for i in range(3))
    backward = [[outcome.backward[i][2] for outcome in outcomes] for i in range(2)]
    problems = _dispatch_problem(case, seed, where, dispatch)     # first: it says the most
    problems += [f"rank {r}, {where}: the first all-to-all (the counts) sent {counts[r]} B to the ranks; "
                 f"counts take at most {COUNT_BYTES} B per routed expert held there (the shared expert "
                 "needs none)" for r in range(n)
                 if any(b > COUNT_BYTES * case.experts_per_rank for b in counts[r])]
    back = [[dispatch[j][r] for j in range(n)] for r in range(n)]
    if combine != back or backward != [dispatch, combine]:
        problems.append(f"{where}: the results must come back the way their rows went, and the backward "
                        "reverse both:\n" + _matrix("    recorded, results", combine) + "\n"
                        + _matrix("    expected, results", back))
    return problems


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """Forward: one all-to-all of counts, one of the routed rows (every pair: dropless), one of the results;
    backward: the last two reversed; nothing for the shared expert."""
    problems = []
    for index, case, outcomes in cases_of(run):
        if outcomes and outcomes[0].backward is None:
            problems.append(f"{case.describe()}: the output does not require a gradient, so the backward's "
                            "traffic cannot be judged")
            continue
        problems += _pattern_problems(case, run.seed + 101 * index, outcomes)
    return problems

