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


# -- split backward (B, then W) and the V placement ---------------------------------------------------
def _with_w_after_each_b(schedule):
    return [[x for op in stage for x in ([op, ("W", *op[1:])] if op[0] == "B" else [op])]
            for stage in schedule.ops]


def test_hand_computed_split_backward():
    # 2 stages, 1 micro-batch, F=1, B=2, W=0.5. Stage 1: F 1-2, B 2-4, W 4-4.5. Stage 0: F 0-1, then its
    # B waits only for stage 1's B (not its W): 4-6, W 6-6.5. Without the split, stage 0's B ends at 7.
    split = Schedule("split", 2, 1, 1, [[("F", 0), ("B", 0), ("W", 0)], [("F", 0), ("B", 0), ("W", 0)]])
    t = simulate_pipeline(split, 1.0, 2.0, t_weight=0.5)
    assert [e[:3] for e in t.lanes[0]] == [(0, 1, "compute"), (4, 6, "compute"), (6, 6.5, "compute")]
    assert t.makespan == 6.5 and [e.label for e in t.lanes[1]] == ["F0", "B0", "W0"]
    whole = simulate_pipeline(pipeline_schedule("gpipe", 2, 1), 1.0, 2.0, t_weight=0.5)
    assert whole.makespan == 7.0          # a B without its W runs the whole backward, B + W


@settings(database=None, max_examples=40, deadline=None)
@given(p=stages, m=micro, tf=times, tb=times, tw=times)
def test_splitting_the_backward_takes_the_weight_gradient_off_the_chain_between_stages(p, m, tf, tb, tw):
    full = simulate_pipeline(pipeline_schedule("1f1b", p, m), tf, tb, t_weight=tw)
    ops = _with_w_after_each_b(pipeline_schedule("1f1b", p, m))
    split = simulate_pipeline(Schedule("1f1b split", p, m, 1, ops), tf, tb, t_weight=tw)
    assert full.makespan == pytest.approx((m + p - 1) * (tf + tb + tw))
    assert split.makespan <= full.makespan + 1e-9
    if m >= p:
        assert split.makespan == pytest.approx(m * (tf + tb + tw) + (p - 1) * (tf + tb))


def test_activations_are_held_until_the_weight_gradient():
    late = Schedule("w late", 1, 3, 1, [[("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2),
                                          ("W", 0), ("W", 1), ("W", 2)]])
    assert simulate_pipeline(late, 1.0, 1.0, t_weight=1.0).peak_activations == [3]
    early = Schedule("w early", 1, 3, 1, [[op for mb in range(3) for op in (("F", mb), ("B", mb), ("W", mb))]
                                          ])
    assert simulate_pipeline(early, 1.0, 1.0, t_weight=1.0).peak_activations == [1]


def test_weight_gradients_are_checked_like_every_op():
    with pytest.raises(ValueError, match=r"weight gradient \(W\) of microbatch 0 comes before its backward"):
        Schedule("bad", 1, 1, 1, [[("F", 0), ("W", 0), ("B", 0)]])
    with pytest.raises(ValueError, match="appears twice"):
        Schedule("bad", 1, 1, 1, [[("F", 0), ("B", 0), ("W", 0), ("W", 0)]])
    with pytest.raises(ValueError, match="t_weight"):
        simulate_pipeline(pipeline_schedule("1f1b", 2, 2), 1.0, 1.0, t_weight=-1.0)


def test_the_v_placement_puts_a_stages_two_chunks_at_both_ends_of_the_model():
    p = 3
    v = Schedule("v", p, 1, 2, [[("F", 0, 0), ("F", 0, 1), ("B", 0, 1), ("B", 0, 0)]] * p, placement="v")
    assert [v.virtual_stage(s, c) for c in (0, 1) for s in range(p)] == [0, 1, 2, 5, 4, 3]
    assert [v.stage_of(j) for j in range(2 * p)] == [0, 1, 2, 2, 1, 0]
    loop = Schedule("loop", p, 1, 2, [[("F", 0, 0), ("F", 0, 1), ("B", 0, 1), ("B", 0, 0)]] * p)
    assert [loop.stage_of(j) for j in range(2 * p)] == [0, 1, 2, 0, 1, 2]
    with pytest.raises(ValueError, match="virtual_stages=2"):
        Schedule("v", p, 1, 1, [[("F", 0), ("B", 0)]] * p, placement="v")
    with pytest.raises(ValueError, match="placement must be one of"):
        Schedule("x", p, 1, 1, [[("F", 0), ("B", 0)]] * p, placement="ring")


def test_the_v_placement_hands_the_middle_over_locally_and_the_first_stage_computes_the_loss():
    # one micro-batch through 2 stages x 2 chunks in a V: 0 -> 1 -> 1 (local) -> 0; hops cost 0.5
    ops = [[("F", 0, 0), ("F", 0, 1), ("B", 0, 1), ("B", 0, 0)]] * 2
    t = simulate_pipeline(Schedule("v", 2, 1, 2, ops, placement="v"), 2.0, 2.0, t_comm=0.5)
    # chunk time 1: F 0-1 (s0), hop, F 1.5-2.5 (s1), F 2.5-3.5 (s1, local), hop, F 4-5 (s0), B 5-6 (s0), hop,
    # B 6.5-7.5 (s1), B 7.5-8.5 (s1, local), hop, B 9-10 (s0)
    assert t.makespan == 10.0 and sum(e.kind == "comm" for e in t.events()) == 4


@settings(database=None, max_examples=40, deadline=None)
@given(p=st.integers(2, 8), groups=st.integers(2, 4), v=st.integers(2, 4))
def test_interleaving_costs_stage_0_p_minus_1_over_v_more_microbatches(p, groups, v):
    # Korthikanti et al. 2022, section 4.2.3: the first stage's activations grow by 1 + (p-1)/(p v)
    t = simulate_pipeline(pipeline_schedule("interleaved_1f1b", p, p * groups, v), 1.0, 2.0)
    assert t.peak_activations[0] == pytest.approx(p + (p - 1) / v)
    assert t.peak_activations[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))
