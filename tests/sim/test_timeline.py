"""Timeline bookkeeping and its Chrome/Perfetto trace export."""

import json

import pytest

from course_lib import sim
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


def test_adding_to_a_shared_lane_leaves_the_other_lanes_alone():
    lane = [(0.0, 2.0, "compute", "F")]
    t = Timeline(["a", "b", "c"], [lane, lane, [(0.0, 1.0, "compute", "F")]])
    t.add(0, 2.0, 3.0, "comm", "only on a")
    assert [e.label for e in t.events(0)] == ["F", "only on a"]
    assert [e.label for e in t.events(1)] == ["F"]
    assert lane == [(0.0, 2.0, "compute", "F")], "the caller's list is not changed either"
    t.add(0, 3.0, 4.0, "idle", "again on a")     # lane 0 owns its copy now: appended in place
    assert t.num_events == 5 and t.busy_time("compute") == 5.0


def test_adding_to_one_rank_of_a_step_leaves_its_stage_mates_alone():
    from course_lib.sim import TransformerSpec, make_cluster, simulate_training_step
    model = TransformerSpec(4, 256, 8, 128, 1000)
    report = simulate_training_step(model, make_cluster(1, 4), dp=2, pp=2, microbatches=2, global_batch=4)
    t = report.timeline
    mate = next(r for r in range(1, 4) if report.stage_of_rank[r] == report.stage_of_rank[0])
    before = list(t.events(mate))
    t.add(0, t.makespan, t.makespan + 1.0, "compute", "optimizer step")
    assert list(t.events(mate)) == before
    assert list(t.events(0))[-1].label == "optimizer step"
    assert len(t.to_perfetto(lanes="distinct")["traceEvents"]) > 0


def test_bad_lane_index_is_a_value_error():
    t = Timeline(["a", "b"])
    for lane in (2, -1, 1.0):
        with pytest.raises(ValueError, match="lane"):
            t.add(lane, 0, 1, "compute", "x")
    with pytest.raises(ValueError, match="start"):
        t.add(0, float("nan"), 1, "compute", "x")


def test_sorting_and_pipeline_facts_go_through_the_timeline():
    shared = [(2.0, 3.0, "compute", "late"), (0.0, 1.0, "compute", "early")]
    t = Timeline(["a", "b"], [shared, shared])
    t.sort_lanes(key=lambda event: event.start)
    assert [e.label for e in t.events()] == ["early", "late", "early", "late"]
    assert t.schedule is None and t.peak_activations is None
    t.attach_pipeline("a schedule", (2, 1))
    assert t.schedule == "a schedule" and t.peak_activations == [2, 1]


def test_timelines_join_on_one_axis_and_export_as_one_trace(tmp_path):
    measured = sim.Timeline(["rank 0", "rank 1"], title="measured")
    measured.add(0, 0.0, 1.0, "compute", "forward")
    measured.add(1, 0.5, 1.5, "comm", "all_reduce")
    simulated = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 2, 1), 1.0, 2.0)
    joined = sim.join_timelines({"measured": measured, "simulated": simulated})
    assert joined.lane_names == ["measured: rank 0", "measured: rank 1", "simulated: stage 0",
                                 "simulated: stage 1"]
    assert joined.makespan == max(measured.makespan, simulated.makespan)   # each keeps its own times
    assert list(joined.events(1)) == [sim.Event(1, 0.5, 1.5, "comm", "all_reduce")]
    trace = json.loads(open(joined.save_perfetto(tmp_path / "both.json")).read())
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == joined.lane_names
    with pytest.raises(ValueError, match="Timeline"):
        sim.join_timelines({"measured": [1, 2]})
