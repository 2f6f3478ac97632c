"""ipywidgets explorers: data-parallel scaling, pipeline schedules, ZeRO memory (with PP), a 4D layout.

Each returns a widget; move a control and the simulator recomputes and redraws in milliseconds.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from course_lib import sim

from .memory_plot import plot_memory
from .placement_plot import plot_placement
from .style import COLORS
from .timeline_plot import plot_timeline
from .widgets_common import RenderedFigure, choice, explorer, slider

GPT_1B = sim.TransformerSpec(24, 2048, 16, 2048, 50257, name="GPT 1.3B")
POWERS = [2**i for i in range(11)]


def data_parallel_explorer(model=GPT_1B, gpus_per_node: int = 8):
    """Step time and scaling efficiency of data parallel from 1 to 1024 GPUs: algorithm, overlap, network."""
    gpus = slider("GPUs", POWERS[3:], 64)
    network = slider("inter-node GB/s", [1.25, 3.125, 12.5, 25, 50, 100], 50)
    algorithm = choice("gradient sync", ["nccl", "ring", "tree", "parameter_server"])  # NCCL's pick
    overlap = choice("DDP overlap", [True, False])
    per_gpu = slider("sequences per GPU", [1, 2, 4, 8, 16], 4)

    def step(n):
        cluster = sim.make_cluster(max(1, n // gpus_per_node), min(n, gpus_per_node),
                                   inter_node=sim.Link(10e-6, network.value * 1e9))
        return sim.simulate_training_step(model, cluster, dp=n, global_batch=n * per_gpu.value,
                                          overlap=overlap.value,
                                          dp_algorithm=algorithm.value, recompute="selective")

    def draw():
        counts = [n for n in POWERS if n >= 1]
        reports = {n: step(n) for n in counts}
        base = reports[1].tokens_per_second
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
        left.plot(counts, [reports[n].tokens_per_second / base for n in counts], "o-", label="simulated")
        left.plot(counts, counts, "--", color="grey", label="ideal")
        left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="speed-up (tokens/s)")
        left.legend(fontsize=8)
        left.axvline(gpus.value, color="red", linewidth=0.8)
        current = reports[gpus.value]
        sub = sim.Timeline(current.timeline.lane_names[:1], current.timeline.lanes[:1],
                           title=f"rank 0 of {gpus.value}")
        plot_timeline(sub, ax=right, labels=False)
        efficiency = current.tokens_per_second / (base * gpus.value)
        return (f"{gpus.value} GPUs: step {current.step_time * 1e3:.1f} ms, "
                f"{current.tokens_per_second:,.0f} tokens/s, scaling efficiency {100 * efficiency:.0f} %, "
                f"MFU {100 * current.mfu:.0f} %"), fig

    return explorer([gpus, network, algorithm, overlap, per_gpu], draw,
                    f"Data parallel scaling of {model.name}")


PIPELINE_BARS = ("idle", "forward", "backward", "comm")


def _pipeline_canvas():
    """One figure for every redraw, its legend and one bar collection per colour made once."""
    figure = Figure(figsize=(10, 4.2))
    figure.subplots_adjust(left=0.09, right=0.86, bottom=0.13, top=0.92)
    ax = figure.add_subplot()
    bars = {name: ax.add_collection(PolyCollection([], facecolors=COLORS[name], linewidths=0))
            for name in PIPELINE_BARS}
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in PIPELINE_BARS],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=8)
    ax.set_xlabel("time (forward of one micro-batch through one stage = 1)")
    return figure, ax, bars


def _box(start: float, end: float, low: float, height: float) -> list:
    return [(start, low), (end, low), (end, low + height), (start, low + height)]


def _redraw_pipeline(ax, bars, timeline) -> None:
    """Swap the bars' rectangles for ``timeline``'s (broken_barh per redraw would cost most of 150 ms)."""
    boxes: dict = {name: [] for name in PIPELINE_BARS}
    for y, lane in enumerate(timeline.lanes):
        boxes["idle"].append(_box(0, timeline.makespan, y - 0.4, 0.8))
        for event in lane:
            if event.kind == "comm":
                boxes["comm"].append(_box(event.start, event.end, y + 0.12, 0.28))
            else:
                phase = "forward" if event.meta["phase"] == "F" else "backward"
                boxes[phase].append(_box(event.start, event.end, y - 0.4, 0.5))
    for name, collection in bars.items():
        collection.set_verts(boxes[name])
    ax.set_yticks(range(len(timeline.lanes)), timeline.lane_names)
    ax.set_ylim(len(timeline.lanes) - 0.5, -0.5)
    ax.set_xlim(0, timeline.makespan)
    ax.set_title(timeline.title, fontsize=10)


def pipeline_explorer():
    """GPipe, 1F1B and interleaved 1F1B: bubble, makespan and activations held, as a timeline."""
    kind = choice("schedule", list(sim.vocabulary.PIPELINE_SCHEDULES), "1f1b")
    stages = slider("stages", [1, 2, 3, 4, 6, 8], 4)
    micro = slider("micro-batches", [1, 2, 4, 6, 8, 12, 16, 32], 8)
    virtual = slider("virtual stages", [1, 2, 3, 4], 1)
    comm = slider("hop / forward time", [0.0, 0.1, 0.25, 0.5, 1.0], 0.0)
    ratio = slider("backward / forward", [0.5, 1.0, 1.5, 2.0, 3.0], 2.0)

    figure, ax, bars = _pipeline_canvas()

    def draw():
        v = virtual.value if kind.value == "interleaved_1f1b" else 1
        schedule = sim.pipeline_schedule(kind.value, stages.value, micro.value, v)
        timeline = sim.simulate_pipeline(schedule, 1.0, ratio.value, t_comm=comm.value)
        _redraw_pipeline(ax, bars, timeline)
        formula = sim.bubble_fraction_formula(stages.value, micro.value, v)
        held = timeline.peak_activations[0]
        text = (f"makespan {timeline.makespan:.2f} (forward = 1, backward = {ratio.value:g}); bubble "
                f"{100 * timeline.bubble_fraction:.1f} % (formula (p-1)/(vm+p-1) = {100 * formula:.1f} % "
                f"without communication); stage 0 holds {held:g} micro-batches of activations")
        return text, RenderedFigure(figure)

    return explorer([kind, stages, micro, virtual, comm, ratio], draw, "Pipeline schedules")


def zero_memory_explorer(model=sim.LLAMA3_70B):
    """Memory per device for DP x TP x PP with ZeRO 0-3, recomputation and sequence parallel."""
    model_choice = choice("model", list(sim.MODELS), model.name)
    dp = slider("dp", POWERS[:9], 8)
    tp = slider("tp", [1, 2, 4, 8], 8)
    pp = slider("pp", [1, 2, 4, 8, 16], 4)
    zero = slider("ZeRO stage", [0, 1, 2, 3], 1)
    micro = slider("micro-batches", [1, 2, 4, 8, 16, 32], 8)
    recompute = choice("recompute", ["none", "selective", "full"], "selective")
    device = choice("device", list(sim.PRESETS), "h100")

    def draw():
        spec = sim.MODELS[model_choice.value]
        stages = sim.memory_per_device(spec, dp=dp.value, tp=tp.value if hasattr(spec, "hidden") else 1,
                                       pp=min(pp.value, spec.layers), zero_stage=zero.value,
                                       microbatches=micro.value, recompute=recompute.value,
                                       preset=device.value, schedule="1f1b")
        fig, ax = plt.subplots(figsize=(max(6, 3 + 0.8 * len(stages)), 3.5))
        plot_memory(stages, ax=ax, title=f"{spec.name}: memory per device by pipeline stage")
        worst = max(stages, key=lambda m: m.total)
        excess = (worst.total - worst.capacity) / 1e9
        verdict = "fits" if worst.fits else f"<b style='color:#b00'>out of memory by {excess:.1f} GB</b>"
        return f"worst stage {worst.total / 1e9:.1f} GB of {worst.capacity / 1e9:.0f} GB: {verdict}", fig

    return explorer([model_choice, dp, tp, pp, zero, micro, recompute, device], draw,
                    "ZeRO memory calculator (with pipeline parallel)")


PLACEMENTS = [("tp", "cp", "dp", "pp"), ("tp", "cp", "pp", "dp"), ("dp", "tp", "cp", "pp"),
              ("pp", "dp", "cp", "tp")]


def layout_explorer(model=sim.LLAMA3_70B):
    """Choose a 4D layout on N nodes: where each rank sits, step time, MFU, memory or out of memory."""
    nodes = slider("nodes", [1, 2, 4, 8, 16, 32, 64, 128], 8)
    tp = slider("tp", [1, 2, 4, 8], 8)
    pp = slider("pp", [1, 2, 4, 8], 4)
    cp = slider("cp", [1, 2, 4], 1)
    zero = slider("ZeRO stage", [0, 1], 1)
    micro = slider("micro-batches", [4, 8, 16, 32], 8)
    placement = choice("placement (innermost first)", [(" > ".join(p), p) for p in PLACEMENTS],
                       PLACEMENTS[0])

    def draw():
        cluster = sim.make_cluster(nodes.value, 8)
        others = tp.value * pp.value * cp.value
        if cluster.world_size % others:
            raise ValueError(f"tp x pp x cp = {others} does not divide the {cluster.world_size} GPUs; "
                             "lower one of them or add nodes")
        dp = cluster.world_size // others
        report = sim.simulate_training_step(model, cluster, dp=dp, tp=tp.value, pp=pp.value, cp=cp.value,
                                            zero_stage=zero.value, microbatches=micro.value,
                                            global_batch=dp * micro.value, recompute="selective",
                                            placement=placement.value)
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), height_ratios=[1, 1.3])
        plot_placement(nodes.value, 8, dp, tp.value, pp.value, cp.value, placement.value, ax=top, max_nodes=4)
        plot_timeline(report.timeline, ax=bottom, max_rows=16, labels=False)
        return f"dp={dp}: " + report.summary(), fig

    return explorer([nodes, tp, pp, cp, zero, micro, placement], draw, f"4D layout of {model.name}")
