"""What chapter 00's prose says, asserted (the 11-28 review's findings for the chapter, issue 41): the
teaching simulator it borrows from, named; what caps the ring's speed-up in the toy run, both terms;
NVLink's 450 GB/s as one direction's line rate beside what NCCL measures; ZeRO's traffic; the gloo
paragraph without an unsourced threshold; the prediction and the DDP step measured in calibrate()'s
harness, their parts measured."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import pytest

from course_lib import sim
from course_lib.sim import H100, seed_1d, simulated_gpus
from course_lib.sim.cluster import presets
from course_lib.sim.cluster.presets import NCCL_MEASURED_BUSBW

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "00_orientation" / "00_orientation.ipynb"
SEED_REPOSITORY = "https://github.com/james-p-xu/4d-parallelism"
NVLINK_ISSUE = "https://github.com/NVIDIA/nccl-tests/issues/212"


def _cells() -> dict[str, str]:
    return {cell["id"]: "".join(cell["source"]) for cell in json.loads(NOTEBOOK.read_text())["cells"]}


def test_the_teaching_simulator_is_named_and_its_constants_are_its_gpu_pys():
    """Finding 4: the source of the three calls and their constants, named. The cited gpu.py sets
    SECONDS_PER_COMPUTE_UNIT = 0.1, NETWORK_BASE_LATENCY_SECONDS = 0.05, SECONDS_PER_DATA_UNIT = 0.01."""
    gpu = simulated_gpus(1)[0]
    assert (gpu.seconds_per_compute_unit, gpu.network_base_latency_seconds, gpu.seconds_per_data_unit) == (
        0.1, 0.05, 0.01)
    text = _cells()["sim-md"]
    assert SEED_REPOSITORY in text
    for constant in ("SECONDS_PER_COMPUTE_UNIT = 0.1", "NETWORK_BASE_LATENCY_SECONDS = 0.05",
                     "SECONDS_PER_DATA_UNIT = 0.01"):
        assert constant in text


def _ring_parts(n: int) -> tuple[float, float, float]:
    """Compute, latency and bandwidth of the toy ring's step on n devices (16 items of 20 units, S=100)."""
    return 16 // n * 20 * 0.1, 2 * (n - 1) * 2 * 0.05, 2 * (n - 1) * 100 / n * 0.01


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_the_toy_rings_step_is_its_compute_latency_and_bandwidth_terms(n):
    assert math.isclose(sum(_ring_parts(n)), seed_1d(n, ring="correct")[0])


def test_both_terms_cap_the_rings_speed_up_bandwidth_first_then_latency():
    """Finding 1: not the latency alone. On 8 devices the bandwidth term is the larger (1.4 s of latency
    against 1.75 s), on 16 the latency (3.0 s against 1.88 s); the bandwidth term never shrinks."""
    (_, latency_8, bandwidth_8), (_, latency_16, bandwidth_16) = _ring_parts(8), _ring_parts(16)
    assert (round(latency_8, 2), round(bandwidth_8, 2)) == (1.4, 1.75) and latency_8 < bandwidth_8
    assert (round(latency_16, 2), round(bandwidth_16, 2)) == (3.0, 1.88) and latency_16 > bandwidth_16
    assert [round(_ring_parts(n)[2], 3) for n in (2, 4, 8, 16)] == [1.0, 1.5, 1.75, 1.875]   # towards 2S
    text = _cells()["speedup-after"]
    assert "pays the latency again" not in text
    for number in ("1.75 s on 8", "1.88 s on 16", "1.4 s on 8", "3.0 s on 16"):
        assert number in text
    assert "seed_ring_parts" in _cells()["speedup"]          # the cell prints both terms per N


def test_nvlinks_450_gb_s_is_one_directions_line_rate_and_nccl_measures_370():
    """Finding 5: the preset's B is the line rate, 900 GB/s per GPU halved for one direction; NCCL's
    measured ring bus bandwidth (nccl-tests#212) printed beside it."""
    assert H100.intra_node.bandwidth == 900e9 / 2 == 450e9
    assert NCCL_MEASURED_BUSBW["h100_nvlink_ring"] == 370e9
    source = inspect.getsource(presets)
    assert "450GB/s is the line rate" in source and "NVIDIA/nccl-tests#212" in source
    text = _cells()["alpha-beta-md"]
    assert NVLINK_ISSUE in text and "line rate in one direction" in text and "900 GB/s" in text
    assert "NCCL_MEASURED_BUSBW" in _cells()["alpha-beta-check"]


def test_zero_1_and_2_move_plain_data_parallels_bytes_and_zero_3_half_as_many_again():
    """Finding 6 is right (ZeRO, section 7.2: 2 psi for stages 0-2, 3 psi for stage 3); the sentence stays,
    with chapter 07 named for the measurement."""
    sent = [sum(sim.zero_traffic_per_device(1e9, 64, stage).values()) for stage in range(4)]
    assert sent[0] == sent[1] == sent[2] and sent[3] == pytest.approx(1.5 * sent[0])
    assert "ZeRO-3\nmoves half as many again" in _cells()["regimes-after"]


def test_the_gloo_paragraph_states_no_unsourced_threshold():
    """Finding 7: chapter 00 no longer reasons with the 75% CPU share (a course assumption without a
    source); calibrate() picks the segments in flight from its all-reduce fit, and the chapter points to
    chapter 02's section 6 for gloo's segments."""
    from course_lib.real.measure import calibration

    text = _cells()["measure-md"]
    assert "75" not in text and "RANKS_AT_ONCE_SHARE" not in text and "chapter 02" in text
    assert "one or two in flight, whichever fits better" in inspect.getsource(calibration.calibrate)


def test_the_prediction_and_the_ddp_step_are_measured_in_calibrates_harness_with_their_parts():
    """Findings 2 and 3, fixed before this test: the sweep is re-measured by measure_all_reduce, the
    harness calibrate() fits (not another statistic or block); the DDP step's gap is split into measured
    parts (backward under no_sync, the update, one all-reduce alone). Finding 8's cache sentence is gone."""
    from course_lib.real.measure import calibration
    from course_lib.real.predict import predictions

    assert "measure_all_reduce(world_size, sizes" in inspect.getsource(predictions.compare_all_reduce)
    assert "One harness measures here and in every measuring cell" in inspect.getsource(calibration.calibrate)
    parts = inspect.getsource(predictions._ddp_parts)
    for part in ("model.no_sync()", "optimizer.step()", "dist.all_reduce(gradients)"):
        assert part in parts
    assert "caches stop helping" not in "\n".join(_cells().values())


def test_the_ddp_reading_names_its_additive_assumption_and_reads_the_overlap_off_the_run():
    """The 12-07 review: "the two kinds of work add up" was stated as a law (the roofline charges a matmul
    the larger, not the sum), and "the overlap is partly wishful" where the printed lanes showed none."""
    text = " ".join(" ".join(_cells().values()).split())
    assert "the two kinds of work add up" not in text and "overlap is partly wishful" not in text
    assert "The model adds the two kinds of work" in text and "an assumption" in text
    assert "means none in this run" in text
