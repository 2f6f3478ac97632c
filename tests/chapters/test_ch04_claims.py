"""What chapter 04's prose says, asserted: each stage's memory and how many stages a 70 B model needs, the
uneven split of its CPU model and what that costs once micro-batches flow, the bytes crossing a stage."""

from __future__ import annotations

import math

import pytest

from course_lib import sim

DEEP_WIDTHS = (256, 1024, 1024, 1024, 1024, 256)
SPLIT = (1, 1, 1, 2)            # stage_of's split of the 5 layers over 4 stages: the last gets the extra


def _stage_params(widths=DEEP_WIDTHS, split=SPLIT):
    layers = [a * b + b for a, b in zip(widths[:-1], widths[1:], strict=True)]
    bounds = [sum(split[:s]) for s in range(len(split) + 1)]
    return [sum(layers[bounds[s]:bounds[s + 1]]) for s in range(len(split))]


def _fits(stages: int) -> bool:
    return all(m.fits for m in sim.memory_per_device(sim.LLAMA3_70B, pp=stages, recompute="selective",
                                                     preset="h100"))


def test_70_b_parameters_of_model_state_need_14_stages_of_80_gb_and_the_simulators_llama_27():
    state = sim.zero_memory_per_device(70e9, 1, stage=0)
    assert state == 16 * 70e9 and math.ceil(state / sim.H100.memory_bytes) == 14
    assert not any(_fits(p) for p in (1, 2, 8, 16, 26)) and _fits(27)
    # the fullest stage is an end stage: the last at 16 stages (output layer and logits), the first at 27
    for stages, fullest in ((16, 15), (27, 0)):
        memory = sim.memory_per_device(sim.LLAMA3_70B, pp=stages, recompute="selective", preset="h100")
        assert max(range(stages), key=lambda s: memory[s].total) == fullest


def test_the_cpu_models_stages_are_uneven_stage_0_a_quarter_of_stage_1():
    params = _stage_params()
    assert params == [263_168, 1_049_600, 1_049_600, 1_312_000]
    assert round(params[0] / params[1], 2) == 0.25
    held = sim.memory_per_device(sim.MLPSpec(DEEP_WIDTHS), pp=4, stage_layers=SPLIT, global_batch=32,
                                 param_bytes=4, grad_bytes=4, optimizer_bytes=0)
    assert [m.parameters / 4 for m in held] == params


def test_one_batch_at_a_time_an_uneven_split_changes_who_idles_not_how_much():
    times = [p / 1e6 for p in _stage_params()]
    played = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 4, 1), times, [2 * t for t in times])
    assert played.bubble_fraction == pytest.approx(sim.bubble_fraction_formula(4, 1))


def test_with_micro_batches_the_uneven_split_is_slower_and_its_light_stage_idles_most():
    params, micro = _stage_params(), 8
    total = 3 * sum(params)                             # forward + twice as long a backward
    runs = {}
    for name, shares in (("uneven", params), ("even", [1] * 4)):
        per_stage = [total * share / sum(shares) / micro for share in shares]
        runs[name] = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 4, micro),
                                           [t / 3 for t in per_stage], [2 * t / 3 for t in per_stage])
    assert runs["uneven"].makespan > 1.2 * runs["even"].makespan
    assert runs["even"].bubble_fraction == pytest.approx(sim.bubble_fraction_formula(4, micro))
    idle = [1 - sum(e.seconds for e in lane if e.kind == "compute") / runs["uneven"].makespan
            for lane in runs["uneven"].lanes]
    assert idle[0] == max(idle) and idle[3] == min(idle)


def test_a_stage_boundary_carries_134_mb_a_small_share_of_a_stages_forward_on_nvlink_and_infiniband():
    model, h100 = sim.LLAMA3_70B, sim.H100
    boundary = model.seq_len * model.hidden * 2
    assert round(boundary / 1e6) == 134
    forward = 2 * model.num_params / 16 * model.seq_len / h100.flops
    nvlink, infiniband = h100.intra_node.transfer_time(boundary), h100.inter_node.transfer_time(boundary)
    assert round(nvlink * 1e3, 2) == 0.30 and round(infiniband * 1e3, 2) == 2.70
    assert nvlink / forward < 0.005 and infiniband / forward < 0.03
