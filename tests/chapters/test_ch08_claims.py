"""What chapter 08's prose says about its simulated numbers, asserted (the cells print the numbers)."""

import pytest

from course_lib import sim

LLAMA_BATCH = 16 * 2**20 // 8192
PUBLISHED = dict(dp=128, tp=8, pp=16, cp=1, microbatches=16, global_batch=LLAMA_BATCH, zero_stage=1)


def test_tensor_parallel_across_nodes_is_slower_than_inside():
    cluster = sim.make_cluster(2, 8)
    common = dict(dp=2, tp=8, microbatches=4, global_batch=8, zero_stage=1, recompute="selective")
    inside = sim.simulate_training_step(sim.LLAMA3_8B, cluster, placement=("tp", "cp", "dp", "pp"), **common)
    across = sim.simulate_training_step(sim.LLAMA3_8B, cluster, placement=("dp", "cp", "tp", "pp"), **common)
    # rail-optimised nodes: a TP group of 4 GPUs per node crosses on 4 NICs, still well below NVLink
    assert across.step_time > 1.2 * inside.step_time
    assert across.peak_memory == inside.peak_memory


def test_llama3_layout_played_naively_overflows_on_stage_0():
    cluster = sim.make_cluster(2048, 8)
    with pytest.raises(sim.OutOfMemoryError) as error:
        sim.simulate_training_step(sim.LLAMA3_405B, cluster, recompute="selective", **PUBLISHED)
    assert error.value.stage == 0


def test_with_their_published_settings_both_8k_llama_runs_come_within_two_points():
    for run in (sim.search.published.LLAMA3_8K, sim.search.published.LLAMA3_16K):
        assert abs(sim.simulate_published(run).mfu - run.model_flops_mfu) < 0.02, run.name


def test_the_128k_context_run_comes_within_two_and_a_half_points():
    run = sim.search.published.LLAMA3_128K
    assert abs(sim.simulate_published(run).mfu - run.model_flops_mfu) < 0.025


def test_interleaving_the_8k_run_overflows_so_it_is_played_with_1f1b():
    run = sim.search.published.LLAMA3_8K
    layout = dict(run.layout, schedule="interleaved_1f1b", virtual_stages=2,
                  stage_layers=sim.ends_lighter(126, 16, 2))
    assert not all(m.fits for m in sim.memory_per_device(run.model, preset="h100", **layout))


def test_megatron_1t_comes_out_about_3_5_points_too_high():
    run = sim.search.published.MEGATRON_1T_RUN
    assert 0.03 < sim.simulate_published(run).mfu - run.model_flops_mfu < 0.04


def test_on_1024_gpus_most_layouts_do_not_fit_and_the_best_has_hundreds_of_micro_batches():
    cluster = sim.make_cluster(128, 8)
    rows = sim.search_layouts(sim.LLAMA3_405B, cluster, LLAMA_BATCH, zero_stages=(0, 1, 2, 3), cps=(1, 2),
                              micro_batch_sizes=(1, 2), simulate_top=0)
    assert sum(r["fits"] for r in rows) < len(rows) / 2
    assert rows[0]["microbatches"] >= 100
    assert rows[0]["mfu"] < cluster.preset.flops / cluster.preset.peak_flops


def test_llama_figures_go_up_4_and_40_percent_and_the_cp_all_gathers_hide_behind_attention():
    from course_lib.sim.search.published import causal_to_model_flops
    run = sim.search.published.LLAMA3_128K
    assert round(100 * (causal_to_model_flops(sim.LLAMA3_405B) - 1)) == 4
    assert round(100 * (causal_to_model_flops(run.model) - 1)) == 40
    assert run.model.heads // run.model.num_kv_heads == 16
    events = list(sim.simulate_published(run).timeline.events(0))
    gather = next(e for e in events if e.label.endswith("CP all-gather KV"))
    attention = next(e for e in events if e.label == gather.label.replace("CP all-gather KV", "attention"))
    assert gather.end - gather.start < attention.end - attention.start
