"""calibrate(): the alpha-beta fit, the preset it builds, and one small real measurement."""

from __future__ import annotations

import pytest

from course_lib.real import GLOO_SEGMENT_BYTES, calibrate, measure_all_reduce, predict_all_reduce
from course_lib.real.measure.calibration import fit_beta
from course_lib.sim import HardwarePreset, Link, collective_time, laptop_preset, make_cluster

SIZES = (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24)
LINK, PING = Link(latency=2e-4, bandwidth=1e9), Link(latency=5e-5, bandwidth=2.5e9)


def gloo_ring(link, n, world_size=2, in_flight=2):
    return collective_time("all_reduce", n, world_size, link, segment_bytes=GLOO_SEGMENT_BYTES,
                           in_flight=in_flight)


def synthetic(world_size=2, in_flight=2, ping=PING, overhead=4e-5, alone=1e-3, together=2e-3,
              cpu_share=0.99) -> dict:
    """What measure() returns, made from known links and blocks."""
    return {"sizes": SIZES, "all_reduce": [gloo_ring(LINK, n, world_size, in_flight) for n in SIZES],
            "ping_pong": [ping.transfer_time(n) for n in SIZES], "message_blocks": [32 * overhead],
            "messages_per_block": 32, "compute_alone": [alone] * 5,
            "compute_together": [[together] * 5] * world_size, "block_flops": 1e8, "cpu_share": cpu_share}


def test_fit_beta_recovers_the_slope_of_exact_data():
    assert fit_beta(SIZES, [3e-4 + n * 2e-9 for n in SIZES], 3e-4) == pytest.approx(2e-9)
    assert fit_beta(SIZES, [1e-3] * 6, 2e-3) > 0  # never a negative or zero slope
    with pytest.raises(ValueError, match="equal length"):
        fit_beta(SIZES, [1.0], 0.0)


def test_the_preset_is_the_calibrated_machine():
    preset = calibrate(4, measurements=synthetic(world_size=4))
    assert isinstance(preset, HardwarePreset) and "4 gloo ranks" in preset.name
    assert preset.intra_node.latency == pytest.approx(2e-4, rel=0.02)
    assert preset.intra_node.bandwidth == pytest.approx(1e9, rel=0.02)
    assert preset.inter_node == preset.intra_node
    cal = preset.calibration
    assert cal.flops_alone == pytest.approx(1e11) and cal.cores == pytest.approx(2.0)
    assert preset.flops == pytest.approx(5e10)        # 4 ranks on 2 cores: each at half speed
    assert cal.point_to_point.latency == pytest.approx(5e-5, rel=0.02)
    assert cal.message_overhead == pytest.approx(4e-5)
    assert laptop_preset(cal, 2).flops == pytest.approx(1e11)
    assert cal.crowded_step is None                 # not measured in these figures: nothing invented


def test_the_crowded_ring_is_fitted_per_step_from_its_recorded_blocks():
    data = dict(synthetic(), crowded_ranks=4, crowded_steps=48,
                crowded_blocks=[48 * seconds for seconds in (6e-4, 5e-4, 9e-3, 6e-4, 7e-4)])
    cal = calibrate(2, measurements=data).calibration
    assert cal.crowded_ranks == 4 and cal.crowded_step == pytest.approx(6e-4)
    assert cal.crowded_release is None              # the dropped handles not measured: nothing invented
    data["crowded_dropped_blocks"] = [48 * seconds for seconds in (2.4e-3, 2.3e-3, 2.5e-3)]
    assert calibrate(2, measurements=data).calibration.crowded_release == pytest.approx(1.8e-3)


def test_the_preset_drives_the_simulator_as_gloo_cuts_its_ring():
    preset = calibrate(2, measurements=synthetic())
    for n in SIZES:    # the fitted all-reduce, re-predicted, comes out where it was measured
        assert predict_all_reduce(preset, n, 2) / gloo_ring(LINK, n) == pytest.approx(1, abs=0.03)
    assert make_cluster(1, 2, preset=preset) is not None


@pytest.mark.parametrize("in_flight", [1, 2])
def test_segments_in_flight_are_read_off_the_all_reduce(in_flight):
    preset = calibrate(4, measurements=synthetic(world_size=4, in_flight=in_flight))
    assert preset.segments_in_flight == in_flight
    assert f"({in_flight} segment(s) in flight)" in preset.source


def test_one_rank_cannot_measure_a_link():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        calibrate(1)


def test_a_small_real_calibration_and_all_reduce_measurement():
    preset = calibrate(2, sizes=(1 << 14, 1 << 16), repetitions=2)
    assert preset.intra_node.latency > 0 and 1e6 < preset.intra_node.bandwidth < 1e12
    assert 1e7 < preset.flops < 1e13 and preset.segments_in_flight in (1, 2)
    cal = preset.calibration
    assert 0 < cal.cores <= 2 and cal.message_overhead > 0 and cal.point_to_point.latency > 0
    assert cal.crowded_ranks == 4 and cal.crowded_step > 0 and cal.crowded_release >= 0
    times = measure_all_reduce(2, (1 << 12, 1 << 16), repetitions=2)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_calibrate_is_the_function_by_every_import_path():
    import importlib

    import course_lib.real as package
    from course_lib.real.measure.calibration import calibrate as from_module

    old_package = importlib.import_module("course_lib.dist")   # a stand-in, not a folder: see moved_modules

    with pytest.warns(FutureWarning, match="course_lib.dist.calibrate moved to course_lib.real.measure"):
        from course_lib.dist.calibrate import calibrate as by_the_old_module_path
    with pytest.warns(FutureWarning, match="course_lib.dist moved to course_lib.real"):
        by_the_old_package = old_package.calibrate
    assert from_module is by_the_old_module_path is by_the_old_package is calibrate is package.calibrate
    assert callable(calibrate)


def _counting_all_reduce(tensor):
    """A contestant for measure_all_reduce, defined here: gloo's all-reduce, called by our function."""
    import torch.distributed as dist

    dist.all_reduce(tensor)
    return tensor


def test_measure_all_reduce_times_a_contestant_of_ours():
    seconds = measure_all_reduce(2, [1 << 12], repetitions=1, all_reduce=_counting_all_reduce, timeout=60)
    assert len(seconds) == 1 and 0 < seconds[0] < 5


def test_measure_all_reduce_refuses_a_contestant_that_is_not_a_function():
    with pytest.raises(ValueError, match="all_reduce must be a function"):
        measure_all_reduce(2, [1 << 12], all_reduce="gloo")
