"""Judging chapter 11's DeepSeek-V3 MoE part: the one-process layer every rank's result must equal, the node
limit (the tokens each routed expert ran on) and the rows that cross nodes (one per (token, node)).

The reference is examples/one_process_moe.py's dense MoE with DeepSeek-V3's gates (sigmoid affinities, the
bias only choosing) over the experts of each token's best nodes (node-limited routing, arXiv:2412.19437,
section 2.1.2), plus the shared expert, in float64, on the data the ranks rebuilt; nothing here
dispatches. The shared expert's gradient on a rank is that of the rank's own tokens: the layer sums nothing
across ranks (summing replicas' gradients is data parallelism's job, not the layer's).
"""

from __future__ import annotations

import torch

from course_lib.examples.one_process_moe import dense_moe, sigmoid_gate_matrix
from course_lib.grading.attempt.judge_runner import cases_of
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch11_deepseek_moe.ranks import DeepSeekCase, case_data
from course_lib.grading.checks.ch11_expert_parallel.judge import (
    COUNT_BYTES,
    _compare,
    _matrix,
    _row_bytes,
    judging,
    one_thread,
)

BOOKKEEPING_BYTES = 8   # per expert of the node, with each row that crosses: which experts, their gates


def reference(case: DeepSeekCase, seed: int) -> dict:
    """Output and gradients of tokens, logits, every routed expert and (per rank) the shared expert."""
    with one_thread():
        return _reference(case, seed)


def node_limited_top_k(logits: torch.Tensor, bias: torch.Tensor, k: int, nodes: int,
                       max_nodes: int) -> torch.Tensor:
    """(tokens, k): each token's experts, the k largest sigmoid(logits) + bias among the experts of its
    ``max_nodes`` nodes whose k/max_nodes largest sigmoid(logits) + bias sum highest (section 2.1.2)."""
    affinity = torch.sigmoid(logits) + bias
    per_node = affinity.view(len(affinity), nodes, -1)
    best = per_node.topk(k // max_nodes, dim=-1).values.sum(-1).topk(max_nodes, dim=-1).indices
    outside = torch.ones(len(affinity), nodes, dtype=torch.bool).scatter(1, best, False)
    return per_node.masked_fill(outside[:, :, None], float("-inf")).flatten(1).topk(k, dim=-1).indices


def _chosen(case: DeepSeekCase, data) -> torch.Tensor:
    """Each token's experts, chosen as the ranks choose them, in the case's dtype (a float64 sigmoid could
    order two near-equal scores the other way)."""
    return node_limited_top_k(data.logits, data.bias, case.k, case.nodes, case.max_nodes)


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


def reached_nodes(case: DeepSeekCase, data, outcomes: tuple) -> tuple[list, list[str]]:
    """For every token, the nodes whose experts ran on it, read from the rows each expert was called on
    (each must be one of the tokens, unchanged); and what could not be read."""
    index = {tuple(row.tolist()): t for t, row in enumerate(data.tokens)}
    nodes, problems = [set() for _ in range(len(data.tokens))], []
    for rank, outcome in enumerate(outcomes):
        for i, rows in enumerate(outcome.expert_inputs or []):
            expert = rank * case.experts_per_rank + i
            for row in [] if rows is None else rows:
                token = index.get(tuple(row.tolist())) if row.shape == data.tokens[0].shape else None
                if token is None:
                    problems.append(f"rank {rank}, {case.describe()}: routed expert {expert} was called on a "
                                    "row that is none of the tokens (each expert must run on its tokens' "
                                    "rows, unchanged)")
                    break
                nodes[token].add(case.node_of_rank(rank))
    return nodes, problems


@judging
def node_limit_problems(run: RankRun) -> list[str]:
    """Every token reached the routed experts of at least one node and at most the case's max_nodes."""
    problems = []
    for index, case, outcomes in cases_of(run):
        data = case_data(case, run.seed + 101 * index)
        nodes, unreadable = reached_nodes(case, data, outcomes)
        problems += unreadable
        unserved = [t for t, n in enumerate(nodes) if not n]
        if unserved:
            problems.append(f"{case.describe()}: token(s) {unserved[:8]} reached no routed expert (each "
                            "token runs on its k experts, called as modules on its rows: none is dropped)")
        over = [(t, sorted(n)) for t, n in enumerate(nodes) if len(n) > case.max_nodes]
        if over:
            shown = ", ".join(f"token {t} on nodes {n}" for t, n in over[:4])
            problems.append(f"{case.describe()}: {len(over)} token(s) reached the experts of more than "
                            f"{case.max_nodes} node(s) ({shown}); each token may use only its "
                            f"{case.max_nodes} best nodes, scored by the sum of their k/max_nodes best "
                            "s + bias")
    return problems


def _cross_node_bytes(case: DeepSeekCase, events: list, rank: int) -> list:
    """Bytes one rank's all_to_all_single calls sent to each node other than its own."""
    sent = [0] * case.nodes
    for event in events:
        for destination, nbytes in enumerate(event[2] or []):
            if case.node_of_rank(destination) != case.node_of_rank(rank):
                sent[case.node_of_rank(destination)] += nbytes
    return sent


def _crossing_problems(case: DeepSeekCase, data, outcomes: tuple, phase: str) -> list[str]:
    """The phase's bytes between nodes: each (token, other node) pair's row once each way, plus at most
    the bookkeeping the contract allows."""
    nodes, unreadable = reached_nodes(case, data, outcomes)
    if unreadable:
        return [f"{case.describe()}: the traffic between nodes cannot be judged: {unreadable[0]}"]
    home = [case.node_of_rank(rank) for rank in range(case.world_size)
            for _ in range(data.offsets[rank], data.offsets[rank + 1])]
    rows = [[0] * case.nodes for _ in range(case.nodes)]
    for token, reached in enumerate(nodes):
        for node in reached - {home[token]}:
            rows[home[token]][node] += 1          # the row out ...
            rows[node][home[token]] += 1          # ... and its result (or gradient) back
    recorded = [[0] * case.nodes for _ in range(case.nodes)]
    for rank, outcome in enumerate(outcomes):
        for node, nbytes in enumerate(_cross_node_bytes(case, getattr(outcome, phase), rank)):
            recorded[case.node_of_rank(rank)][node] += nbytes
    row, pairs = _row_bytes(case), sum(map(sum, rows)) // 2
    least = 2 * pairs * row
    most = least + 2 * pairs * BOOKKEEPING_BYTES * case.experts_per_node + COUNT_BYTES * case.experts * (
        case.world_size * (case.world_size - case.ranks_per_node))
    total = sum(map(sum, recorded))
    if least <= total <= most:
        return []
    return [f"{case.describe()}: the {phase} sent {total} B between nodes; the {pairs} (token, other node) "
            f"pair(s) its experts ran on need one row of {row} B each way, {least} B, plus at most "
            f"{most - least} B of counts and bookkeeping (one row per (token, node), not per (token, "
            "expert): the node's rank that receives it forwards it inside the node):\n"
            + _matrix("    recorded bytes, node to node", recorded) + "\n"
            + _matrix("    the rows alone", [[r * row for r in line] for line in rows])]


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """Forward and backward: only all_to_all_single; between nodes, one row per (token, node) each way."""
    problems = []
    for index, case, outcomes in cases_of(run):
        if case.nodes == 1:
            continue
        if outcomes and outcomes[0].backward is None:
            problems.append(f"{case.describe()}: the output does not require a gradient, so the backward's "
                            "traffic cannot be judged")
            continue
        calls = {event[0] for outcome in outcomes for phase in (outcome.forward, outcome.backward)
                 for event in phase}
        if calls - {"all_to_all_single"}:
            problems.append(f"{case.describe()}: the layer called {sorted(calls)}; only all_to_all_single "
                            "may communicate")
            continue
        data = case_data(case, run.seed + 101 * index)
        for phase in ("forward", "backward"):
            problems += _crossing_problems(case, data, outcomes, phase)
    return problems
