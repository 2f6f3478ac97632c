"""Timing a pipeline stage's forwards and backwards in a real run, and drawing them as a Timeline.

``time_stage(module)`` notes when each forward and each backward of the module ran (module hooks, so the
code being timed stays as written); ``stage_timeline`` puts every rank's spans on one shared axis.
``stage_seconds_alone`` times each stage's forward and backward on one process with nothing else
running, by the course's harness: what a prediction of the pipeline starts from.
"""

from __future__ import annotations

import contextlib
import time

import torch

from course_lib.sim import Timeline

from ..launch.runner import run_ranks
from ..measure.timing_harness import REPETITIONS, interleaved_times


@contextlib.contextmanager
def time_stage(module):
    """Inside, each forward and backward of ``module`` adds ``[phase, start, end]`` to the yielded list.

    Times are ``time.perf_counter()`` seconds, one clock for every process of a machine.
    """
    spans: list = []
    started: dict = {}

    def forward_pre(*_):
        started["F"] = time.perf_counter()

    def forward_post(_module, _args, output):
        spans.append(["F", started.pop("F"), time.perf_counter()])
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(backward_pre)   # the backward starts when the output's gradient arrives

    def backward_pre(_gradient):
        started["B"] = time.perf_counter()

    def backward_post(*_):
        spans.append(["B", started.pop("B"), time.perf_counter()])

    # A backward ends when every parameter's gradient is ready: on the first stage no input needs one,
    # so a module backward hook would fire before the layers' own backward has run.
    parameters = tuple(p for p in module.parameters() if p.requires_grad)
    handles = [module.register_forward_pre_hook(forward_pre), module.register_forward_hook(forward_post),
               torch.autograd.graph.register_multi_grad_hook(parameters, backward_post)]
    try:
        yield spans
    finally:
        for handle in handles:
            handle.remove()


def stage_timeline(spans_per_stage, ops_per_stage, title: str = "measured pipeline",
                   lane_prefix: str = "stage") -> Timeline:
    """One lane per stage; the k-th forward (backward) span is labelled with the k-th F (B) op of its list.

    Times become seconds since the earliest span of any stage, so a simulated run can share the axis.
    """
    if len(spans_per_stage) != len(ops_per_stage):
        raise ValueError(f"got spans of {len(spans_per_stage)} stages but op lists of {len(ops_per_stage)}")
    origin = min((span[1] for spans in spans_per_stage for span in spans), default=0.0)
    timeline = Timeline([f"{lane_prefix} {s}" for s in range(len(spans_per_stage))], title=title)
    for stage, (spans, ops) in enumerate(zip(spans_per_stage, ops_per_stage, strict=True)):
        queues = {phase: [m for p, m in ops if p == phase] for phase in "FB"}
        for phase, start, end in spans:
            microbatch = queues[phase].pop(0) if queues[phase] else "?"
            timeline.add(stage, start - origin, end - origin, "compute", f"{phase}{microbatch}",
                         {"phase": phase, "microbatch": microbatch})
    return timeline


def stage_seconds_alone(stages, input_shape, repetitions: int = REPETITIONS,
                        timeout: float = 120) -> tuple[list[float], list[float]]:
    """(forward seconds, backward seconds) of one micro-batch of ``input_shape`` through each module of
    ``stages``, on one process alone: the harness's median after a warm-up, forward and forward +
    backward timed round-robin, the backward their difference (an output gradient of ones)."""
    stages = list(stages)
    if not stages or not all(isinstance(stage, torch.nn.Module) for stage in stages):
        raise ValueError("stages must be a non-empty list of modules, one per pipeline stage")
    both = run_ranks(_stages_alone, 1, stages, tuple(input_shape), repetitions, timeout=timeout)[0]
    return [f for f, _ in both], [max(0.0, fb - f) for f, fb in both]


def _stages_alone(rank, world_size, stages, input_shape, repetitions):
    torch.manual_seed(0)
    timed = []
    for stage in stages:
        x = torch.randn(input_shape, requires_grad=True)

        def forward(stage=stage, x=x):
            stage(x)

        def forward_backward(stage=stage, x=x):
            y = stage(x)
            y.backward(torch.ones_like(y))

        timed.append(tuple(interleaved_times([forward, forward_backward], repetitions)))
    return timed
