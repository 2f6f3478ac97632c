"""The simulator's timelines of chapters 05 and 10 on the calibrated machine: the work timed on one process
alone, slowed as the ranks share the measured cores, each hop the crowded ring's step (issue 39).
``course_lib.real.predict.predictions`` holds the comparisons they are set against and re-exports both.
"""

from __future__ import annotations

from course_lib.sim import Schedule, Timeline, ring_attention_timeline, simulate_pipeline
from course_lib.sim.cluster.laptop import compute_slowdown, python_hop_time

__all__ = ["predict_pipeline_step", "predict_ring_attention"]


def predict_ring_attention(machine, ranks: int, block_seconds: float, chunk_bytes: float,
                           title: str = "simulated ring") -> Timeline:
    """The simulator's ring attention (``ring_attention_timeline``) on ``ranks`` processes of the
    calibrated ``machine``: each block's work, timed on one process alone (``block_seconds``), slowed
    as the ranks share the measured cores (``compute_slowdown``), plus one ``python_hop_time`` (the
    crowded ring's measured step once the ranks outnumber the cores): a Python step's own cost (posting
    ``isend``/``irecv``, waiting, being woken) runs on the rank's time, and no overlap hides it
    (``benchmarks/bench_ring_step.py``). Each pass of a chunk of K and V (``chunk_bytes``) moves its
    bytes over the point-to-point link under the next block."""
    calibration = machine.calibration
    block = block_seconds * compute_slowdown(calibration, ranks) + python_hop_time(calibration, ranks)
    step = chunk_bytes / calibration.point_to_point.bandwidth
    return ring_attention_timeline(ranks, block, step, title=title)


def predict_pipeline_step(machine, schedule: Schedule, forward_seconds, backward_seconds,
                          activation_bytes: float) -> Timeline:
    """The simulator's pipeline step (``simulate_pipeline``) for ``schedule`` with its stages as processes
    of the calibrated ``machine``: each stage's forward and backward of one micro-batch timed on one
    process alone (``forward_seconds``, ``backward_seconds``: one per stage), slowed as the ranks share
    the measured cores (``compute_slowdown``: every stage at the rate all of them get computing at once),
    and each hop between stages one ``python_hop_time`` (the crowded ring's measured step once the ranks
    outnumber the cores) plus the activation's bytes (``activation_bytes``) on the point-to-point link.

    Every stage computes at the shared rate throughout, even while a neighbour waits: its waits last a
    millisecond or so, and the simulator does not hand their cores to the others.
    """
    for name, seconds in (("forward_seconds", forward_seconds), ("backward_seconds", backward_seconds)):
        if len(seconds) != schedule.stages:
            raise ValueError(f"{name} must hold one time per stage ({schedule.stages}), got {len(seconds)}")
    calibration = machine.calibration
    slowdown = compute_slowdown(calibration, schedule.stages)
    link = calibration.point_to_point
    hop = python_hop_time(calibration, schedule.stages) + activation_bytes / link.bandwidth
    return simulate_pipeline(schedule, [t * slowdown for t in forward_seconds],
                             [t * slowdown for t in backward_seconds], t_comm=hop)
