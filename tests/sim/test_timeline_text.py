"""Timelines drawn as text (what a failing check shows in nbgrader's feedback)."""

from course_lib import sim
from course_lib.sim.timeline_text import timeline_text


def test_each_op_fills_its_span_with_its_label_and_idle_time_is_dotted():
    t = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 2, 1), 1.0, 2.0)
    assert timeline_text(t, quantum=0.5).splitlines() == ["stage 0 |F0......B0==|",
                                                          "stage 1 |..F0B0==....|"]


def test_the_default_column_keeps_the_shortest_op_readable_and_the_width_bounded():
    t = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 4, 4), 1.0, 1.5, t_weight=0.5)
    rows = timeline_text(t).splitlines()
    assert len(rows) == 4 and all(len(row) == len(rows[0]) for row in rows)
    wide = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 16, 64), 1.0, 2.0)
    assert max(len(row) for row in timeline_text(wide).splitlines()) <= 160 + len("stage 15 ||")


def test_a_timeline_without_compute_says_so():
    assert timeline_text(sim.Timeline(["rank 0"])) == "(no compute events)"
