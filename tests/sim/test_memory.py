"""ZeRO memory, activation memory (Korthikanti et al.) and the per-stage memory plan."""

import pytest

from course_lib.sim import (
    GPT3_175B,
    H100,
    LLAMA3_8B,
    LLAMA3_405B,
    activation_memory_per_layer,
    memory_per_device,
    zero_memory_breakdown,
    zero_memory_per_device,
)


def test_zero_paper_figure_1():
    # 7.5B parameters, 64-way data parallel: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
    n = 7.5e9
    assert zero_memory_per_device(n, 64, 0) == pytest.approx(16 * n)
    assert zero_memory_per_device(n, 64, 1) == pytest.approx(4 * n + 12 * n / 64)
    assert zero_memory_per_device(n, 64, 2) == pytest.approx(2 * n + 14 * n / 64)
    assert zero_memory_per_device(n, 64, 3) == pytest.approx(16 * n / 64)
    assert zero_memory_per_device(n, 64, 1) / 1e9 == pytest.approx(31.4, abs=0.05)
    assert zero_memory_breakdown(n, 1, 3) == zero_memory_breakdown(n, 1, 0)


def test_activation_formulas_by_hand():
    sbh = 2048 * 1 * 12288              # GPT-3: s=2048, h=12288, a=96 -> 5as/h = 80
    unfused = {"attention": "unfused"}  # Korthikanti et al. 2022, Table 2, the scores stored
    assert activation_memory_per_layer(GPT3_175B, 1, **unfused) == pytest.approx(sbh * (34 + 80))
    assert activation_memory_per_layer(GPT3_175B, 1, tp=8, **unfused) == pytest.approx(sbh * (10 + 3 + 10))
    assert activation_memory_per_layer(GPT3_175B, 1, 8, True, **unfused) == pytest.approx(sbh * 114 / 8)
    assert activation_memory_per_layer(GPT3_175B, 1, 8, True, "selective", **unfused) == pytest.approx(
        sbh * 34 / 8)
    assert activation_memory_per_layer(GPT3_175B, 1, 8, False, "full") == pytest.approx(2 * sbh)
    assert activation_memory_per_layer(GPT3_175B, 2, 8, True, "full") == pytest.approx(2 * 2 * sbh / 8)
    assert activation_memory_per_layer(GPT3_175B, 1, cp=2, **unfused) == pytest.approx(sbh / 2 * (34 + 40))


def test_fused_attention_is_the_default_and_stores_no_scores():
    # FlashAttention never stores the s x s scores: the count without the 5as/h term, at any recompute.
    sbh = 2048 * 1 * 12288
    assert activation_memory_per_layer(GPT3_175B, 1) == pytest.approx(sbh * 34)
    assert activation_memory_per_layer(GPT3_175B, 1, tp=8) == pytest.approx(sbh * (10 + 3))
    assert activation_memory_per_layer(GPT3_175B, 1, 8, True) == pytest.approx(
        activation_memory_per_layer(GPT3_175B, 1, 8, True, "selective", attention="unfused"))
    # Llama 3 405B at 8K (ch05 problem (b)): the scores were most of the unfused count
    fused = activation_memory_per_layer(LLAMA3_405B, 1, tp=8, sequence_parallel=True)
    unfused = activation_memory_per_layer(LLAMA3_405B, 1, tp=8, sequence_parallel=True, attention="unfused")
    assert unfused > 4 * fused
    with pytest.raises(ValueError, match="attention must be one of"):
        activation_memory_per_layer(GPT3_175B, 1, attention="flash")


def test_the_step_plans_memory_with_fused_attention_unless_told():
    fused = memory_per_device(LLAMA3_8B, tp=8, recompute="none")[0].activations
    unfused = memory_per_device(LLAMA3_8B, tp=8, recompute="none", attention="unfused")[0].activations
    assert unfused > fused


def test_plan_counts_every_parameter_once():
    for pp in (1, 2, 4):
        stages = memory_per_device(LLAMA3_8B, pp=pp, tp=2, dp=2, microbatches=4)
        params = sum(s.parameters for s in stages) * 2 / 2  # tp=2 shards, 2 bytes each
        assert params == pytest.approx(LLAMA3_8B.num_params)


def test_1f1b_stage_0_holds_more_activations_than_the_last_stage():
    stages = memory_per_device(LLAMA3_8B, pp=4, microbatches=8, recompute="full")
    assert stages[0].activations > stages[1].activations > stages[2].activations


def test_zero_shrinks_memory_in_order():
    totals = [memory_per_device(LLAMA3_8B, dp=8, zero_stage=z, recompute="full")[0].total for z in range(4)]
    assert totals[0] > totals[1] > totals[2] > totals[3]


def test_capacity_is_checked_against_the_memory_less_its_reserve():
    (stage,) = memory_per_device(LLAMA3_8B, preset="h100")
    assert not stage.fits and stage.capacity == 80e9 - 4e9


def test_a_layout_that_needs_all_but_a_sliver_of_the_gpu_is_not_called_fitting():
    """The reserve (CUDA context, NCCL buffers, fragmentation): 79.8 of 80 GB does not fit, 75.9 does."""
    from dataclasses import replace

    from course_lib.sim import H100
    from course_lib.sim.memory.formulas import MemoryBreakdown

    usable = H100.usable_memory
    assert usable == H100.memory_bytes - H100.memory_reserve == 76e9
    assert not MemoryBreakdown(79.8e9, 0, 0, 0, capacity=usable).fits
    assert MemoryBreakdown(75.9e9, 0, 0, 0, capacity=usable).fits
    with pytest.raises(ValueError, match="memory_reserve"):
        replace(H100, memory_reserve=80e9)


@pytest.mark.parametrize("call,match", [
    (lambda: zero_memory_per_device(1e9, 8, 4), "ZeRO stage"),
    (lambda: zero_memory_per_device(1e9, 0, 1), "dp_degree"),
    (lambda: zero_memory_per_device(-1, 8, 1), ">= 0"),
    (lambda: activation_memory_per_layer(GPT3_175B, 1, recompute="some"), "recompute"),
    (lambda: activation_memory_per_layer(GPT3_175B, 0), "micro_batch"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_zero_2_and_3_shard_each_stage_over_its_data_parallel_group():
    # FSDP / ZeRO-3 with pipeline parallel (torchtitan, DeepSpeed): each stage's own parameters are
    # sharded over the dp ranks that hold that stage, gradients too from ZeRO-2.
    plans = {z: memory_per_device(LLAMA3_8B, dp=8, pp=4, microbatches=8, zero_stage=z) for z in range(4)}
    for s in range(4):
        full = plans[0][s]
        assert plans[1][s].optimizer_states == pytest.approx(full.optimizer_states / 8)
        assert plans[2][s].gradients == pytest.approx(full.gradients / 8)
        assert plans[2][s].parameters == pytest.approx(full.parameters)
        assert plans[3][s].parameters == pytest.approx(full.parameters / 8)
        assert plans[0][s].total > plans[1][s].total > plans[2][s].total > plans[3][s].total


def test_ch05_problem_b_1f1b_misses_the_usable_memory_by_a_few_gb_with_fused_attention():
    # ch05 cells 59-60: stage 0 of Llama 3 405B (tp 8, pp 16, dp 8, ZeRO-1), 16 micro-batches x 7 layers held
    per_layer = activation_memory_per_layer(LLAMA3_405B, 1, tp=8, sequence_parallel=True)
    stage = memory_per_device(LLAMA3_405B, tp=8, pp=16, dp=8, zero_stage=1, recompute="full",
                              sequence_parallel=True, microbatches=64, global_batch=512)[0]
    states = stage.parameters + stage.gradients + stage.optimizer_states + stage.buffers
    over = 16 * 7 * per_layer + states - H100.usable_memory
    assert 0 < over < 5e9                                                   # "1F1B by a few GB"
    unfused = activation_memory_per_layer(LLAMA3_405B, 1, tp=8, sequence_parallel=True, attention="unfused")
    assert round(unfused / per_layer) == 5                                  # "about five times as much"
