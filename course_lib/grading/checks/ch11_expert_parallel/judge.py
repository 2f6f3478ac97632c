"""Judging chapter 11's exercise: the one-process MoE every rank's result must equal, and the traffic allowed.

The reference is examples/one_process_moe.py's dense MoE, in float64, on the same data the ranks rebuilt;
nothing here dispatches.
"""

from __future__ import annotations

import contextlib

import torch

from course_lib.examples.one_process_moe import dense_moe, gate_matrix
from course_lib.grading.attempt.judge_runner import cases_of, failures, judging_with
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch11_expert_parallel.ranks import DTYPES, MoECase, case_data

TOLERANCE = {"float32": 2e-4, "float64": 1e-9}
COUNT_BYTES = 8       # an int64 count: the most a count exchange may send per expert


@contextlib.contextmanager
def one_thread():
    """Tiny tensors on one intra-op thread: on a loaded machine two threads made the reference 100x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def reference(case: MoECase, seed: int) -> dict:
    """Output, gradients of tokens, logits and every expert's parameters, computed in one process."""
    with one_thread():
        return _reference(case, seed)


def _reference(case: MoECase, seed: int) -> dict:
    data = case_data(case, seed)
    tokens = data.tokens.double().requires_grad_(True)
    logits = data.logits.double().requires_grad_(True)
    experts = [expert.double() for expert in data.experts]
    gates = gate_matrix(logits, case.k, data.offsets, case.capacity_factor)
    out = dense_moe(tokens, gates, experts)
    (out * data.upstream.double()).sum().backward()
    return {"data": data, "out": out.detach(), "tokens_grad": tokens.grad, "logits_grad": logits.grad,
            "expert_grads": [{n: p.grad for n, p in expert.named_parameters()} for expert in experts],
            "gates": gates.detach()}


def _compare(where: str, what: str, got, expected: torch.Tensor, dtype: str) -> list[str]:
    if got is None:
        return [f"{where}: no {what} (it got no gradient: did the graph reach it?)"]
    if not isinstance(got, torch.Tensor):
        return [f"{where}: {what} is {got!r}, expected a tensor of shape {tuple(expected.shape)}"]
    if got.shape != expected.shape:
        return [f"{where}: {what} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"]
    tolerance = TOLERANCE[dtype]
    if got.dtype != DTYPES[dtype]:
        return [f"{where}: {what} has dtype {got.dtype}, expected {DTYPES[dtype]} (the tokens' dtype)"]
    if torch.allclose(got.double(), expected, rtol=tolerance, atol=tolerance):
        return []
    error = (got.double() - expected).abs().max().item()
    rows = ((got.double() - expected).abs() > tolerance * (1 + expected.abs())).any(-1).nonzero().flatten()
    return [f"{where}: {what} differs from the one-process MoE by up to {error:.3g} "
            f"(rows {rows.tolist()[:8]})"]


PEER_GONE = ("Connection reset by peer", "Connection closed by peer")


def explained(reason: str) -> str:
    """A failed run's reason, with why a peer may have vanished: gloo kills a rank that is sent too much."""
    if any(words in reason for words in PEER_GONE):
        return (f"{reason}\n(another rank died first: gloo aborts a rank that receives more bytes than "
                "its output split sizes leave room for. Does every rank know how many rows each other rank "
                "sends it? Exchange the counts first.)")
    return reason


def run_problem(run: RankRun) -> list[str]:
    """The run's failure, explained (none when it completed)."""
    return [explained(reason) for reason in failures([run])]


judging = judging_with(explained)


@judging
def value_problems(run: RankRun) -> list[str]:
    """Every rank's output against its rows of the one-process MoE's."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = reference(case, run.seed + 101 * index)
        for rank, outcome in enumerate(outcomes):
            rows = expected["data"].rows(rank)
            problems += _compare(f"rank {rank}, {case.describe()}", "output", outcome.out,
                                 expected["out"][rows], case.dtype)
    return problems


@judging
def gradient_problems(run: RankRun) -> list[str]:
    """Gradients of every rank's tokens and router logits, and of the experts it holds."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = reference(case, run.seed + 101 * index)
        for rank, outcome in enumerate(outcomes):
            where, rows = f"rank {rank}, {case.describe()}", expected["data"].rows(rank)
            for what in ("tokens_grad", "logits_grad"):
                problems += _compare(where, what.replace("_", "."), getattr(outcome, what),
                                     expected[what][rows], case.dtype)
            for i, grads in enumerate(outcome.expert_grads or []):
                expert = rank * case.experts_per_rank + i
                for name, wanted in expected["expert_grads"][expert].items():
                    problems += _compare(where, f"expert {expert}'s {name}.grad", grads.get(name), wanted,
                                         case.dtype)
    return problems


@judging
def router_gradient_problems(run: RankRun) -> list[str]:
    """The router logits' gradient of every rank (from runs with ``backward=ROUTER_ONLY``)."""
    problems = []
    for index, case, outcomes in cases_of(run):
        expected = reference(case, run.seed + 101 * index)
        for rank, outcome in enumerate(outcomes):
            if isinstance(outcome.out, torch.Tensor):
                wanted = expected["logits_grad"][expected["data"].rows(rank)]
                problems += _compare(f"rank {rank}, {case.describe()}", "logits.grad (the router's gradient)",
                                     outcome.logits_grad, wanted, case.dtype)
    return problems


def routed_rows(case: MoECase, seed: int, gates: torch.Tensor | None = None) -> tuple[list, list]:
    """[source][destination] (token, expert) pairs and distinct tokens a dispatch moves: the most and the
    fewest rows it may send (with a capacity factor, the pairs kept)."""
    data = case_data(case, seed)
    if gates is None:
        gates = gate_matrix(data.logits.double(), case.k, data.offsets, case.capacity_factor)
    per_rank = case.experts_per_rank
    pairs, tokens = [], []
    for rank in range(case.world_size):
        routed = (gates[data.rows(rank)] != 0).view(-1, case.world_size, per_rank)
        pairs.append(routed.sum((0, 2)).tolist())
        tokens.append(routed.any(-1).sum(0).tolist())
    return pairs, tokens


def _row_bytes(case: MoECase) -> int:
    return case.hidden * torch.empty(0, dtype=DTYPES[case.dtype]).element_size()


def _sent(events: list) -> int:
    return sum(sum(event[2] or [event[1]]) for event in events if event[0] == "all_to_all_single")


@judging
def capacity_problems(run: RankRun) -> list[str]:
    """With a capacity factor: the values of the MoE that drops the overflow, and no dropped pair sent
    (all ranks' all-to-alls together move at most the counts and each kept pair's row out and back)."""
    problems = value_problems(run)
    for index, case, outcomes in cases_of(run):
        pairs, _ = routed_rows(case, run.seed + 101 * index)
        allowed = 2 * sum(map(sum, pairs)) * _row_bytes(case) + case.world_size * case.experts * COUNT_BYTES
        recorded = sum(_sent(outcome.forward) for outcome in outcomes)
        if recorded > allowed:
            problems.append(f"{case.describe()}: the ranks' all-to-alls sent {recorded} B in all, more than "
                            f"the {allowed} B that the counts and the kept pairs (out and back) need: a "
                            "dropped pair must not travel")
    return problems


def _matrix(title: str, rows: list) -> str:
    width = max(len(str(cell)) for row in rows for cell in row) + 2
    lines = [title, " " * 9 + "".join(f"to {j}".rjust(width) for j in range(len(rows)))]
    lines += [f"  from {i}:" + "".join(str(cell).rjust(width) for cell in row) for i, row in enumerate(rows)]
    return "\n".join(lines)


PHASES = {"forward": ("the counts, the tokens out, the results back", 3),
          "backward": ("the gradients back the way each all-to-all came", 2)}


def _calls_problem(where: str, outcomes: list) -> str | None:
    """Exactly three all_to_all_single calls forward and two backward, and no other call."""
    for rank, outcome in enumerate(outcomes):
        for phase, (what, count) in PHASES.items():
            calls = [event[0] for event in getattr(outcome, phase) or []]
            if calls != ["all_to_all_single"] * count:
                return (f"rank {rank}, {where}: the {phase} made {calls or 'no call at all'}; expected "
                        f"exactly {count} all_to_all_single calls ({what}) and nothing else")
    return None


def dispatch_mismatch(pairs: list, tokens: list, row: int, sent: list, where: str, rule: str) -> list[str]:
    """Each (source, destination): at least a row per routed token, at most one per routed pair; where
    not, the recorded bytes beside the expected ones, ``rule`` saying what the dispatch must send
    (chapter 11's two exercises share it)."""
    n = len(pairs)
    if all(tokens[r][j] * row <= sent[r][j] <= pairs[r][j] * row and sent[r][j] % row == 0
           for r in range(n) for j in range(n)):
        return []
    expected = [[f"{t * row}" if t == p else f"{t * row}-{p * row}" for t, p in zip(ts, ps, strict=True)]
                for ts, ps in zip(tokens, pairs, strict=True)]
    return [f"{where}: the tokens' all-to-all does not send each rank the rows routed to its experts "
            f"({rule}):\n" + _matrix("    recorded bytes", sent) + "\n"
            + _matrix("    expected bytes", expected)]


def _dispatch_problem(case: MoECase, seed: int, where: str, sent: list) -> list[str]:
    pairs, tokens = routed_rows(case, seed)
    return dispatch_mismatch(pairs, tokens, _row_bytes(case), sent, where,
                             "at most one per (token, expert) pair, at least one per token")


def _pattern_problems(case: MoECase, seed: int, outcomes: list) -> list[str]:
    where, n = case.describe(), case.world_size
    wrong_calls = _calls_problem(where, outcomes)
    if wrong_calls:
        return [wrong_calls]
    counts, dispatch, combine = ([outcome.forward[i][2] for outcome in outcomes] for i in range(3))
    backward = [[outcome.backward[i][2] for outcome in outcomes] for i in range(2)]
    problems = [f"rank {r}, {where}: the first all-to-all (the counts) sent {counts[r]} B to the ranks; "
                f"counts take at most {COUNT_BYTES} B per expert held there" for r in range(n)
                if any(b > COUNT_BYTES * case.experts_per_rank for b in counts[r])]
    problems += _dispatch_problem(case, seed, where, dispatch)
    back = [[dispatch[j][r] for j in range(n)] for r in range(n)]
    if combine != back:
        problems.append(f"{where}: the results' all-to-all must return to each rank what it sent:\n"
                        + _matrix("    recorded bytes", combine) + "\n" + _matrix("    expected bytes", back))
    if backward != [dispatch, combine]:
        problems.append(f"{where}: the backward must send each gradient back the way its rows came (the "
                        "results' gradients to the experts' ranks, then the tokens' gradients home):\n"
                        + _matrix("    recorded, first", backward[0]) + "\n"
                        + _matrix("    expected, first", dispatch) + "\n"
                        + _matrix("    recorded, second", backward[1]) + "\n"
                        + _matrix("    expected, second", combine))
    return problems


@judging
def traffic_problems(run: RankRun) -> list[str]:
    """Forward: one all-to-all of counts, one of the routed tokens, one of the results; backward: the last
    two reversed. Bytes per (source, destination) from the routing, never every token to every rank."""
    problems = []
    for index, case, outcomes in cases_of(run):
        problems += _pattern_problems(case, run.seed + 101 * index, outcomes)
    return problems
