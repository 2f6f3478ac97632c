"""Chapter 07's check logic without a student: the visible case's written-out shards, messages that name a
dtype as a dtype, unequal shards reported instead of a gloo abort, the FSDP traffic order and memory bound,
and the ZeRO-1 traffic judge."""

import math

import torch

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.checks.ch07_fsdp import judge as fsdp_judge
from course_lib.grading.checks.ch07_fsdp import visible as ch07_fsdp
from course_lib.grading.checks.ch07_fsdp.ranks import FSDPOutcome
from course_lib.grading.checks.ch07_optimizer import judge as optimizer_judge
from course_lib.grading.checks.ch07_optimizer import ranks as optimizer_ranks
from course_lib.grading.checks.ch07_optimizer import visible as ch07_optimizer
from course_lib.grading.checks.ch07_optimizer.ranks import OptimizerOutcome
from course_lib.grading.checks.ch07_zero import visible as ch07_zero
from course_lib.grading.checks.ch07_zero.ranks import FlatCase, case_tensors, gather_side
from course_lib.real import run_ranks

# Made-up records: every field a rank sends, empty, for a test to fill in the ones its judge reads.
BLANK_FSDP = {"full": {}, "events": [], "finish_events": [], "peak": {}, "baseline": {}, "ties": [],
              "shard_dtypes": [], "grad_dtypes": [], "shard_bytes": 0}
BLANK_OPTIMIZER = {"params": [], "is_optimizer": True, "state_bytes": 0, "state_dict": {},
                   "closure_losses": [], "closure_grad_enabled": [], "step_events": [],
                   "grads_after_zero_grad": []}


def test_the_visible_shards_are_the_counting_tensors_flattened_padded_and_cut_in_three():
    flat = torch.cat([t.reshape(-1) for t in case_tensors(ch07_zero.COUNTING, 7, 0)])
    padded = torch.cat([flat, torch.zeros(math.ceil(flat.numel() / 3) * 3 - flat.numel())])
    assert [tuple(piece.tolist()) for piece in padded.chunk(3)] == [tuple(map(float, s))
                                                                     for s in ch07_zero.VISIBLE_SHARDS]
    grads = case_tensors(ch07_zero.COUNTING, 7, 0, rank=2)
    assert torch.equal(grads[1], 3 * torch.arange(13.0, 18.0))   # rank r's gradients: (r + 1) x the counts


def test_a_wrong_dtype_is_reported_as_a_dtype_and_a_wrong_shape_as_a_shape():
    dtype = ch07_zero.tensor_problem("rank 0", torch.zeros(6, dtype=torch.float64), (6,), torch.float32, "it")
    shape = ch07_zero.tensor_problem("rank 0", torch.zeros(5), (6,), torch.float32, "it")
    assert "dtype torch.float64; expected torch.float32" in dtype and "shape" not in dtype
    assert "shape (5,); expected (6,)" in shape


def _uneven_shard(tensors):
    return torch.zeros(2 + torch.distributed.get_rank())      # rank 0: 2 elements, rank 1: 3


def test_a_gather_handed_unequal_shards_hears_so_instead_of_dying_in_gloo():
    student = StudentFunction("gather_parameters", sources=["def gather_parameters(shard, shapes):\n"
                                                           "    raise AssertionError('never called')\n"])
    outcomes = run_ranks(gather_side, 2, student, [FlatCase(((5,),))], 0, _uneven_shard, timeout=60)
    assert all("unequal lengths [2, 3]" in rank[0]["raised"] for rank in outcomes)


def _fsdp_run(events, finish=()):
    return RankRun(2, per_rank=(FSDPOutcome(**{**BLANK_FSDP, "events": list(events),
                                               "finish_events": list(finish)}),))


def test_fsdp_traffic_wants_each_reduce_scatter_during_the_backward_one_prefetch_allowed():
    case = ch07_fsdp.FSDPCase(width=4, units=2)
    sizes = case.unit_bytes(2, 4)           # two blocks and the head
    gather, scatter = "all_gather_into_tensor", "reduce_scatter_tensor"
    forward = [(gather, b) for b in sizes]
    backward = sizes[::-1]
    as_yours = forward + [event for b in backward for event in ((gather, b), (scatter, b))]
    prefetching = forward + [(gather, backward[0]), (gather, backward[1]), (scatter, backward[0]),
                             (gather, backward[2]), (scatter, backward[1]), (scatter, backward[2])]
    deferred = forward + [(gather, b) for b in backward] + [(scatter, b) for b in backward]
    assert ch07_fsdp.traffic_problems(_fsdp_run(as_yours), case) == []
    assert ch07_fsdp.traffic_problems(_fsdp_run(prefetching), case) == []
    problems = " ".join(ch07_fsdp.traffic_problems(_fsdp_run(deferred), case))
    assert "came after 3 backward all-gathers" in problems
    late = ch07_fsdp.traffic_problems(_fsdp_run(forward + [(gather, b) for b in backward],
                                                [(scatter, b) for b in backward]), case)
    assert any("waited for finish_gradient_synchronization" in p for p in late)


def test_fsdp_memory_bound_is_the_shards_and_two_units_forward_plus_gradients_and_a_unit_backward():
    case = ch07_fsdp.FSDPCase(width=4, units=2)
    largest = max(case.unit_bytes(2, 4))
    outcome = FSDPOutcome(**{**BLANK_FSDP, "shard_bytes": 100,
                             "peak": {"forward": 10 + 100 + 2 * largest, "backward": 0},
                             "baseline": {"forward": 10, "backward": 0}})
    assert fsdp_judge.memory_bound(case, 2, outcome, "forward")[0] == 100 + 2 * largest
    assert fsdp_judge.memory_bound(case, 2, outcome, "backward")[0] == 200 + 3 * largest
    run = RankRun(2, per_rank=(outcome,))
    assert ch07_fsdp.memory_problems(run, case) == []
    outcome.peak["forward"] += 1
    assert "in the forward" in ch07_fsdp.memory_problems(run, case)[0]


def test_zero1_traffic_counts_each_updated_parameter_once_and_refuses_an_all_reduce():
    case = ch07_optimizer.OptimizerCase(width=4, depth=2, steps=2, frozen_wide=2)
    model = optimizer_ranks.make_model(case)
    trainable = sum(p.numel() * 8 for p in model.parameters() if p.requires_grad)

    def run(events):
        return RankRun(2, per_rank=(OptimizerOutcome(**{**BLANK_OPTIMIZER, "step_events": events}),))

    assert optimizer_judge.traffic_problems(run([("broadcast", trainable)]), case) == []
    assert "moving 0 bytes" in optimizer_judge.traffic_problems(run([]), case)[0]
    assert "all_reduce" in optimizer_judge.traffic_problems(run([("all_reduce", trainable)]), case)[0]
