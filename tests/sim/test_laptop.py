"""The laptop as a simulated cluster: its model's parts held on recorded timelines, not on the clock."""

from __future__ import annotations

import dataclasses

import pytest

from course_lib.sim import Link, Timeline, collective_time, make_cluster
from course_lib.sim.cluster.laptop import (
    Calibration,
    compute_slowdown,
    fit_cores,
    fit_crowded_release,
    fit_crowded_step,
    fit_link,
    fit_message_overhead,
    lane_breakdown,
    laptop_preset,
    prediction_line,
    python_all_reduce_time,
    python_hop_time,
    python_message_time,
    python_release_time,
    shared_core_finish_times,
    stream_slowdown,
    within,
)

BLOCK_FLOPS = 2e8


def recorded(lanes: list[list[float]], kind: str = "compute", meta=None) -> Timeline:
    """Durations as a recorded timeline: one lane per process, spans back to back."""
    timeline = Timeline([f"process {i}" for i in range(len(lanes))])
    for lane, durations in enumerate(lanes):
        clock = 0.0
        for seconds in durations:
            timeline.add(lane, clock, clock + seconds, kind, "block", meta)
            clock += seconds
    return timeline


def calibration(world_size=2, flops_alone=1e11, cores=2.0, overhead=5e-5) -> Calibration:
    return Calibration(world_size=world_size, flops_alone=flops_alone,
                       flops_together=flops_alone * min(cores, world_size) / world_size,
                       collective=Link(4e-5, 1.5e9), point_to_point=Link(6e-5, 2.5e9),
                       message_overhead=overhead, segments_in_flight=2, memory_bytes=16e9)


def test_cores_are_read_off_the_same_block_alone_and_on_concurrent_processes():
    alone = recorded([[2e-3, 2.1e-3, 1.9e-3]])
    # 4 processes on 2 cores: each block takes twice as long
    assert fit_cores(alone, recorded([[4e-3] * 3] * 4)) == pytest.approx(2.0)
    # 2 processes on 2 free cores: as fast as alone; never more cores than processes
    assert fit_cores(alone, recorded([[2e-3] * 3, [1.9e-3] * 3])) == pytest.approx(2.0)
    # the slowest lane counts: one process that got less of a core
    assert fit_cores(alone, recorded([[2e-3] * 3, [4e-3] * 3])) == pytest.approx(1.0)


def test_compute_is_slowed_when_ranks_outnumber_the_measured_cores():
    cal = calibration(world_size=2, cores=2.0)
    assert compute_slowdown(cal, 1) == 1.0 and compute_slowdown(cal, 2) == pytest.approx(1.0)
    assert compute_slowdown(cal, 4) == pytest.approx(2.0) and compute_slowdown(cal, 3) == pytest.approx(1.5)
    # under load the calibration saw fewer cores: the slowdown measured there is the one used
    loaded = calibration(world_size=2, cores=1.25)
    assert compute_slowdown(loaded, 2) == pytest.approx(1.6)
    assert compute_slowdown(loaded, 4) == pytest.approx(3.2)


def test_the_laptop_preset_predicts_the_recorded_block_on_four_processes():
    cal = calibration(world_size=2, cores=2.0)
    # what 4 processes on 2 cores record: each block twice its time alone
    alone_seconds = BLOCK_FLOPS / cal.flops_alone
    together = recorded([[2 * alone_seconds] * 5] * 4)
    preset = laptop_preset(cal, ranks=4)
    assert BLOCK_FLOPS / preset.flops == pytest.approx(together.lanes[0][0].seconds)
    assert preset.calibration is cal and "4 gloo ranks" in preset.name
    assert preset.intra_node == cal.collective and preset.segments_in_flight == 2
    assert laptop_preset(cal).flops == pytest.approx(cal.flops_alone)   # 2 ranks on 2 cores
    assert make_cluster(1, 4, preset=preset) is not None


def test_the_per_message_cost_is_read_off_blocks_of_messages():
    blocks = recorded([[32 * 5e-5, 32 * 6e-5, 32 * 5e-5]], kind="comm", meta={"messages": 32})
    assert fit_message_overhead(blocks) == pytest.approx(5e-5)
    with pytest.raises(ValueError, match="comm spans"):
        fit_message_overhead(recorded([[1e-3]]))


def test_a_python_message_pays_the_point_to_point_link_not_the_collectives():
    cal = calibration()
    assert python_message_time(cal, 0) == pytest.approx(6e-5)
    assert python_message_time(cal, 2.5e6) == pytest.approx(6e-5 + 1e-3)
    assert cal.point_to_point.latency != cal.collective.latency


def test_the_crowded_step_is_the_median_block_of_ring_steps_per_step():
    # blocks of 48 ring steps recorded at calibration: one block caught a burst of other load, and the
    # median (as for every calibrated quantity, and chapter 03's median epoch) passes it by
    per_step = [6e-4, 5e-4, 4e-3, 6e-4, 7e-4]
    blocks = recorded([[48 * seconds for seconds in per_step]], kind="comm", meta={"steps": 48})
    assert fit_crowded_step(blocks) == pytest.approx(6e-4)
    with pytest.raises(ValueError, match="comm spans"):
        fit_crowded_step(recorded([[1e-3]]))


def test_fit_link_recovers_a_segmented_ring_exactly():
    truth = Link(latency=7e-5, bandwidth=1.3e9)

    def model(link, n):
        return collective_time("all_reduce", n, 2, link, segment_bytes=1 << 20, in_flight=2)

    sizes = [1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24]
    fitted = fit_link(sizes, [model(truth, n) for n in sizes], model)
    assert fitted.latency == pytest.approx(truth.latency, rel=0.02)
    assert fitted.bandwidth == pytest.approx(truth.bandwidth, rel=0.02)
    for n in sizes:   # the fitted quantity, re-predicted, comes out at 1
        assert model(fitted, n) / model(truth, n) == pytest.approx(1, abs=0.02)


def test_the_prediction_line_and_the_lane_breakdown():
    assert prediction_line("00", "one DDP step", 0.03, 0.025) == (
        "prediction 00 one DDP step: measured 30 ms, predicted 25 ms, ratio 1.20")
    assert within(1.2) and within(0.67) and not within(1.51) and not within(0.5)
    timeline = Timeline(["rank 0", "rank 1"])
    timeline.add(0, 0.0, 2.0, "compute", "forward")
    timeline.add(0, 2.0, 3.0, "comm", "all-reduce")
    timeline.add(1, 0.0, 1.0, "compute", "forward")
    timeline.add(1, 1.0, 2.0, "idle", "wait")
    timeline.add(1, 2.0, 3.0, "comm", "all-reduce")
    rows = lane_breakdown(timeline)
    assert rows[0] == {"lane": "rank 0", "compute": 2.0, "transfer": 1.0, "waiting": 0.0}
    assert rows[1] == {"lane": "rank 1", "compute": 1.0, "transfer": 1.0, "waiting": 1.0}


def test_the_lanes_count_each_second_once_whoever_owns_an_overlap():
    # chapter 11's recorded layer: one compute span wraps the whole forward + backward, and the
    # all-to-alls it calls lie inside it; a lane that sat in them 3 of its 5 ms computed 2 ms
    timeline = Timeline(["rank 0", "rank 1"])
    timeline.add(0, 0.0, 5.0, "compute", "MoE layer forward + backward")
    for start in (1.0, 2.5, 4.0):
        timeline.add(0, start, start + 1.0, "comm", "all_to_all_single")
    timeline.add(1, 0.0, 4.0, "compute", "MoE layer forward + backward")
    timeline.add(1, 1.0, 3.0, "comm", "all_to_all_single")
    rows = lane_breakdown(timeline, overlap="transfer")
    assert rows[0] == {"lane": "rank 0", "compute": 2.0, "transfer": 3.0, "waiting": 0.0}
    assert rows[1] == {"lane": "rank 1", "compute": 2.0, "transfer": 2.0, "waiting": 1.0}
    # chapter 10's ring: a transfer posted before a block and waited after it is hidden by the block;
    # only what shows beyond the compute counts as transfer
    ring = Timeline(["rank 0"])
    ring.add(0, 0.0, 3.0, "comm", "isend->1")
    ring.add(0, 0.5, 2.5, "compute", "block")
    ring.add(0, 3.0, 4.0, "compute", "block")
    assert lane_breakdown(ring) == [{"lane": "rank 0", "compute": 3.0, "transfer": 1.0, "waiting": 0.0}]
    for rows in (lane_breakdown(timeline, "transfer"), lane_breakdown(ring)):
        for row in rows:    # the lanes sum to the makespan, never beyond it
            assert row["compute"] + row["transfer"] + row["waiting"] <= 5.0 + 1e-12
    with pytest.raises(ValueError, match="overlap"):
        lane_breakdown(ring, overlap="both")


def test_cores_never_exceed_the_ranks_measured():
    cal = dataclasses.replace(calibration(), flops_together=2e11)   # faster together: noise, not cores
    assert cal.cores == 2.0


def test_a_python_all_reduce_pays_latency_per_ring_step_and_the_message_cost_where_messages_queue():
    cal = calibration(world_size=2, cores=2.0, overhead=5e-5)     # point to point: 60 us, 2.5 GB/s
    # 2 ranks on 2 cores: the ring's 2 steps each pay the latency and half the bytes
    assert python_all_reduce_time(cal, 2.5e6, 2) == pytest.approx(2 * (6e-5 + 0.5e-3))
    # 4 ranks on 2 cores: each latency waits for a core too (stretched 2x)
    assert python_all_reduce_time(cal, 0, 4) == pytest.approx(6 * 2 * 6e-5)
    # through rank 0 on 3 ranks, each with a core: one latency per phase, the other message already
    # queued costs 50 us
    three = dataclasses.replace(cal, world_size=3, flops_together=cal.flops_alone)
    assert python_all_reduce_time(three, 0, 3, "parameter_server") == pytest.approx(2 * (6e-5 + 5e-5))
    # 4 ranks on 2 cores: the senders do not run at once, so each of rank 0's 6 messages waits a hop
    assert python_all_reduce_time(cal, 0, 4, "parameter_server") == pytest.approx(6 * 2 * 6e-5)
    assert python_all_reduce_time(cal, 1e9, 1) == 0.0
    with pytest.raises(ValueError, match="ring"):
        python_all_reduce_time(cal, 1, 2, "tree")


def test_memory_bandwidth_is_shared_as_measured_and_beyond_it_by_rank_count():
    cal = dataclasses.replace(calibration(world_size=2), bandwidth_alone=20e9, bandwidth_together=12e9)
    assert stream_slowdown(cal, 1) == 1.0 and stream_slowdown(cal, 2) == pytest.approx(20 / 12)
    assert stream_slowdown(cal, 4) == pytest.approx(2 * 20 / 12)
    assert laptop_preset(cal, 2).memory_bandwidth == pytest.approx(12e9)
    assert laptop_preset(calibration()).memory_bandwidth is None   # not measured: nothing charged
    with pytest.raises(ValueError, match="run calibrate"):
        stream_slowdown(calibration(), 2)


def _mlp_step(preset, dp=2, **options):
    from course_lib.sim import MLPSpec, simulate_training_step
    return simulate_training_step(MLPSpec((1000, 2000, 1000)), make_cluster(1, dp, preset=preset), dp=dp,
                                  global_batch=2 * dp, param_bytes=4, grad_bytes=4, optimizer_bytes=0,
                                  **options)


def test_on_a_measured_cpu_the_mlp_streams_its_weights_gradients_and_update_through_memory():
    flops, bandwidth = 1e11, 1e10
    cal = dataclasses.replace(calibration(world_size=2, flops_alone=flops), bandwidth_alone=bandwidth,
                              bandwidth_together=bandwidth)
    events = list(_mlp_step(laptop_preset(cal, 2)).timeline.events(0))
    seconds = {e.label: e.end - e.start for e in events}
    weights = 2 * 1000 * 2000
    # forward reads each layer's weights; backward reads them again, writes the gradient and DDP copies
    # it into its bucket and back (4 more passes); the SGD update reads and writes the parameters and
    # reads the gradients: 12 bytes a parameter
    backward = "B0 layer 0 weights read, gradient written (memory)"
    assert seconds["F0 layer 0 weights read (memory)"] == pytest.approx(2e6 * 4 / bandwidth)
    assert seconds[backward] == pytest.approx(2e6 * 4 * 6 / bandwidth)
    params = weights + 2000 + 1000
    assert seconds["optimizer update (memory)"] == pytest.approx(params * 12 / bandwidth)
    update = next(e for e in events if e.label == "optimizer update (memory)")
    assert update.start >= max(e.end for e in events if e.kind == "comm")   # after every gradient arrived
    # one rank alone copies nothing into buckets
    alone = {e.label: e.end - e.start for e in _mlp_step(laptop_preset(cal, 1), dp=1).timeline.events(0)}
    assert alone[backward] == pytest.approx(2e6 * 4 * 2 / bandwidth)


def test_gpu_presets_and_uncalibrated_laptops_keep_the_compute_only_mlp():
    from course_lib.sim import PRESETS
    for preset in (PRESETS["h100"], laptop_preset(calibration())):
        labels = {e.label for e in _mlp_step(preset).timeline.events(0)}
        assert not any("(memory)" in label for label in labels), labels


def test_a_python_hop_costs_the_measured_crowded_step_once_the_ranks_outnumber_the_cores():
    # 4 ranks on 2 cores took 1.5 ms a ring step where a ping-pong took 60 us: measured, not stretched
    cal = dataclasses.replace(calibration(world_size=2, cores=2.0), point_to_point=Link(6e-5, 2.5e9),
                              crowded_ranks=4, crowded_step=1.5e-3)
    assert python_hop_time(cal, 2) == pytest.approx(6e-5)                 # each rank has a core
    assert python_hop_time(cal, 4) == pytest.approx(1.5e-3)
    assert python_hop_time(cal, 3) == pytest.approx(1.5e-3 * 3 / 4)
    ring = python_all_reduce_time(cal, 400, 4, "ring")
    assert ring == pytest.approx(6 * (1.5e-3 + 100 / 2.5e9))
    # not measured (an older calibration): the latency stretched like compute, as before
    older = calibration(world_size=2, cores=2.0)
    assert python_hop_time(older, 4) == pytest.approx(older.point_to_point.latency * 2)


def test_a_ring_pays_the_measured_release_at_each_of_its_two_phases_returns():
    # blocks of 48 steps: 0.6 ms a step with the handles kept, 2.4 ms with them dropped at every step
    kept = recorded([[48 * s for s in (6e-4, 5e-4, 6e-4, 7e-4, 6e-4)]], "comm", {"steps": 48})
    dropped = recorded([[48 * s for s in (2.4e-3, 2.3e-3, 9e-3, 2.4e-3, 2.5e-3)]], "comm", {"steps": 48})
    assert fit_crowded_release(kept, dropped) == pytest.approx(1.8e-3)
    assert fit_crowded_release(dropped, kept) == 0.0                      # never below nothing
    cal = dataclasses.replace(calibration(world_size=2, cores=2.0), crowded_ranks=4, crowded_step=6e-4,
                              crowded_release=1.8e-3)
    assert python_release_time(cal, 4) == pytest.approx(1.8e-3)
    assert python_release_time(cal, 3) == pytest.approx(1.8e-3 * 3 / 4)
    assert python_release_time(cal, 2) == 0.0                             # each rank has a core
    # the ring: 6 steps and the returns of ring_reduce_scatter and ring_all_gather; through rank 0 holds
    # no handle (blocking send/recv)
    without = dataclasses.replace(cal, crowded_release=None)
    assert python_all_reduce_time(cal, 400, 4, "ring") - python_all_reduce_time(without, 400, 4, "ring") \
        == pytest.approx(2 * 1.8e-3)
    assert python_all_reduce_time(cal, 400, 4, "parameter_server") == \
        python_all_reduce_time(without, 400, 4, "parameter_server")


def test_ranks_sharing_cores_finish_as_a_fair_scheduler_shares_them():
    # 4 ranks on 2 cores, equal work: each gets half a core throughout, compute_slowdown's factor 2
    assert shared_core_finish_times([10.0] * 4, 2.0) == pytest.approx([20.0] * 4)
    assert shared_core_finish_times([10.0] * 4, 2.0)[0] / 10.0 == pytest.approx(
        compute_slowdown(calibration(world_size=4, cores=2.0), 4))
    # chapter 11's leaning router: three light ranks (5 s alone) finish together at 10 s, having each had
    # half a core; the busy one (20 s alone) has then done 5 s and runs its last 15 s on a core of its own
    assert shared_core_finish_times([20.0, 5.0, 5.0, 5.0], 2.0) == pytest.approx([25.0, 10.0, 10.0, 10.0])
    # a core each: nothing shared; 3 ranks on 2 cores: 2/3 of a core each until the first is done (1.5 s),
    # then a core each
    assert shared_core_finish_times([3.0, 1.0], 2.0) == pytest.approx([3.0, 1.0])
    assert shared_core_finish_times([3.0, 2.0, 1.0], 2.0) == pytest.approx([3.5, 2.5, 1.5])
    assert shared_core_finish_times([], 2.0) == []
    for work, cores in (([1.0, -1.0], 2.0), ([1.0], 0.0), ([float("nan")], 1.0)):
        with pytest.raises(ValueError):
            shared_core_finish_times(work, cores)


def test_a_sweeps_misses_are_said_by_the_run_size_by_size_and_in_their_direction():
    from course_lib.sim.cluster.laptop import misses_sentence

    assert misses_sentence({"4 KiB": 1.0, "64 KiB": 1.49}) == (
        "every point is within [0.67, 1.5] of the prediction in this run")
    said = misses_sentence({"4 KiB": 2.1, "16 KiB": 1.7, "64 KiB": 1.2, "256 KiB": 0.5})
    assert said.startswith("the model misses in this run: slower than predicted at 4 KiB (2.10x) and "
                           "16 KiB (1.70x); faster than predicted at 256 KiB (0.50x)")
    assert "64 KiB" not in said
    assert "at 1 MiB (0.60x), 4 MiB (0.66x) and 16 MiB (0.10x) (the band" in misses_sentence(
        {"1 MiB": 0.6, "4 MiB": 0.66, "16 MiB": 0.1})
