"""calibrate(): the alpha-beta fit, the preset it builds, and one small real measurement."""

from __future__ import annotations

import pytest

from course_lib.dist import GLOO_SEGMENT_BYTES, calibrate, measure_all_reduce, predict_all_reduce
from course_lib.dist.calibration import fit_beta
from course_lib.sim import HardwarePreset, collective_time, make_cluster

SIZES = (1 << 18, 1 << 20, 1 << 22)


def synthetic(alpha=2e-4, beta=1e-9, reduce=5e-10, ping_alpha=5e-5, ping_beta=4e-10, flops=5e10,
              cpu_share=0.99) -> dict:
    return {"sizes": SIZES, "ring": [alpha + n * beta for n in SIZES], "ring_latency": alpha,
            "ping_pong": [ping_alpha + n * ping_beta for n in SIZES], "ping_pong_latency": ping_alpha,
            "reduce": reduce, "flops": flops, "cpu_share": cpu_share}


def test_fit_beta_recovers_the_slope_of_exact_data():
    assert fit_beta(SIZES, [3e-4 + n * 2e-9 for n in SIZES], 3e-4) == pytest.approx(2e-9)
    assert fit_beta(SIZES, [1e-3] * 3, 2e-3) > 0  # never a negative or zero slope
    with pytest.raises(ValueError, match="equal length"):
        fit_beta(SIZES, [1.0], 0.0)


def test_the_preset_is_the_fitted_ring_link():
    preset = calibrate(4, measurements=synthetic())
    assert isinstance(preset, HardwarePreset) and "4 gloo ranks" in preset.name
    assert preset.intra_node.latency == pytest.approx(2e-4)
    assert preset.intra_node.bandwidth == pytest.approx(1e9)
    assert preset.inter_node == preset.intra_node and preset.flops == 5e10
    assert "ping-pong gives alpha=5e-05 s, 2.5 GB/s" in preset.source and "addition 2 GB/s" in preset.source


def test_the_preset_drives_the_simulator_as_gloo_cuts_its_ring():
    preset = calibrate(2, measurements=synthetic())
    # 1 MiB on 2 ranks: 4 segments of 256 KiB (two per chunk), 2 of them travel in each of 2 phases;
    # both start a phase, so both pay the latency
    expected = 4 * (2e-4 + (1 << 18) * 1e-9)
    assert predict_all_reduce(preset, 1 << 20, 2) == pytest.approx(expected)
    # 64 MiB: 64 segments of 1 MiB, 32 per phase; after the first two, each costs its transfer only
    segment = (1 << 20) * 1e-9
    assert predict_all_reduce(preset, 64 << 20, 2) == pytest.approx(2 * (2 * (2e-4 + segment) + 30 * segment))
    assert predict_all_reduce(preset, 64 << 20, 2) == pytest.approx(collective_time(
        "all_reduce", 64 << 20, 2, preset.intra_node, segment_bytes=GLOO_SEGMENT_BYTES, in_flight=2))
    assert make_cluster(1, 2, preset=preset) is not None


@pytest.mark.parametrize("cpu_share, in_flight", [(0.99, 2), (0.75, 2), (0.49, 1)])
def test_segments_overlap_only_when_the_ranks_run_at_once(cpu_share, in_flight):
    preset = calibrate(4, measurements=synthetic(cpu_share=cpu_share))
    assert preset.segments_in_flight == in_flight
    assert f"{cpu_share:.0%} of the time, so {in_flight} segment(s) in flight" in preset.source


def test_one_rank_cannot_measure_a_link():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        calibrate(1)


def test_a_small_real_calibration_and_all_reduce_measurement():
    preset = calibrate(2, sizes=(1 << 14, 1 << 16), repetitions=2)
    assert preset.intra_node.latency > 0 and 1e6 < preset.intra_node.bandwidth < 1e12
    assert 1e7 < preset.flops < 1e13 and preset.segments_in_flight in (1, 2)
    times = measure_all_reduce(2, (1 << 12, 1 << 16), repetitions=2)
    assert len(times) == 2 and all(t > 0 for t in times)


def test_calibrate_is_the_function_by_both_import_paths():
    from course_lib.dist.calibrate import calibrate as by_the_old_path

    import course_lib.dist as dist_package
    from course_lib.dist.calibration import calibrate as from_module

    assert from_module is by_the_old_path is calibrate is dist_package.calibrate and callable(calibrate)


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
