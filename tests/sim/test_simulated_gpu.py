"""The seed's simulated GPU on a virtual clock: same calls, same constants, no sleeping."""

import time

import pytest

from course_lib.sim import Link, SimulatedGPU, collective_time, seed_0d, seed_1d, simulated_gpus


def test_zero_d_is_exactly_32_simulated_seconds_and_instant():
    start = time.perf_counter()
    seconds, timeline = seed_0d()
    assert seconds == 32.0
    assert timeline.makespan == 32.0 and len(timeline.lanes[0]) == 16
    assert time.perf_counter() - start < 1.0


def test_send_and_receive_costs_follow_the_seed_constants():
    assert (SimulatedGPU.SECONDS_PER_COMPUTE_UNIT, SimulatedGPU.NETWORK_BASE_LATENCY_SECONDS,
            SimulatedGPU.SECONDS_PER_DATA_UNIT) == (0.1, 0.05, 0.01)
    a, b = simulated_gpus(2)
    assert a.send(1, "x", 10) == pytest.approx(0.05 + 0.1)
    # b is at t=0; it waits until the message arrives at 0.15, then pays the receive latency.
    b.receive(0, "x", 10)
    assert b.now == pytest.approx(0.2)
    kinds = [e.kind for e in b.network.timeline().events(1)]
    assert kinds == ["idle", "comm"]


def test_one_d_seed_loop_versus_a_correct_ring():
    seed_seconds, _ = seed_1d(4, ring="seed")
    ring_seconds, timeline = seed_1d(4, ring="correct")
    compute = 16 / 4 * 20 * 0.1
    assert seed_seconds == pytest.approx(compute + 4 * (0.05 + 100 * 0.01 + 0.05))
    # The correct ring equals the closed form with alpha = send + receive latency, beta = 0.01 s/unit.
    link = Link(latency=0.1, bandwidth=1 / 0.01)
    assert ring_seconds == pytest.approx(compute + collective_time("all_reduce", 100, 4, link))
    assert len(timeline.lanes) == 4


def test_receive_before_send_is_a_clear_error():
    a, b = simulated_gpus(2)
    with pytest.raises(RuntimeError, match="has not sent it yet"):
        b.receive(0, "grad", 1)


def test_bad_arguments():
    gpu = SimulatedGPU(0)
    with pytest.raises(ValueError, match="compute_units"):
        gpu.compute("x", -1)
    with pytest.raises(ValueError, match="itself"):
        gpu.send(0, "x", 1)
    with pytest.raises(ValueError, match="world_size"):
        seed_1d(3)
