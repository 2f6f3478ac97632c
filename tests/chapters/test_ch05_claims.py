"""What chapter 05's prose says after the 11-28 review, asserted: the 1F1B contract states a property, not
the warm-up count; interleaving's message count; no memory check switched off; no MFU range on a
configuration Table 4 lacks; the DualPipeV gap left open rather than explained the wrong way; the stage
boundary under sequence parallelism; the measured run read as hop- or compute-bound.

Each claim names its public source; a claim about torch is checked against the installed torch's source.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib import sim

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "05_pipeline_parallel" / "05_pipeline_parallel.ipynb"
TORCH = Path(torch.__file__).parent

SOURCES = {
    "pipedream_flush": "https://arxiv.org/abs/2006.09503",     # Narayanan et al. 2021, 1F1B (PipeDream-Flush)
    "megatron_2021": "https://arxiv.org/abs/2104.04473",       # interleaved 1F1B, section 2.2.2; 4.1
    "korthikanti": "https://arxiv.org/abs/2205.05198",         # sequence parallelism 4.2.2; recompute cost
    "llama3": "https://arxiv.org/abs/2407.21783",              # Table 4
    "dualpipe": "https://github.com/deepseek-ai/DualPipe",      # README, bubble and memory comparison
    "nccl_tuning": "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc",   # the h100 preset's hop
    "torch_pipelining": "https://pytorch.org/docs/stable/distributed.pipelining.html",
}


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def _index(grade_id: str) -> int:
    return next(i for i, c in enumerate(_cells())
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _code(start: str) -> str:
    return next(c.source for c in _cells() if c.cell_type == "code" and c.source.startswith(start))


def test_every_source_named_here_is_a_public_url():
    assert all(url.startswith("https://") for url in SOURCES.values())


def test_the_1f1b_contract_leaves_the_warm_up_to_be_reasoned():
    """Review ch05 #9: "stage s never holds more than p - s" and min(stages - s, microbatches) before the
    answer all but gave the warm-up count (p - s - 1); the contract now states the property."""
    before = _cells()[:_index("one_f_one_b")]
    text = " ".join(c.source for c in before)
    for giveaway in ("$p - s$", "p - s)", "\\min(\\text{stages} - s", "min(p - s, m)", "peak_activations}"):
        assert giveaway not in text, giveaway
    assert "stages after it need to stay busy" in text and "follow micro-batch 0 down the pipeline" in text
    # the bound the grader holds is still PipeDream-Flush's (the assert moved here from the lesson's cell)
    for p, m in ((4, 8), (4, 2), (6, 6), (1, 3)):
        held = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", p, m), 1.0, 2.0).peak_activations
        assert held == [min(p - s, m) for s in range(p)]


def test_interleaving_sends_vp_minus_1_over_p_minus_1_times_the_messages():
    """Review ch05 #6: (vp-1)/(p-1), 2.33 at v = 2 and 5 at v = 4 on 4 stages, not v times."""
    p, m = 4, 8
    counts = {}
    for kind, v in (("1f1b", 1), ("interleaved_1f1b", 2), ("interleaved_1f1b", 4)):
        timeline = sim.simulate_pipeline(sim.pipeline_schedule(kind, p, m, v), 1.0, 2.0, t_comm=0.3)
        counts[v] = sum(event.kind == "comm" for event in timeline.events())
    assert counts == {1: 2 * m * (p - 1), 2: 2 * m * (2 * p - 1), 4: 2 * m * (4 * p - 1)}
    assert counts == {1: 48, 2: 112, 4: 240}
    assert round(counts[2] / counts[1], 2) == 2.33 and counts[4] / counts[1] == 5
    text = " ".join(c.source for c in _cells())
    assert "Interleaving sends $v$ times as many messages" not in text
    assert "2.33 times at $v = 2$ and 5 times at $v = 4$" in text


def test_no_cell_switches_the_memory_check_off_and_every_section_4_run_fits():
    """Review ch05 #3: all six runs fit with the check on (it raises when a device does not)."""
    assert not any("check_memory=False" in c.source or '"check_memory": False' in c.source for c in _cells())
    cluster = sim.make_cluster(nodes=128, gpus_per_node=8, preset="h100")
    for kind, v in (("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 4)):
        for m in (16, 64):
            report = sim.simulate_training_step(sim.LLAMA3_405B, cluster, microbatches=m, schedule=kind,
                                                virtual_stages=v, tp=8, pp=16, dp=8, zero_stage=1,
                                                recompute="full", sequence_parallel=True)
            assert report.peak_memory < sim.H100.usable_memory


def test_no_mfu_range_from_table_4_on_a_configuration_it_does_not_have_and_the_recompute_cost_instead():
    """Review ch05 #2 and #11: the replays are the check; full recomputation costs one more forward."""
    cell = _code("for run in sim.PUBLISHED_RUNS[:2]:")
    assert "0.38 <= best.mfu <= 0.43" not in cell and "hardware_flops" in cell
    tokens = 8192
    extra = sim.hardware_flops(sim.LLAMA3_405B, tokens, "full") / sim.model_flops(sim.LLAMA3_405B, tokens)
    assert math.isclose(extra, 4 / 3)
    text = " ".join(c.source for c in _cells() if c.cell_type == "markdown")
    assert "the conversion is the attention FLOPs convention" in text


def test_the_dualpipev_gap_is_not_explained_by_overlap():
    """Review ch05 #5: overlap makes F&B < F + B, so the README's figure smaller; it cannot explain why the
    overlap-free simulator is below it. torch 2.13 ships the schedule and its OVERLAP_F_B action."""
    text = " ".join(c.source for c in _cells() if c.cell_type == "markdown")
    assert "whose point is the overlap inside" not in text and "overlap cannot explain it" in text
    p, chunk_f, chunk_b, chunk_w = 4, 0.5, 1.0, 0.5
    readme = (2 * p / 2 - 1) * ((chunk_f + chunk_b) + chunk_b - 3 * chunk_w)
    overlapped = (2 * p / 2 - 1) * (0.8 * (chunk_f + chunk_b) + chunk_b - 3 * chunk_w)
    assert overlapped < readme and (p - 1) * chunk_f < readme
    schedules = (TORCH / "distributed" / "pipelining" / "schedules.py").read_text()
    assert "class ScheduleDualPipeV(" in schedules and 'OVERLAP_F_B = "OVERLAP_F_B"' in schedules


def test_the_stage_boundary_under_sequence_parallelism_and_the_hop_from_the_preset():
    """Review ch05 #7 and #8: no all-gather at the boundary with sequence parallelism; NCCL's 14 us hop."""
    text = " ".join(c.source for c in _cells())
    assert "the receiving stage needs no all-gather" in text
    assert "Link(latency=5e-6" not in text and "link = sim.H100.inter_node" in text
    assert sim.H100.inter_node.latency == 14e-6 and sim.H100.inter_node.bandwidth == 50e9


def test_the_measured_pipeline_says_whether_it_is_hop_bound():
    """Review ch05 #4: the run was hop-bound (hop 3.5 ms, forward 0.8 ms) and read as compute-bound."""
    text = " ".join(c.source for c in _cells())
    assert "so that\ncompute, not Python, dominates each op" not in text
    reading = _code("trace = both.save_perfetto(")
    assert '"hop-bound" if hop > statistics.median(t_forward) * slowdown' in reading


def test_the_pipeline_is_predicted_from_parts_timed_apart_from_the_run_it_is_held_against():
    """Issue 39: the prediction no longer replays the run's own medians and hop; it takes each stage's ops
    timed alone and the calibrated machine, and prints where the time went, measured and predicted."""
    prediction = _code("machine = calibrate(world_size=2)")
    assert "stage_seconds_alone(split_into_stages(" in prediction
    assert ('predict_pipeline_step(machine, sim.Schedule("1f1b", STAGES, M, 1, ops), t_forward, '
            't_backward,') in prediction
    assert "median_time" not in " ".join(c.source for c in _cells())
    measuring = _code("WIDTH, ROWS, M = 512, 256, 8")
    assert "def timed_step(rank, world_size, ops, repeats=6):" in measuring
    assert "return steps[1:]" in measuring and "[len(timed) // 2]" in measuring
    assert 'for name, timeline in (("measured", measured), ("predicted", simulated)):' in _code(
        "trace = both.save_perfetto(")


def test_problem_b_with_flashattention_1f1b_misses_by_a_few_gb_not_by_hundreds():
    """Review ch05 #1: without stored scores (FlashAttention, https://arxiv.org/abs/2205.14135) 1F1B's stage
    0 is borderline; stored scores would multiply a layer's activations about fivefold."""
    model = sim.LLAMA3_405B
    per_layer = sim.activation_memory_per_layer(model, micro_batch=1, tp=8, sequence_parallel=True)
    unfused = sim.activation_memory_per_layer(model, micro_batch=1, tp=8, sequence_parallel=True,
                                              attention="unfused")
    first = sim.ends_lighter(model.layers, 16)[0]
    cluster = sim.make_cluster(nodes=128, gpus_per_node=8, preset="h100")
    report = sim.simulate_training_step(model, cluster, microbatches=64, schedule="1f1b", tp=8, pp=16, dp=8,
                                        zero_stage=1, recompute="full", sequence_parallel=True)
    state = report.memory_per_stage[0]
    states = state.parameters + state.gradients + state.optimizer_states + state.buffers
    over = 16 * first * per_layer + states - sim.H100.usable_memory
    assert 0 < over < 10e9                               # "1F1B by a few GB"
    assert unfused / per_layer > 4
    text = " ".join(c.source for c in _cells() if c.cell_type == "markdown")
    assert "1F1B by a few GB, which is why section" not in text     # the 12-07 review: the ladder instead


def test_problem_4b_cites_flashattention_for_the_scores_it_does_not_store():
    """FlashAttention's own paper says the s x s scores are never stored; Llama 3's section 3.3.2 does not
    name FlashAttention (the 12-07 review), so the problem no longer attributes it there."""
    [text] = [c.source for c in _cells()
              if c.cell_type == "markdown" and c.source.startswith("**(b)** Llama 3")]
    assert "https://arxiv.org/abs/2205.14135" in text and "no $s \\times s$ scores stored" in text
    assert "Llama 3 trained with it" not in text


def test_the_measured_step_is_read_by_the_run_not_by_the_prose():
    """The 12-07 review: "it printed 0.96 to 1.29 (eleven runs)" and "about 70 %" read other runs; the cell
    now prints the compute shares, measured and predicted, and says which reading this run supports."""
    cells = _cells()
    [run] = [c.source for c in cells if c.cell_type == "code" and "computing = {name:" in c.source]
    assert 'timeline.busy_time("compute") / (STAGES * timeline.makespan)' in run
    assert 'computing["predicted"] > computing["measured"] + 0.10' in run
    text = " ".join(c.source for c in cells if c.cell_type == "markdown")
    for stale in ("0.96 to 1.29", "eleven runs", "about 70 %", "In the runs that printed it"):
        assert stale not in text, stale


LADDER = dict(tp=8, pp=16, dp=8, microbatches=64, schedule="1f1b", sequence_parallel=True,
              recompute="selective", stage_layers=sim.ends_lighter(126, 16))


def _peaks(**change):
    return [d.total for d in sim.memory_per_device(sim.LLAMA3_405B, preset="h100", **{**LADDER, **change})]


def test_the_memory_ladder_climbs_zero_2_before_full_recomputation():
    """The 12-07 review (ch05 #1): full recomputation was taught as the way to fit 1F1B; ZeRO-2 on Llama 3's
    split fits, full recomputation leaves the most room and makes the slowest step (the cells print them)."""
    usable = sim.H100.usable_memory
    zero1, zero2, full = _peaks(zero_stage=1), _peaks(zero_stage=2), _peaks(zero_stage=2, recompute="full")
    assert max(zero1) > usable >= max(zero2) and max(full) < max(zero2)
    cluster = sim.make_cluster(nodes=128, gpus_per_node=8, preset="h100")
    step = {r: sim.simulate_training_step(sim.LLAMA3_405B, cluster, **{**LADDER, "zero_stage": 2,
                                                                        "recompute": r}).step_time
            for r in ("selective", "full")}
    assert step["full"] > step["selective"]
    # "with fused attention selective stores what no recomputation stores"
    assert _peaks(zero_stage=1, recompute="none") == zero1
    cells = _cells()
    ladder = _code("%%worked_answer\nusable, llama = sim.H100.usable_memory, sim.LLAMA3_405B")
    assert "sim.memory_per_device(llama" in ladder and "if fits else None" in ladder
    assert "check_memory" not in ladder
    [intro] = [c.source for c in cells if "**(b), continued: a memory ladder.**" in c.source]
    megatron = "https://docs.nvidia.com/nemo/megatron-bridge/latest/training/activation-recomputation.html"
    assert megatron in intro
    assert [c.source for c in cells].index(ladder) > _index("one_f_one_b")


def test_the_ladder_names_what_departs_from_table_4_and_section_3_why_it_recomputes_in_full():
    """Section 3 departs from Table 4 in four ways (the 12-07 review); GPipe with 64 micro-batches is what
    needs full recomputation there; the ladder's own departures from the replay are dp and the batch."""
    replayed = sim.PUBLISHED_RUNS[0]
    assert replayed.gpus == 8 * 1024 and replayed.layout["zero_stage"] == 2
    assert replayed.layout["recompute"] == "selective"
    assert replayed.layout["stage_layers"] == LADDER["stage_layers"]
    ours = {**LADDER, "zero_stage": 2, "global_batch": 8 * 64}
    departs = {k for k, v in replayed.layout.items() if ours.get(k, v) != v}
    assert departs == {"dp", "microbatches", "global_batch"}
    cluster = sim.make_cluster(nodes=128, gpus_per_node=8, preset="h100")
    for zero_stage, recompute in ((1, "selective"), (2, "selective")):
        with pytest.raises(sim.OutOfMemoryError):
            sim.simulate_training_step(sim.LLAMA3_405B, cluster, microbatches=64, schedule="gpipe", tp=8,
                                       pp=16, dp=8, zero_stage=zero_stage, recompute=recompute,
                                       sequence_parallel=True)
    [section] = [c.source for c in _cells() if c.source.startswith("## 3. A 405B-class")]
    for departure in ("an eighth of its 8,192 GPUs", "ZeRO-1 where its FSDP also", "16 equal stages",
                      "full recomputation, which the paper does not name", "GPipe with 64 micro-batches"):
        assert departure in section, departure


def test_nothing_before_part_1_draws_or_charts_the_1f1b_order():
    """The 12-07 review (ch05 #3): the per-stage peak chart, the 1F1B timeline and the explorer (which
    draws 1F1B's timeline for any size) came before part 1; they now follow it."""
    cells = _cells()
    before = " ".join(c.source for c in cells[:_index("one_f_one_b")])
    for giveaway in ("plot_timeline(timelines", "pipeline_explorer()", "ax.bar(", ".ops"):
        assert giveaway not in before, giveaway
    after = " ".join(c.source for c in cells[_index("one_f_one_b"):])
    assert "pipeline_explorer()" in after and "ax.bar(" in after
