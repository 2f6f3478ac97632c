"""Pipeline schedules: hand-checked makespans, and properties of GPipe, 1F1B and interleaving."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.sim import Schedule, bubble_fraction_formula, pipeline_schedule, simulate_pipeline

stages = st.integers(1, 8)
micro = st.integers(1, 16)
times = st.floats(0.1, 10.0)


def test_hand_computed_gpipe():
    # 2 stages, 2 micro-batches, forward 1 s, backward 2 s: F0 F1 on stage 0 at 0-1, 1-2; stage 1 at 1-2, 2-3;
    # backward on stage 1: B0 3-5, B1 5-7; stage 0: B0 5-7, B1 7-9.
    t = simulate_pipeline(pipeline_schedule("gpipe", 2, 2), 1.0, 2.0)
    assert t.makespan == 9.0
    assert [e[:2] for e in t.lanes[0]] == [(0, 1), (1, 2), (5, 7), (7, 9)]
    assert t.bubble_fraction == pytest.approx(1 - 12 / 18)


@settings(database=None, max_examples=60, deadline=None)
@given(p=stages, m=micro, tf=times, tb=times)
def test_gpipe_and_1f1b_have_the_same_makespan(p, m, tf, tb):
    gpipe = simulate_pipeline(pipeline_schedule("gpipe", p, m), tf, tb)
    one_f_one_b = simulate_pipeline(pipeline_schedule("1f1b", p, m), tf, tb)
    assert gpipe.makespan == pytest.approx(one_f_one_b.makespan)
    assert gpipe.makespan == pytest.approx((m + p - 1) * (tf + tb))
    assert gpipe.bubble_fraction == pytest.approx(bubble_fraction_formula(p, m))


@settings(database=None, max_examples=60, deadline=None)
@given(p=stages, m=micro)
def test_1f1b_holds_at_most_stages_microbatches_on_stage_0(p, m):
    t = simulate_pipeline(pipeline_schedule("1f1b", p, m), 1.0, 2.0)
    assert t.peak_activations[0] == min(p, m)
    assert max(t.peak_activations) <= p
    assert simulate_pipeline(pipeline_schedule("gpipe", p, m), 1.0, 2.0).peak_activations[0] == m


@settings(database=None, max_examples=40, deadline=None)
@given(p=st.integers(2, 6), groups=st.integers(1, 4), v=st.integers(2, 4), tf=times, tb=times)
def test_interleaving_shrinks_the_bubble_by_the_virtual_stage_count(p, groups, v, tf, tb):
    m = p * groups
    plain = simulate_pipeline(pipeline_schedule("1f1b", p, m), tf, tb)
    inter = simulate_pipeline(pipeline_schedule("interleaved_1f1b", p, m, v), tf, tb)
    ideal = m * (tf + tb)
    assert plain.makespan - ideal == pytest.approx(v * (inter.makespan - ideal))
    assert inter.bubble_fraction == pytest.approx(bubble_fraction_formula(p, m, v))


def test_communication_delays_every_hop():
    t = simulate_pipeline(pipeline_schedule("1f1b", 4, 1), 1.0, 1.0, t_comm=0.5)
    assert t.makespan == pytest.approx(8 * 1.0 + 6 * 0.5)
    assert sum(1 for e in t.events() if e.kind == "comm") == 6


def test_per_stage_times():
    t = simulate_pipeline(pipeline_schedule("gpipe", 2, 1), [1.0, 3.0], [2.0, 6.0])
    assert t.makespan == 12.0


def test_hand_written_schedule_without_chunks():
    mine = Schedule("mine", 2, 2, 1, [
        [("F", 0), ("F", 1), ("B", 0), ("B", 1)],
        [("f", 0), ("b", 0), ("F", 1), ("B", 1)],
    ])
    assert mine[1][1] == ("B", 0, 0) and len(mine) == 2
    assert simulate_pipeline(mine, 1.0, 2.0).makespan == 9.0
    with pytest.raises(ValueError, match="schedule op"):
        Schedule("bad", 1, 1, 1, [[(0, "F")]])


def test_hand_written_schedules_are_checked():
    with pytest.raises(ValueError, match="appears twice"):
        Schedule("custom", 1, 1, 1, [[("F", 0, 0), ("F", 0, 0), ("B", 0, 0)]])
    with pytest.raises(ValueError, match="before its forward"):
        Schedule("custom", 1, 1, 1, [[("B", 0, 0), ("F", 0, 0)]])
    with pytest.raises(ValueError, match="missing"):
        Schedule("custom", 1, 2, 1, [[("F", 0, 0), ("B", 0, 0)]])
    deadlock = Schedule("custom", 2, 2, 1, [
        [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 1, 0)],
        [("F", 0, 0), ("F", 1, 0), ("B", 0, 0), ("B", 1, 0)],
    ])
    with pytest.raises(ValueError, match="deadlocks"):
        simulate_pipeline(deadlock, 1.0, 1.0)


@pytest.mark.parametrize("args,match", [
    (("interleaved_1f1b", 4, 2, 2), "microbatches=4"),
    (("interleaved_1f1b", 4, 6, 2), "microbatches=8"),
    (("1f1b", 4, 8, 2), "interleaved_1f1b"),
    (("zigzag", 4, 8), "unknown pipeline schedule"),
    (("gpipe", 0, 8), "stages must be"),
    (("gpipe", 2, -1), "microbatches must be"),
])
def test_bad_schedules_say_what_to_change(args, match):
    with pytest.raises(ValueError, match=match):
        pipeline_schedule(*args)


def test_bad_times():
    with pytest.raises(ValueError, match="t_forward"):
        simulate_pipeline(pipeline_schedule("gpipe", 2, 2), [1.0], 1.0)
    with pytest.raises(ValueError, match="t_comm"):
        simulate_pipeline(pipeline_schedule("gpipe", 2, 2), 1.0, 1.0, t_comm=-1)
