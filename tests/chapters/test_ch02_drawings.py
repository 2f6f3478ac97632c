"""Chapter 02's drawings: the ring schedule follows the exercise's convention; the primitives are right."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_lib.viz.collectives import PRIMITIVES, collective_states, draw_all_collectives  # noqa: E402
from course_lib.viz.ring import (  # noqa: E402
    draw_lanes,
    draw_ring_step,
    ring_schedule,
    ring_widget,
)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_ring_schedule_reduces_then_gathers(n):
    steps = ring_schedule(n)
    assert len(steps) == 1 + 2 * (n - 1)
    everyone = frozenset(range(n))
    after_reduce_scatter = steps[n - 1].holdings
    for rank in range(n):
        assert after_reduce_scatter[rank][rank] == everyone, "chunk r must be complete on rank r"
    assert all(chunk == everyone for row in steps[-1].holdings for chunk in row)
    for step in steps[1:]:
        assert [(src, dst) for src, dst, _ in step.sends] == [(r, (r + 1) % n) for r in range(n)]


def test_reduce_scatter_contributions_grow_by_one_per_step_and_the_gather_copies_complete_chunks():
    steps = ring_schedule(4)
    for index in range(1, 4):
        assert [s.index for s in steps[1:4]] == [1, 2, 3] and steps[index].phase == "reduce-scatter"
        for _, receiver, chunk in steps[index].sends:
            assert len(steps[index].holdings[receiver][chunk]) == index + 1
    for before, step in zip(steps[3:], steps[4:], strict=False):
        assert step.phase == "all-gather"
        for sender, receiver, chunk in step.sends:
            assert len(step.holdings[receiver][chunk]) == 4 == len(before.holdings[sender][chunk])


def test_the_drawing_holds_no_schedule_of_its_own():
    """The chunk arithmetic is chapter 02's exercise: the drawing replays the simulator instead."""
    import inspect

    import course_lib.viz.ring as ring

    source = inspect.getsource(ring)
    assert "% world_size" not in source and "% n" not in source and "ring_timeline" in source


def test_ring_schedule_rejects_bad_sizes():
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="world_size"):
            ring_schedule(bad)


def test_collective_states():
    before, after = collective_states("reduce_scatter", 3)
    assert before[1] == ["b0", "b1", "b2"] and after == [["a0+b0+c0"], ["a1+b1+c1"], ["a2+b2+c2"]]
    before, after = collective_states("scatter", 4)
    assert before[0] == ["a0", "a1", "a2", "a3"] and before[3] == [] and after[2] == ["a2"]
    assert collective_states("gather", 3)[1] == [["a", "b", "c"], ["b"], ["c"]]
    assert collective_states("all_gather", 2)[1] == [["a", "b"], ["a", "b"]]
    assert collective_states("reduce", 2)[1] == [["a+b"], ["b"]]
    assert collective_states("all_reduce", 6)[1] == [["Σ"]] * 6
    with pytest.raises(ValueError, match="unknown primitive"):
        collective_states("allreduce")
    with pytest.raises(ValueError, match="world_size"):
        collective_states("scatter", 27)


def test_drawings_draw_something():
    figure = draw_all_collectives(4)
    assert len(figure.axes) == 2 * len(PRIMITIVES)
    assert all(ax.patches for ax in figure.axes)
    ax = draw_ring_step(ring_schedule(4)[2])
    assert "reduce-scatter step 2 of 3" in ax.get_title() and len(ax.patches) == 16 + 4
    plt.close("all")


def test_draw_lanes_cuts_at_last():
    from course_lib.sim import Timeline

    timeline = Timeline(["rank 0"], title="t")
    timeline.add(0, 0.0, 1.0, "comm", "send->1")
    timeline.add(0, 1.0, 2.0, "idle", "wait")
    timeline.add(0, 2.0, 3.0, "comm", "recv<-1")
    ax = draw_lanes(timeline, unit="s", last=1.5)
    bars = sorted((round(p.get_width(), 6), round(p.get_height(), 6)) for p in ax.patches)
    assert bars == [(0.5, 0.6), (1.0, 0.3)]  # the send (half height) and the idle time cut at 1.5 s
    plt.close("all")


def test_ring_widget_redraws_when_the_slider_moves():
    box = ring_widget(3)
    play, slider = box.children[0].children
    image = box.children[1]
    assert slider.max == play.max == 4
    first = bytes(image.value)
    assert first.startswith(b"\x89PNG")
    slider.value = 3
    assert bytes(image.value).startswith(b"\x89PNG") and bytes(image.value) != first
    slider.value = 0
    assert bytes(image.value) == first
    plt.close("all")
