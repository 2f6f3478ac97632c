"""Timeline bookkeeping and its Chrome/Perfetto trace export."""

import json

import pytest

from course_lib.sim import Timeline


def small_timeline():
    t = Timeline(["rank 0", "rank 1"], title="demo")
    t.add(0, 0.0, 1.0, "compute", "F0")
    t.add(0, 1.0, 1.5, "comm", "send", {"bytes": 10})
    t.add(1, 1.5, 3.0, "compute", "F0")
    return t


def test_makespan_busy_time_and_bubble():
    t = small_timeline()
    assert t.makespan == 3.0
    assert t.busy_time("compute") == 2.5
    assert t.bubble_fraction == pytest.approx(1 - 2.5 / 6.0)
    assert t.num_events == 3
    assert [e.label for e in t.events(0)] == ["F0", "send"]


def test_shared_lanes_are_counted_per_rank():
    lane = [(0.0, 2.0, "compute", "F")]
    t = Timeline(["a", "b", "c"], [lane, lane, [(0.0, 1.0, "compute", "F")]])
    assert t.busy_time() == 5.0 and t.num_events == 3 and t.makespan == 2.0


def test_bad_events_are_refused():
    t = Timeline(["r"])
    with pytest.raises(ValueError, match="kind"):
        t.add(0, 0, 1, "sleep", "x")
    with pytest.raises(ValueError, match="before it starts"):
        t.add(0, 2, 1, "compute", "x")


def test_perfetto_trace_has_complete_events_in_microseconds(tmp_path):
    t = small_timeline()
    trace = t.to_perfetto()
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == 3
    send = next(e for e in complete if e["name"] == "send")
    assert send["ts"] == pytest.approx(1e6) and send["dur"] == pytest.approx(0.5e6)
    assert send["tid"] == 1 and send["args"] == {"bytes": 10}
    path = t.save_perfetto(tmp_path / "step.json", lanes=[1])
    loaded = json.loads(open(path).read())
    assert [e["pid"] for e in loaded["traceEvents"] if e["ph"] == "X"] == [1]
