"""course_lib.real.predict.predictions: the one line every predict-then-measure cell prints, and its lanes."""

from __future__ import annotations

import dataclasses

import pytest

from course_lib.real.predict.predictions import (
    Comparison,
    _parts_timeline,
    compare_ddp_step,
    compare_epochs,
    compare_timelines,
    predict_pipeline_step,
    predict_ring_attention,
)
from course_lib.sim import Link, Timeline, pipeline_schedule, simulate_pipeline
from course_lib.sim.cluster.laptop import Calibration, laptop_preset


def test_a_comparison_within_the_band_prints_one_line(capsys):
    Comparison("00", "one DDP step", 0.030, 0.025).report()
    expected = "prediction 00 one DDP step: measured 30 ms, predicted 25 ms, ratio 1.20\n"
    assert capsys.readouterr().out == expected


def test_outside_the_band_it_shows_where_the_time_went_lane_by_lane(capsys):
    parts = Timeline(["rank 0"])
    parts.add(0, 0.0, 0.02, "compute", "forward+backward")
    parts.add(0, 0.02, 0.05, "comm", "all-reduce")
    parts.add(0, 0.05, 0.06, "idle", "rest")
    comparison = Comparison("00", "one DDP step", 0.06, 0.025, parts=parts, details=["alone: ..."]).report()
    out = capsys.readouterr().out.splitlines()
    assert not comparison.within and comparison.ratio == pytest.approx(2.4)
    assert out[0].startswith("prediction 00 one DDP step: measured 60 ms") and "outside [0.67, 1.5]" in out[1]
    assert out[2] == "  rank 0: compute 20 ms, waiting 10 ms, transfer 30 ms" and out[3] == "  alone: ..."


def test_the_measured_step_is_split_into_its_measured_parts():
    # step, forward+backward (no_sync), update, all-reduce alone
    timeline = _parts_timeline([[0.10, 0.04, 0.01, 0.03], [0.04, 0.03, 0.01, 0.03]])
    rows = {e.label: e.end - e.start for e in timeline.events(0)}
    assert rows["forward+backward+update (no_sync)"] == pytest.approx(0.05)
    assert rows["gradient all-reduce"] == pytest.approx(0.03)
    assert rows["unaccounted: cores shared"] == pytest.approx(0.02)
    # rank 1 overlapped its all-reduce: only 0 ms of it shows beyond the compute
    rows = {e.label: e.end - e.start for e in timeline.events(1)}
    assert rows["gradient all-reduce"] == pytest.approx(0.0)
    assert rows["forward+backward+update (no_sync)"] == pytest.approx(0.04)


def test_a_recorded_layer_whose_span_wraps_its_all_to_alls_is_split_once(capsys):
    measured, simulated = Timeline(["rank 0"]), Timeline(["rank 0"])
    measured.add(0, 0.0, 0.010, "compute", "MoE layer forward + backward")
    measured.add(0, 0.002, 0.008, "comm", "all_to_all_single")
    simulated.add(0, 0.0, 0.004, "compute", "experts")
    comparison = compare_timelines("11", "leaning-router MoE layer", measured, simulated, overlap="transfer")
    comparison.report()
    out = capsys.readouterr().out.splitlines()
    assert comparison.ratio == pytest.approx(2.5)
    assert out[2] == "  rank 0: compute 4 ms, waiting 0 ms, transfer 6 ms"   # 10 ms, each counted once


def test_a_recorded_run_says_where_the_time_went_and_the_unrecorded_time_is_compared(capsys):
    measured, simulated = Timeline(["rank 0"]), Timeline(["rank 0"])
    measured.add(0, 0.0, 0.030, "compute", "block")          # recorded: the recorders' cost included
    simulated.add(0, 0.0, 0.005, "compute", "block")
    comparison = compare_timelines("10", "ring", measured, simulated, measured_seconds=0.012,
                                   details=["its products"])
    comparison.report()
    out = capsys.readouterr().out.splitlines()
    assert comparison.ratio == pytest.approx(2.4)            # 12 ms unrecorded against 5 ms, not 30 ms
    assert out[0] == "prediction 10 ring: measured 12 ms, predicted 5 ms, ratio 2.40"
    assert out[2] == "  rank 0: compute 30 ms, waiting 0 ms, transfer 0 ms"
    assert out[3:] == ["  the lanes are the recorded run's: 30 ms with the recorders' cost, against 12 ms "
                       "unrecorded", "  its products"]


def test_the_ring_attention_prediction_charges_the_shared_cores_and_the_crowded_step_to_each_block():
    cal = dataclasses.replace(Calibration(world_size=2, flops_alone=1e11, flops_together=1e11,
                                          collective=Link(5e-5, 1e9), point_to_point=Link(6e-5, 1e9),
                                          message_overhead=5e-5), crowded_ranks=4, crowded_step=1e-3)
    ring = predict_ring_attention(laptop_preset(cal), 4, block_seconds=2e-3, chunk_bytes=1e6)
    computes = [e.end - e.start for e in ring.events(0) if e.kind == "compute"]
    passes = [e.end - e.start for e in ring.events(0) if e.kind == "comm"]
    # 4 ranks on 2 cores: each block twice as long, and the crowded step on the rank's own time
    assert computes == pytest.approx([4e-3 + 1e-3] * 4)
    assert passes == pytest.approx([1e-3] * 3)            # 1 MB at 1 GB/s, under the next block
    assert ring.makespan == pytest.approx(4 * 5e-3)
    # with a core for each rank, the step costs the point-to-point latency
    alone = predict_ring_attention(laptop_preset(cal), 2, block_seconds=2e-3, chunk_bytes=1e6)
    blocks = [e.end - e.start for e in alone.events(0) if e.kind == "compute"]
    assert blocks == pytest.approx([2e-3 + 6e-5] * 2)


def test_the_pipeline_prediction_stretches_the_ops_alone_and_charges_the_crowded_hop():
    cal = dataclasses.replace(Calibration(world_size=2, flops_alone=1e11, flops_together=1e11,
                                          collective=Link(5e-5, 1e9), point_to_point=Link(6e-5, 1e9),
                                          message_overhead=5e-5), crowded_ranks=4, crowded_step=1e-3)
    schedule = pipeline_schedule("1f1b", 4, 8)
    step = predict_pipeline_step(laptop_preset(cal), schedule, [1e-3] * 4, [2e-3] * 4, activation_bytes=5e5)
    # 4 ranks on 2 cores: every op twice as long; a hop the crowded step plus 0.5 MB at 1 GB/s
    expected = simulate_pipeline(schedule, [2e-3] * 4, [4e-3] * 4, t_comm=1e-3 + 5e-4)
    assert step.makespan == pytest.approx(expected.makespan)
    # two stages, a core each: the ops as alone, the hop the point-to-point latency
    two = predict_pipeline_step(laptop_preset(cal), pipeline_schedule("1f1b", 2, 4), [1e-3] * 2, [2e-3] * 2,
                                activation_bytes=0)
    assert two.makespan == pytest.approx(simulate_pipeline(pipeline_schedule("1f1b", 2, 4), 1e-3, 2e-3,
                                                           t_comm=6e-5).makespan)
    with pytest.raises(ValueError, match="one time per stage"):
        predict_pipeline_step(laptop_preset(cal), schedule, [1e-3] * 3, [2e-3] * 4, activation_bytes=0)


def test_the_stages_are_timed_alone_forward_and_backward():
    from torch import nn

    from course_lib.real import stage_seconds_alone
    forward, backward = stage_seconds_alone([nn.Linear(64, 64), nn.Sequential(nn.Linear(64, 64), nn.ReLU())],
                                            (16, 64), repetitions=2)
    assert len(forward) == len(backward) == 2
    assert all(t > 0 for t in forward) and all(t >= 0 for t in backward)
    with pytest.raises(ValueError, match="modules"):
        stage_seconds_alone([], (16, 64))


def test_epochs_are_split_into_their_all_reduces_and_the_rest():
    comparison = compare_epochs("03", "epochs", {("ring", 128): (0.030, 0.010, 0.027, 0.008)})
    assert comparison.ratio == pytest.approx(3.0)
    assert comparison.details == ["('ring', 128): measured 30 ms, predicted 10 ms (ratio 3.00); all-reduces "
                                  "measured 27 ms, predicted 8 ms (ratio 3.38); the rest measured 3 ms, "
                                  "predicted 2 ms"]


@pytest.mark.slow
def test_a_small_real_ddp_comparison():
    cal = Calibration(world_size=2, flops_alone=5e10, flops_together=5e10, collective=Link(5e-5, 1e9),
                      point_to_point=Link(6e-5, 1e9), message_overhead=5e-5)
    comparison = compare_ddp_step("00", laptop_preset(cal), 2, (16, 32, 8), 8, repetitions=2, timeout=60)
    assert comparison.measured > 0 and comparison.predicted > 0 and len(comparison.parts.lanes) == 2
    assert comparison.line.startswith("prediction 00 one DDP step: measured ")
