"""The judging half of chapter 06's checks on made-up outcomes, and that course_lib holds no answer."""

import ast
from dataclasses import replace
from pathlib import Path

import torch

from course_lib.grading.attempt.rank_attempt import RankRun
from course_lib.grading.checks.ch06_tensor_parallel.judge import (
    _filled,
    _reference,
    traffic_problems,
    value_problems,
)
from course_lib.grading.checks.ch06_tensor_parallel.ranks import (
    LayerCase,
    LayerOutcome,
    build_full,
    case_tensors,
)
from course_lib.grading.checks.ch06_tensor_parallel.shards import (
    ShardOutcome,
    _judge_shards,
    _trains_the_layer,
    shard_layouts,
)

ROOT = Path(__file__).resolve().parents[2]
SEED = 11


def test_the_same_seed_builds_the_same_model_and_inputs():
    case = LayerCase("block", dim=16, hidden=32, heads=4, dtype="float64")
    first, second = build_full(case, SEED), build_full(case, SEED)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters(), strict=True))
    pairs = zip(case_tensors(case, SEED), case_tensors(case, SEED), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert next(first.parameters()).dtype == torch.float64


def _one_rank_run(case, outcome) -> RankRun:
    return RankRun(1, ((outcome,),), cases=(case,), seed=SEED)


def _unsharded_outcome(case):
    """What a correct layer on one rank returns: the unsharded model's own values."""
    out, input_grad, grads, _ = _reference(case, SEED)
    return LayerOutcome(out=out, input_grad=input_grad, grads=dict(grads),
                        forward=[("all_reduce", out.numel() * 4)], backward=[("all_reduce", out.numel() * 4)])


def test_one_rank_holding_the_whole_model_passes_and_a_doubled_bias_fails():
    case = LayerCase("mlp")
    outcome = _unsharded_outcome(case)
    assert value_problems(_one_rank_run(case, outcome)) == []
    outcome = replace(outcome, out=outcome.out + build_full(case, SEED).down.bias.detach())
    problems = value_problems(_one_rank_run(case, outcome))
    assert len(problems) == 1 and "output differs" in problems[0] and "rank 0" in problems[0]


def test_a_missing_parameter_gradient_is_named():
    case = LayerCase("row")
    outcome = _unsharded_outcome(case)
    del outcome.grads["bias"]
    assert any("no bias.grad" in p for p in value_problems(_one_rank_run(case, outcome)))


def test_traffic_must_be_exactly_one_all_reduce_each_way_of_the_outputs_bytes():
    case = LayerCase("mlp", batch=2, seq=3, dim=8)
    outcome = _unsharded_outcome(case)
    assert traffic_problems(_one_rank_run(case, outcome)) == []
    outcome = replace(outcome, backward=outcome.backward * 2, forward=[])
    problems = traffic_problems(_one_rank_run(case, outcome))
    assert len(problems) == 2
    assert "no collective at all" in problems[0] and "expected: all_reduce of 192 B" in problems[0]
    assert "recorded: all_reduce of 192 B, all_reduce of 192 B" in problems[1]


def test_a_failed_run_reports_its_error_in_every_judgement():
    run = RankRun(2, error="boom", cases=(LayerCase("column"),), seed=SEED)
    assert value_problems(run) == traffic_problems(run) == ["boom"]


def test_shards_are_judged_by_what_the_layer_computes():
    layout = (6, 8, 2, True)
    right = [ShardOutcome(torch.zeros(4, 6), torch.zeros(4))] * 2
    transposed = [ShardOutcome(torch.zeros(8, 3), torch.zeros(4))] * 2
    assert any("rank 0" in p for p in _judge_shards("column", layout, right, SEED))  # zeros are wrong values
    assert any("cannot take its input" in p for p in _judge_shards("column", layout, transposed, SEED))
    odd = (3, 5, 2, True)
    assert _judge_shards("column", odd, [ShardOutcome(value_error="no")] * 2, SEED) == []
    assert "must raise ValueError" in _judge_shards("column", odd, right, SEED)[0]


def test_layouts_cover_every_world_size_and_a_size_that_does_not_divide():
    import random

    layouts = shard_layouts((1, 2, 4), random.Random(0))
    assert {n for _, _, n, _ in layouts} == {1, 2, 4}
    assert any(out % n for _, out, n, _ in layouts[0::2]) and any(i % n for i, _, n, _ in layouts[1::2])


def test_course_lib_never_calls_a_collective_in_the_tensor_parallel_checks():
    """The checks compare with unsharded models and DTensor; a collective there would be an answer."""
    paths = sorted((ROOT / "course_lib" / "grading" / "checks").glob("ch06_*/*.py"))
    assert len(paths) >= 4
    for path in paths:
        calls = {node.func.attr for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)}
        assert not calls & {"all_reduce", "all_gather", "reduce_scatter", "all_gather_into_tensor",
                            "reduce_scatter_tensor"}, path
        assert "autograd.Function" not in path.read_text(), path


def test_an_optimizer_step_on_a_view_trains_the_layer_and_the_layer_is_put_back():
    linear = torch.nn.Linear(4, 6)
    before = linear.weight.detach().clone()
    views = (linear.weight.detach()[:3], linear.bias.detach()[:3])
    assert _trains_the_layer(linear, *views) == ["weight", "bias"]
    assert _trains_the_layer(linear, linear.weight[:, 2:], None) == ["weight"]    # not detached: still a view
    copies = (linear.weight.detach()[:3].clone(), linear.bias.detach().clone())
    assert _trains_the_layer(linear, *copies) == []
    assert torch.equal(linear.weight, before)


def test_a_shard_that_shares_the_layers_memory_is_named():
    layout = (6, 8, 2, True)
    linear = _filled(torch.nn.Linear(6, 8), SEED, torch.float32)
    right = [ShardOutcome(w.detach().clone(), b.detach().clone())
             for w, b in zip(linear.weight.chunk(2), linear.bias.chunk(2), strict=True)]
    assert _judge_shards("column", layout, right, SEED) == []
    views = [replace(shard, trains=["weight", "bias"]) for shard in right]
    [problem] = _judge_shards("column", layout, views, SEED)
    assert "changed the layer's weight and bias" in problem and "return new tensors" in problem
