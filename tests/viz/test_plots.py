"""Timeline, memory and placement drawings show what the simulator produced."""

import matplotlib.colors as mcolors
import pytest

from course_lib import sim
from course_lib.viz import plot_memory, plot_placement, plot_timeline
from course_lib.viz.style import COLORS


def bars(ax):
    """(colour, x, width) of every drawn bar, from the broken_barh collections."""
    out = []
    for collection in ax.collections:
        color = mcolors.to_hex(collection.get_facecolor()[0])
        for path in collection.get_paths():
            xs = path.vertices[:, 0]
            out.append((color, xs.min(), xs.max() - xs.min()))
    return out


def test_four_rank_timeline_has_one_row_per_rank_and_distinct_colours():
    timeline = sim.ring_timeline("all_reduce", 4, 4e6, sim.Link(1e-5, 1e9))
    ax = plot_timeline(timeline)
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"rank {r}" for r in range(4)]
    drawn = bars(ax)
    comm = [b for b in drawn if b[0] == COLORS["comm"].lower()]
    assert len(comm) == 4 * 6
    assert any(b[0] == COLORS["idle"].lower() for b in drawn)


def test_pipeline_timeline_colours_forward_and_backward():
    timeline = sim.simulate_pipeline(sim.pipeline_schedule("1f1b", 4, 8), 1.0, 2.0)
    ax = plot_timeline(timeline)
    colours = {b[0] for b in bars(ax)}
    assert {COLORS["forward"].lower(), COLORS["backward"].lower()} <= colours
    assert "F0" in {t.get_text() for t in ax.texts}


def test_many_ranks_are_grouped_into_readable_rows():
    report = sim.simulate_training_step(sim.LLAMA3_8B, sim.make_cluster(16, 8), dp=16, tp=2, pp=4,
                                        microbatches=4, global_batch=64, recompute="full")
    ax = plot_timeline(report.timeline, max_rows=16)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == 4 and labels[0] == "stage 0 (32 ranks)"


def test_memory_bars_stack_to_the_total_and_mark_overflow():
    stages = sim.memory_per_device(sim.LLAMA3_70B, dp=8, tp=8, pp=4, zero_stage=0, microbatches=8,
                                   preset="h100")
    ax = plot_memory(stages)
    tops = {}
    for patch in ax.patches:
        if patch.get_fill():
            x = round(patch.get_x() + patch.get_width() / 2)
            tops[x] = max(tops.get(x, 0), patch.get_y() + patch.get_height())
    assert tops[0] == pytest.approx(stages[0].total / 1e9)
    assert any(line.get_linestyle() == "--" for line in ax.lines)
    over = [p for p in ax.patches if not p.get_fill()]
    assert len(over) == sum(not s.fits for s in stages)


def test_memory_labels_must_match():
    with pytest.raises(ValueError, match="one label per bar"):
        plot_memory(sim.memory_per_device(sim.LLAMA3_8B), labels=["a", "b"])


def test_placement_drawing_names_every_rank():
    ax = plot_placement(2, 4, dp=2, tp=4)
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 8 and texts[0].startswith("r0") and "tp3" in texts[3]
    with pytest.raises(ValueError, match="multiply"):
        plot_placement(2, 4, dp=3)


def test_perfetto_export_of_a_step(tmp_path):
    report = sim.simulate_training_step(sim.LLAMA3_8B, sim.make_cluster(1, 8), dp=2, tp=4, global_batch=2,
                                        recompute="full")
    path = report.timeline.save_perfetto(tmp_path / "step.json")
    import json
    trace = json.loads(open(path).read())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == report.timeline.num_events


def test_distinct_lanes_beyond_the_limit_are_sampled_evenly():
    timeline = sim.ring_timeline("all_gather", 64, 64e6, sim.Link(1e-5, 1e9))
    ax = plot_timeline(timeline, max_rows=8)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "rank 0" and labels[-1] == "rank 63" and len(labels) == 8
    assert "8 of 64 rows shown" in ax.get_title()


def test_a_measured_and_a_simulated_timeline_share_one_axis():
    from course_lib.viz import plot_timelines

    measured = sim.Timeline(["rank 0"], title="measured")
    measured.add(0, 0.0, 3.0, "compute", "forward")
    simulated = sim.simulate_pipeline(sim.pipeline_schedule("gpipe", 2, 1), 1.0, 2.0)
    ax = plot_timelines({"measured": measured, "simulated": simulated}, title="both")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["measured: rank 0", "simulated: stage 0",
                                                            "simulated: stage 1"]
    assert ax.get_xlim()[1] == pytest.approx(6.0)    # one axis, as long as the longer of the two
    assert ax.get_title() == "both"
