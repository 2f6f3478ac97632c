"""Chapter 11's check machinery: the one-process reference, the capacity rule, the traffic judge and its
drawing, and a deadlocked dispatch caught within the timeout with a message that says what to do."""

import dataclasses

import pytest
import torch

from course_lib.examples.one_process_moe import gate_matrix
from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.checks.ch11_expert_parallel.judge import (
    reference,
    routed_rows,
    run_problem,
    traffic_problems,
)
from course_lib.grading.checks.ch11_expert_parallel.ranks import MoECase, MoEOutcome, case_data, run_cases
from course_lib.grading.checks.ch11_expert_parallel.visible import REFUSAL, student_of, visible_cases

CASE = MoECase((5, 3), 2, 2, routing="one_takes_all")


def test_the_gate_matrix_renormalises_the_top_k_and_drops_in_token_order():
    logits = torch.tensor([[3.0, 1.0, 0.0], [2.0, 0.0, 1.0], [5.0, 4.0, 0.0], [1.0, 0.0, 2.0]])
    gates = gate_matrix(logits, 2, [0, 4], None)
    assert torch.allclose(gates.sum(-1), torch.ones(4)) and (gates != 0).sum(-1).tolist() == [2] * 4
    assert torch.allclose(gates[0, :2], torch.softmax(torch.tensor([3.0, 1.0]), 0))
    # capacity floor(1.0 * 4 * 2 / 3) = 2: expert 0 is picked by all four tokens, keeps tokens 0 and 1
    capped = gate_matrix(logits, 2, [0, 4], 1.0)
    assert (capped[:, 0] != 0).tolist() == [True, True, False, False]
    assert torch.equal(capped[:, 1:], gates[:, 1:])          # the other experts stay under capacity
    # each rank's block is capped on its own: two blocks of two tokens keep one pair of expert 0 each
    halves = gate_matrix(logits, 2, [0, 2, 4], 1.0)
    assert (halves[:, 0] != 0).tolist() == [True, False, True, False]


def test_the_reference_is_the_sparse_moe_and_its_routing_counts_pairs_and_tokens():
    expected = reference(CASE, 7)
    data = case_data(CASE, 7)
    favourite = 7 % CASE.experts
    assert (expected["gates"][:, favourite] != 0).all()     # one_takes_all: every token picks it
    pairs, tokens = routed_rows(CASE, 7)
    assert sum(map(sum, pairs)) == 2 * sum(CASE.tokens)       # k = 2 pairs per token
    assert all(t <= p for ts, ps in zip(tokens, pairs, strict=True) for t, p in zip(ts, ps, strict=True))
    assert expected["out"].shape == data.tokens.shape and expected["tokens_grad"].dtype == torch.float64


def _outcome(forward, backward):
    return MoEOutcome(out=None, forward=[("all_to_all_single", 0, list(s)) for s in forward],
                      backward=[("all_to_all_single", 0, list(s)) for s in backward])


def test_the_traffic_judge_accepts_the_routed_rows_and_draws_what_differs():
    pairs, _ = routed_rows(CASE, 7)
    row = CASE.hidden * 4
    dispatch = [[p * row for p in ps] for ps in pairs]
    combine = [[dispatch[j][r] for j in range(2)] for r in range(2)]
    outcomes = [_outcome([[16, 16], dispatch[r], combine[r]], [dispatch[r], combine[r]]) for r in range(2)]
    right = RankRun(2, per_rank=tuple([o] for o in outcomes), cases=(CASE,), seed=7)
    assert traffic_problems(right) == []
    everything = [[sum(CASE.tokens) * row] * 2 for _ in range(2)]   # every token to every rank
    wrong = [_outcome([[16, 16], everything[r], combine[r]], [dispatch[r], combine[r]]) for r in range(2)]
    problems = traffic_problems(RankRun(2, per_rank=tuple([o] for o in wrong), cases=(CASE,), seed=7))
    assert "recorded bytes" in problems[0] and "expected bytes" in problems[0] and "from 1:" in problems[0]
    gathered = [MoEOutcome(out=None, forward=[("all_gather", 0, None)], backward=[])] * 2
    calls = traffic_problems(RankRun(2, per_rank=tuple([o] for o in gathered), cases=(CASE,), seed=7))
    assert "expected exactly 3 all_to_all_single calls" in calls[0]


def test_a_vanished_peer_is_explained_with_the_counts():
    run = RankRun(2, error="raised on 2 ranks: RuntimeError: ... Connection reset by peer ...")
    assert "Exchange the counts first" in run_problem(run)[0]
    assert run_problem(RankRun(2, error="raised: ValueError: no")) == ["raised: ValueError: no"]


DEADLOCK = """
def expert_parallel_forward(tokens, router_logits, local_experts, k, capacity_factor=None):
    if dist.get_rank() == 0:                     # rank 0 never joins the all-to-all
        return tokens * 0
    out = torch.empty(len(tokens) * dist.get_world_size(), tokens.shape[1])
    dist.all_to_all_single(out, tokens.detach().repeat(dist.get_world_size(), 1))
    return tokens * 0
"""


def test_a_deadlocked_dispatch_is_stopped_within_the_timeout_and_named():
    student = student_of(StudentFunction("expert_parallel_forward", sources=(DEADLOCK,)))
    run = run_cases(student, [MoECase((4, 4), 1, 1)], seed=0, timeout=4, backward=False)
    assert run.hung and "did not finish on 2 ranks within 4 s" in run.error
    assert "exchange the counts first" in run.error.lower()


def test_visible_cases_have_uneven_tokens_and_both_routings():
    cases = visible_cases(4)
    assert len(set(cases[0].tokens)) > 1 and {c.k for c in cases} == {1, 2}
    assert {c.routing for c in cases} >= {"one_takes_all", "idle_expert"}
    assert all(c.capacity_factor for c in visible_cases(2, capacity=True))
    assert REFUSAL.modules and "all_to_all_single" in REFUSAL.why


@pytest.mark.parametrize("routing", ["one_takes_all", "idle_expert"])
def test_the_leaning_routings_lean(routing):
    case = dataclasses.replace(CASE, routing=routing, k=1)
    load = gate_matrix(case_data(case, 3).logits.double(), 1, [0, 8], None).ne(0).sum(0)
    assert (load.max() == 8) if routing == "one_takes_all" else (load.min() == 0)
