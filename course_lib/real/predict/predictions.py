"""Predict, then measure: the comparisons the chapters make on this machine, each one function that the
chapter's cell and ``benchmarks/bench_predictions.py`` both call (issue 39).

Every comparison predicts with the calibrated machine (``calibrate()``, the laptop preset of
``course_lib.sim.cluster.laptop``), measures with the one harness of ``calibration`` (median of the
slowest rank, back-to-back blocks, one warm-up), and returns a ``Comparison``. ``report()`` prints the
one line ``prediction <chapter> <what>: measured <x> ms, predicted <y> ms, ratio <r>``; where the
ratio falls outside ``WITHIN`` it then prints, lane by lane, where the measured time went (compute,
waiting, transfer) from the recorded timeline of measured parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

from course_lib.sim import (
    MLPSpec,
    Timeline,
    make_cluster,
    simulate_training_step,
)
from course_lib.sim.cluster.laptop import (
    WITHIN,
    breakdown_lines,
    compute_slowdown,
    laptop_preset,
    prediction_line,
    python_all_reduce_time,
    within,
)
from course_lib.sim.cluster.prediction_report import milliseconds

from ..chapter_runs.ddp_step import ddp_training
from ..launch.runner import run_ranks
from ..measure.calibration import predict_all_reduce
from ..measure.timing_harness import interleaved_lanes, measure_all_reduce
from .laptop_timelines import predict_pipeline_step, predict_ring_attention

__all__ = ["Comparison", "compare_all_reduce", "compare_ddp_step", "compare_epochs", "compare_timelines",
           "predict_pipeline_step", "predict_python_all_reduce", "predict_ring_attention"]


@dataclass
class Comparison:
    """One prediction held against one measurement (seconds), with the measured parts per lane."""

    chapter: str
    what: str
    measured: float
    predicted: float
    parts: Timeline | None = None        # recorded: one lane per rank, compute / comm / idle spans
    details: list[str] = field(default_factory=list)   # lines printed after the breakdown, if any
    overlap: str = "compute"             # who owns a second of parts under both compute and comm spans

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted

    @property
    def within(self) -> bool:
        return within(self.ratio)

    @property
    def line(self) -> str:
        return prediction_line(self.chapter, self.what, self.measured, self.predicted)

    def report(self) -> Comparison:
        """Print the prediction line; outside ``WITHIN``, where the measured time went, lane by lane."""
        print(self.line)
        if not self.within:
            where = "lane by lane (recorded parts)" if self.parts is not None else "run by run"
            print(f"  outside [{WITHIN[0]}, {WITHIN[1]}]: where the measured time went, {where}")
            if self.parts is not None:
                for line in breakdown_lines(self.parts, self.overlap):
                    print(line)
            for line in self.details:
                print(f"  {line}")
        return self


# -- an all-reduce sweep (chapters 00 and 02) --------------------------------------------------------

def compare_all_reduce(chapter: str, machine, world_size: int, sizes, predict=None,
                       repetitions: int | None = None) -> tuple[Comparison, list[float], list[float]]:
    """gloo's all-reduce at each of ``sizes`` bytes: predicted by ``predict(nbytes)`` (the calibrated
    segmented ring, ``predict_all_reduce(machine, ...)``, unless given) and measured by
    ``measure_all_reduce``. The comparison is of the whole sweep (every size once); returns it with
    the measured and predicted seconds per size. Outside the range, each size's latency and transfer
    parts are listed beside its measured time."""
    predict = predict or (lambda nbytes: predict_all_reduce(machine, nbytes, world_size))
    kwargs = {} if repetitions is None else {"repetitions": repetitions}
    measured = measure_all_reduce(world_size, sizes, **kwargs)
    predicted = [predict(n) for n in sizes]
    comparison = Comparison(chapter, f"all-reduce, {world_size} ranks, {len(sizes)} sizes summed",
                            sum(measured), sum(predicted))
    link = machine.intra_node
    comparison.details = []
    for n, m, p in zip(sizes, measured, predicted, strict=True):
        moving = _bytes_part(link, n, world_size)
        comparison.details.append(f"{n:>10,d} B: measured {m * 1e3:.3g} ms, predicted {p * 1e3:.3g} ms "
                                  f"(ratio {m / p:.2f}): latency {(p - moving) * 1e3:.3g} ms, "
                                  f"bytes {moving * 1e3:.3g} ms")
    return comparison, measured, predicted


def _bytes_part(link, nbytes, world_size) -> float:
    """The ring's bandwidth term 2(n-1)/n S/B: what the bytes cost, whatever the segments."""
    return 2 * (world_size - 1) / world_size * nbytes / link.bandwidth


# -- one DDP step (chapter 00) -----------------------------------------------------------------------

FLOAT32_SGD = dict(param_bytes=4, grad_bytes=4, optimizer_bytes=0)   # plain SGD keeps no extra state


def predict_ddp_step(machine, world_size: int, widths, global_batch: int):
    """The simulator's DDP step of an MLP of ``widths`` on the calibrated machine for ``world_size``
    ranks (compute slowed if the ranks outnumber the measured cores): forward, backward, and the
    gradient all-reduced in buckets overlapping the backward. Returns the StepReport."""
    calibration = getattr(machine, "calibration", None)
    preset = laptop_preset(calibration, world_size) if calibration is not None else machine
    cluster = make_cluster(1, world_size, preset=preset)
    return simulate_training_step(MLPSpec(tuple(widths), name="wide MLP"), cluster, dp=world_size,
                                  global_batch=global_batch, **FLOAT32_SGD)


def _ddp_parts(rank: int, world_size: int, widths, global_batch: int, repetitions: int):
    """Timed round-robin in one harness: the DDP step, its forward+backward with no communication
    (``no_sync``), the SGD update and zeroing, and one all-reduce of all the gradients' bytes."""
    model, optimizer, inputs, targets, step = ddp_training(rank, world_size, widths, global_batch)
    gradients = torch.zeros(sum(p.numel() for p in model.parameters()))

    def forward_backward():
        with model.no_sync():
            nn.functional.mse_loss(model(inputs), targets).backward()

    def update():
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    def all_reduce():
        dist.all_reduce(gradients)

    return interleaved_lanes([step, forward_backward, update, all_reduce], repetitions)


def _parts_timeline(lanes: list[list[float]]) -> Timeline:
    """Each rank's measured step split into its measured parts: compute (forward+backward alone, then
    the update), transfer (what the step takes beyond its compute, at most the all-reduce's own time),
    waiting (the rest: neither compute alone nor the all-reduce alone accounts for it)."""
    timeline = Timeline([f"rank {r}" for r in range(len(lanes))], title="one DDP step, measured parts")
    for rank, (step, forward_backward, update, all_reduce) in enumerate(lanes):
        compute = min(step, forward_backward + update)
        transfer = min(all_reduce, step - compute)
        timeline.add(rank, 0.0, compute, "compute", "forward+backward+update (no_sync)")
        timeline.add(rank, compute, compute + transfer, "comm", "gradient all-reduce")
        timeline.add(rank, compute + transfer, step, "idle", "unaccounted: cores shared")
    return timeline


def compare_ddp_step(chapter: str, machine, world_size: int, widths, global_batch: int,
                     repetitions: int = 7, timeout: float = 120) -> Comparison:
    """One real DDP step (torch DDP over gloo) against the simulator's on the calibrated machine."""
    if global_batch % world_size:
        raise ValueError(f"global_batch={global_batch} cannot be split evenly over {world_size} ranks")
    predicted = predict_ddp_step(machine, world_size, widths, global_batch)
    slowest, lanes = run_ranks(_ddp_parts, world_size, tuple(widths), global_batch, repetitions,
                               timeout=timeout)[0]
    step, forward_backward, update, all_reduce = slowest
    comparison = Comparison(chapter, "one DDP step", step, predicted.step_time, parts=_parts_timeline(lanes))
    parts = _predicted_parts(predicted.timeline)
    # The all-reduce measured alone is one call of every gradient: held against the same calibrated
    # segmented ring for one call of those bytes, so the parts compare like for like.
    gradient_bytes = FLOAT32_SGD["grad_bytes"] * MLPSpec(tuple(widths)).num_params
    alone = predict_all_reduce(machine, gradient_bytes, world_size)
    comparison.details = [f"measured alone (slowest rank): forward+backward {forward_backward * 1e3:.3g} ms, "
                          f"update {update * 1e3:.3g} ms, gradient all-reduce {all_reduce * 1e3:.3g} ms "
                          f"(predicted alone, gloo's segmented ring: {alone * 1e3:.3g} ms)",
                          f"predicted on rank 0: forward+backward {parts['matmuls'] * 1e3:.3g} ms of matmuls "
                          f"and {parts['memory'] * 1e3:.3g} ms of weights and gradients streamed, update "
                          f"{parts['update'] * 1e3:.3g} ms, all-reduce {parts['comm'] * 1e3:.3g} ms "
                          f"in buckets overlapping the backward"]
    return comparison


def _predicted_parts(timeline: Timeline) -> dict[str, float]:
    """Seconds of rank 0's simulated step by part: matmuls, memory streamed by the layers, the update,
    and communication (which overlaps the rest)."""
    parts = dict.fromkeys(("matmuls", "memory", "update", "comm"), 0.0)
    for event in timeline.events(0):
        seconds = event.end - event.start
        if event.kind == "comm":
            parts["comm"] += seconds
        elif "optimizer update" in event.label:
            parts["update"] += seconds
        elif "(memory)" in event.label:
            parts["memory"] += seconds
        else:
            parts["matmuls"] += seconds
    return parts


# -- epochs of data parallel through one rank and through a ring (chapter 03) -------------------------

def predict_python_all_reduce(machine, nbytes: float, ranks: int, algorithm: str,
                              which_ring: str = "") -> float:
    """Seconds of one all-reduce of ``nbytes`` on ``ranks`` processes of the calibrated ``machine``:
    written in Python from send/recv (``python_all_reduce_time``: the point-to-point link, Python's
    per-message cost, the stretch when the ranks outnumber the cores), except a ring that is gloo's own
    ``dist.all_reduce`` (``which_ring`` says "torch's"), which runs in C++ on the collective link,
    its latency stretched as much more than at calibration as the ranks outnumber the cores."""
    if ranks <= 1:
        return 0.0
    calibration = machine.calibration
    if algorithm == "ring" and which_ring.startswith("torch's"):
        stretch = compute_slowdown(calibration, ranks) / compute_slowdown(calibration, calibration.world_size)
        return stretch * predict_all_reduce(machine, nbytes, ranks)
    return python_all_reduce_time(calibration, nbytes, ranks, algorithm)


def compare_epochs(chapter: str, what: str, runs: dict) -> Comparison:
    """Several measured runs against their predictions, summed: ``runs`` maps a label (any tuple or
    string) to (measured seconds, predicted seconds), or to (measured, predicted, measured all-reduce
    seconds, predicted all-reduce seconds), the all-reduces' share of each, measured on the slowest rank
    beside its epoch. Outside the band, each run's pair is listed, split where given into the
    all-reduces and the rest (compute, and Python between the calls) for measured and predicted alike."""
    measured = sum(run[0] for run in runs.values())
    predicted = sum(run[1] for run in runs.values())
    comparison = Comparison(chapter, what, measured, predicted)
    comparison.details = [_epoch_detail(label, *run) for label, run in runs.items()]
    return comparison


def _epoch_detail(label, measured: float, predicted: float, measured_talk: float | None = None,
                  predicted_talk: float | None = None) -> str:
    line = f"{label}: measured {measured * 1e3:.3g} ms, predicted {predicted * 1e3:.3g} ms " \
           f"(ratio {measured / predicted:.2f})"
    if measured_talk is None or predicted_talk is None:
        return line
    rest, predicted_rest = measured - measured_talk, predicted - predicted_talk
    return (f"{line}; all-reduces measured {measured_talk * 1e3:.3g} ms, predicted "
            f"{predicted_talk * 1e3:.3g} ms (ratio {measured_talk / predicted_talk:.2f}); the rest measured "
            f"{rest * 1e3:.3g} ms, predicted {predicted_rest * 1e3:.3g} ms")


# -- a recorded run against a simulated timeline (chapters 10 and 11) -----------------------------------

def compare_timelines(chapter: str, what: str, measured: Timeline, predicted: Timeline,
                      overlap: str = "compute", details=(),
                      measured_seconds: float | None = None) -> Comparison:
    """A recorded run (``traffic_timeline`` of what the ranks returned) against the simulator's timeline
    of the same work: their makespans. Outside the band the recorded lanes are split into compute,
    waiting and transfer, each second counted once: ``overlap="transfer"`` where a recorded compute span
    wraps the collectives it calls (chapter 11's layer span around its all-to-alls), ``"compute"`` where
    transfers are posted and then hidden under compute (chapter 10's ring).

    ``measured_seconds``, when given, is what the prediction is held against instead: the same work timed
    unrecorded by the timing harness (a recorder sees every op through Python, the instrument's cost,
    not the work's); the recorded run then only says where the time went, and a line says what it took."""
    details, seconds = list(details), measured.makespan
    if measured_seconds is not None:
        details.insert(0, f"the lanes are the recorded run's: {milliseconds(measured.makespan)} ms with the "
                          f"recorders' cost, against {milliseconds(measured_seconds)} ms unrecorded")
        seconds = measured_seconds
    return Comparison(chapter, what, seconds, predicted.makespan, parts=measured, details=details,
                      overlap=overlap)
