"""wire_bytes: a recorded step's collectives as the bytes a ring sends per rank."""

import pytest

from course_lib.real import TrafficEvent, TrafficLog, wire_bytes


def _log(*events) -> TrafficLog:
    return TrafficLog(0, [TrafficEvent(0, op, None, nbytes, 0.0, 0.0) for op, nbytes in events])


def test_ring_factors_per_collective():
    log = _log(("all_reduce", 800), ("reduce_scatter_tensor", 800), ("all_gather_into_tensor", 800),
               ("all_gather", 400))
    assert wire_bytes(log, 4) == {"all_reduce": 1200, "reduce_scatter": 600, "all_gather": 900}


def test_zero3_sends_one_and_a_half_times_ddp():
    ddp = wire_bytes(_log(("all_reduce", 1000)), 8)
    zero3 = wire_bytes(_log(("all_gather_into_tensor", 1000), ("all_gather_into_tensor", 1000),
                            ("reduce_scatter_tensor", 1000)), 8)
    assert sum(zero3.values()) == pytest.approx(1.5 * sum(ddp.values()))


def test_point_to_point_calls_are_refused_with_what_to_record():
    with pytest.raises(ValueError, match="record only the collectives"):
        wire_bytes(_log(("send", 8)), 2)
