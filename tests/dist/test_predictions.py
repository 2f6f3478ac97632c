"""course_lib.dist.predictions: the one line every predict-then-measure cell prints, and its lanes."""

from __future__ import annotations

import pytest

from course_lib.dist.predictions import Comparison, _parts_timeline, compare_ddp_step
from course_lib.sim import Link, Timeline
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


@pytest.mark.slow
def test_a_small_real_ddp_comparison():
    cal = Calibration(world_size=2, flops_alone=5e10, flops_together=5e10, collective=Link(5e-5, 1e9),
                      point_to_point=Link(6e-5, 1e9), message_overhead=5e-5)
    comparison = compare_ddp_step("00", laptop_preset(cal), 2, (16, 32, 8), 8, repetitions=2, timeout=60)
    assert comparison.measured > 0 and comparison.predicted > 0 and len(comparison.parts.lanes) == 2
    assert comparison.line.startswith("prediction 00 one DDP step: measured ")
