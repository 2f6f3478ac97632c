"""One model of gloo's all-reduce on the calibrated machine (issue 52): every laptop prediction of a gloo
collective (chapter 00's DDP step, chapter 03's simulated step and torch ring, the all-reduce sweeps of
chapters 00 and 02, a cluster built on the preset) is the segmented ring ``calibrate()`` fitted, never
the textbook ring."""

from __future__ import annotations

import pytest

from course_lib.real import predict_all_reduce
from course_lib.real.measure.calibration import GLOO_SEGMENT_BYTES
from course_lib.real.predict.predictions import FLOAT32_SGD, predict_ddp_step, predict_python_all_reduce
from course_lib.sim import H100, Link, MLPSpec, collective_time, make_cluster, simulate_training_step
from course_lib.sim.cluster.laptop import Calibration, laptop_preset
from course_lib.sim.collectives import cost
from course_lib.sim.step import costs as step_costs

WIDTHS, BATCH = (1024, 2048, 2048, 1024), 64          # chapter 00's wide MLP: 33.6 MB in two buckets
LINK = Link(latency=317e-6, bandwidth=1.95e9)          # the review's calibration (2026-12-07, ch00 #1)


def machine(in_flight: int):
    """A calibrated 2-rank laptop preset, its all-reduce fitted with ``in_flight`` segments in flight."""
    calibration = Calibration(world_size=2, flops_alone=40e9, flops_together=22e9, collective=LINK,
                              point_to_point=Link(150e-6, 1.5e9), message_overhead=20e-6,
                              segments_in_flight=in_flight, bandwidth_alone=8e9, bandwidth_together=5e9,
                              crowded_ranks=4, crowded_step=1e-3, crowded_release=0.3e-3)
    return laptop_preset(calibration)


def laptop_predictions(preset) -> None:
    """Every way a chapter predicts a gloo collective on the calibrated machine."""
    predict_ddp_step(preset, 2, WIDTHS, BATCH)                                          # chapter 00
    simulate_training_step(MLPSpec((512,) * 5), make_cluster(1, 2, preset=preset), dp=2,   # chapter 03
                           global_batch=64, bucket_bytes=2 << 20, first_bucket_bytes=2 << 20, **FLOAT32_SGD)
    for zero_stage in (1, 2, 3):                        # the ZeRO group's collectives, on the same preset
        simulate_training_step(MLPSpec((512,) * 5), make_cluster(1, 2, preset=preset), dp=2,
                               zero_stage=zero_stage, global_batch=64, **FLOAT32_SGD)
    predict_all_reduce(preset, 1 << 20, 2)                                              # chapters 00, 02
    predict_python_all_reduce(preset, 1 << 20, 4, "ring", "torch's dist.all_reduce")    # chapter 03
    make_cluster(1, 2, preset=preset).collective_time("all_reduce", 1 << 20, range(2))


@pytest.mark.parametrize("in_flight", [1, 2])
def test_no_laptop_prediction_calls_the_textbook_ring(monkeypatch, in_flight):
    def textbook_ring(*args):
        raise AssertionError("a laptop prediction of a gloo collective used the textbook ring")

    monkeypatch.setattr(cost, "_ring", textbook_ring)
    laptop_predictions(machine(in_flight))


@pytest.mark.parametrize("in_flight", [1, 2])
def test_the_ddp_steps_all_reduces_are_the_calibrated_segmented_ring(monkeypatch, in_flight):
    preset, asked = machine(in_flight), []

    def recorded(op, nbytes, world_size, link, algorithm="nccl", **options):
        asked.append((op, nbytes, options))
        return collective_time(op, nbytes, world_size, link, algorithm, **options)

    monkeypatch.setattr(step_costs, "collective_time", recorded)
    step = predict_ddp_step(preset, 2, WIDTHS, BATCH)
    buckets = [nbytes for op, nbytes, _ in asked if op == "all_reduce"]
    assert sum(buckets) == pytest.approx(4 * MLPSpec(WIDTHS).num_params)     # every gradient, once
    assert all(options == {"segment_bytes": GLOO_SEGMENT_BYTES, "in_flight": in_flight}
               for _, _, options in asked)
    comm = sum(e.end - e.start for e in step.timeline.events(0) if e.kind == "comm")
    assert comm == pytest.approx(sum(predict_all_reduce(preset, b, 2) for b in buckets))
    textbook = sum(collective_time("all_reduce", b, 2, LINK, "ring") for b in buckets)
    assert comm > textbook                 # the segments' latencies: 28.0 against 18.5 ms at one in flight


def test_a_data_sheet_preset_and_an_algorithm_by_name_keep_the_closed_forms():
    assert H100.ring_options("all_reduce") == {}
    laptop = machine(2)
    assert laptop.ring_options("all_reduce", "tree") == {} and laptop.ring_options("all_to_all") == {}
    assert laptop.ring_options("all_reduce") == {"segment_bytes": GLOO_SEGMENT_BYTES, "in_flight": 2}
