"""The simulator against published production runs, with their papers' settings (sim/search/published.py)."""

import dataclasses

import pytest

from course_lib import sim
from course_lib.sim.job.config import make_config
from course_lib.sim.memory.formulas import activation_terms

PUBLISHED = sim.search.published
LLAMA_RUNS = [PUBLISHED.LLAMA3_8K, PUBLISHED.LLAMA3_16K, PUBLISHED.LLAMA3_128K]


@pytest.mark.parametrize("run", LLAMA_RUNS, ids=lambda r: r.name)
def test_llama3_405b_runs_fit_and_come_within_4_points_of_their_model_flops_mfu(run):
    report = sim.simulate_published(run)   # raises OutOfMemoryError if the published layout did not fit
    assert report.peak_memory <= 80e9 - 4e9   # the H100's memory less the reserve the plans keep free
    assert abs(report.mfu - run.model_flops_mfu) < 0.04, (report.mfu, run.model_flops_mfu)


def test_megatron_1t_fits_and_comes_within_4_points_of_its_model_flops_mfu_still_optimistic():
    # Known limitation (chapter 08 says so): the simulator stays optimistic, by about 3.5 points since it
    # streams the non-matmul work through HBM and blocks on 2021's pipeline sends (5.5 before).
    run = sim.search.published.MEGATRON_1T_RUN
    report = sim.simulate_published(run)
    assert report.peak_memory <= 80e9
    assert 0.02 < report.mfu - run.model_flops_mfu < 0.04, (report.mfu, run.model_flops_mfu)
    assert run.model_flops_mfu == pytest.approx(0.392, abs=0.001)   # 52% of peak, recompute FLOPs removed


def test_megatron_1t_interleaved_as_its_notes_say_is_2_points_faster_in_the_simulator():
    run = sim.search.published.MEGATRON_1T_RUN
    interleaved = dataclasses.replace(run, layout=dict(run.layout, schedule="interleaved_1f1b",
                                                        virtual_stages=2))
    gain = sim.simulate_published(interleaved).mfu - sim.simulate_published(run).mfu
    assert round(100 * gain) == 2


def test_memory_bound_layers_cost_time_only_where_the_preset_gives_a_memory_bandwidth():
    run = sim.search.published.MEGATRON_1T_RUN
    cluster = sim.make_cluster(run.gpus // 8, 8, preset=run.preset)
    free = dataclasses.replace(cluster, preset=dataclasses.replace(cluster.preset, memory_bandwidth=None))
    with_hbm = sim.simulate_training_step(run.model, cluster, **run.layout)
    without = sim.simulate_training_step(run.model, free, **run.layout)
    # 2 x Korthikanti's stored bytes per layer (1.10 GB here) at 2,039 GB/s: forward, recompute, 1.5x backward
    assert with_hbm.step_time > without.step_time * 1.04
    with pytest.raises(ValueError, match="memory_bandwidth"):
        dataclasses.replace(cluster.preset, memory_bandwidth=-1.0)


def test_the_long_context_run_is_table_4s_third_row():
    run = sim.search.published.LLAMA3_128K
    layout = run.layout
    assert layout["dp"] * layout["tp"] * layout["pp"] * layout["cp"] == run.gpus == 16384
    assert layout["global_batch"] * run.model.seq_len == 16 * 2**20 // 8192 * 8192   # 16M tokens a step
    report = sim.simulate_published(run)
    labels = {e.label for e in report.timeline.events(0) if e.kind == "comm"}
    assert any("CP all-gather KV" in label for label in labels)


def test_causal_counting_converts_as_the_notes_say():
    from course_lib.sim.search.published import causal_to_model_flops
    model = sim.search.published.LLAMA3_405B_128K
    full = model.training_flops(model.seq_len)
    scores = 3 * model.layers * 4 * model.seq_len**2 * model.hidden
    assert round(100 * scores / full) == 57                       # "the scores are 57% of PaLM's count"
    assert causal_to_model_flops(sim.LLAMA3_405B) == pytest.approx(1.04, abs=0.005)
    # PaLM's count would put the 128K stage's real rate 29% below the 8K stage's on 16,384 GPUs
    real_128k = 380 / causal_to_model_flops(model)
    real_8k = 400 / causal_to_model_flops(sim.LLAMA3_405B)
    assert round(100 * (1 - real_128k / real_8k)) == 29


def test_megatron_1t_has_its_published_size():
    assert sim.search.published.MEGATRON_1T.num_params == pytest.approx(1.008e12, rel=1e-3)   # Table 1: 1008B


def test_the_generalised_activation_count_gives_korthikanti_for_gpt():
    assert activation_terms(sim.GPT3_175B) == (10, 24, 5)
    replicated, split, scores = activation_terms(sim.LLAMA3_405B)   # no dropout, GQA, SwiGLU 3.25h
    assert (replicated, scores) == (8, 2) and split == pytest.approx(4 + 4 / 16 + 6 * 53248 / 16384)


def test_ends_lighter_takes_a_layer_off_the_first_and_last_stage():
    assert sim.ends_lighter(126, 16) == (7,) + (8,) * 14 + (7,)
    assert sim.ends_lighter(126, 16, 2) == (3,) + (4,) * 30 + (3,)
    with pytest.raises(ValueError, match="no layer"):
        sim.ends_lighter(4, 4, fewer=1)


def test_an_explicit_split_moves_the_memory_off_the_first_stage():
    run = sim.search.published.LLAMA3_16K
    even = dict(run.layout, stage_layers=None)
    balanced = sim.memory_per_device(sim.LLAMA3_405B, preset="h100", **run.layout)
    plain = sim.memory_per_device(sim.LLAMA3_405B, preset="h100", **even)
    assert balanced[0].total < plain[0].total


@pytest.mark.parametrize("split, message", [((8,) * 15, "pieces"), ((8,) * 16, "add up"),
                                            ((0,) + (9,) * 14 + (0,), "stage_layers"), ("7" * 16, "pieces")])
def test_bad_stage_layers_are_refused(split, message):
    with pytest.raises(ValueError, match=message):
        make_config(sim.LLAMA3_405B, 16, pp=16, stage_layers=split)


@pytest.mark.parametrize("run", sim.PUBLISHED_RUNS, ids=lambda r: r.name)
def test_each_run_keeps_the_papers_own_figures_and_its_rate_is_its_printed_mfu_within_a_point(run):
    """Table 4 rounds its TFLOP/s: 400 of 989 is 40.4%, printed as 41%."""
    peak = sim.get_preset(run.preset).peak_flops
    assert abs(run.paper_tflops / peak - run.paper_mfu) < 0.01
    assert run.model_flops_mfu == pytest.approx(run.paper_tflops * run.to_model_flops / peak)
    assert run.conversion


def test_the_papers_figures_are_43_41_38_and_52_percent_and_convert_to_the_simulators_count():
    printed = [round(100 * run.paper_mfu) for run in sim.PUBLISHED_RUNS]
    converted = [round(100 * run.model_flops_mfu, 1) for run in sim.PUBLISHED_RUNS]
    assert printed == [43, 41, 38, 52]
    assert converted == [45.2, 42.1, 53.8, 39.2]


def test_the_128k_run_under_both_readings_of_metas_count():
    """Counted causal at half (our assumption) the simulator is within 4 points (3.8 below it, with the
    all-gather exposed as Llama 3 says it was and the H100's measured GEMM efficiency); counted whole, as
    PaLM and torchtitan count, the published 38% would be far below the simulator's figure."""
    run = sim.search.published.LLAMA3_128K
    simulated = sim.simulate_published(run).mfu
    causal_half = run.model_flops_mfu
    whole = run.paper_tflops / sim.get_preset(run.preset).peak_flops
    assert abs(simulated - causal_half) < 0.04
    assert simulated - whole > 0.10
