"""Chapter 04's stage split run for real: every rank asks the student's function for the split, keeps its
own layers, and runs naive model-parallel steps whose per-layer work is in proportion to the case's times.

Each layer's forward and backward is a number of small matmuls in proportion to its modelled time; a rank
records, per step, when it computed (wall clock) and how much CPU time its layers took (thread time, which
a loaded machine does not stretch). The ranks send plain dicts, read back as ``StepRecord``s for judge.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.grading.attempt.judge_runner import run_answer
from course_lib.grading.attempt.rank_attempt import FailureText

from .model import NAME, Case, stage_ranges, structure_problems

STEP_MATMULS = 4000      # the whole step's work, all layers, forward and backward (~0.1 s on one core)
STEPS = 4                # the first warms up and is not judged
WIDTH = 64


@dataclass(frozen=True)
class StepRecord:
    """One rank's judged steps: the split it computed, and per step its compute spans [forward start,
    forward end, backward start, backward end], its CPU time, and when the step began and ended."""

    starts: list
    spans: list
    busy: list
    begins: list
    ends: list


def _work(matmuls: int, x: torch.Tensor) -> torch.Tensor:
    for _ in range(matmuls):
        x = torch.tanh(x @ x)
    return x


def _naive_steps(rank, world_size, student, arguments):
    torch.set_num_threads(1)
    function = student.resolve()
    answer = function(**arguments)
    starts = [int(s) for s in answer] if isinstance(answer, (list, tuple)) else repr(answer)
    case = Case(**{k: tuple(v) if isinstance(v, list) else v for k, v in arguments.items()})
    if not isinstance(starts, list) or structure_problems(case, starts) or len(starts) != world_size:
        return {"starts": starts, "spans": [], "busy": [], "begins": [], "ends": []}
    mine = stage_ranges(starts, case.layers)[rank]
    total = sum(case.forward) + sum(case.backward)
    forward = [round(case.forward[i] / total * STEP_MATMULS) for i in mine]
    backward = [round(case.backward[i] / total * STEP_MATMULS) for i in reversed(mine)]
    x = torch.full((WIDTH, WIDTH), 0.01)
    spans, busy, begins, ends = [], [], [], []
    for _ in range(STEPS):
        dist.barrier()
        begins.append(time.perf_counter())
        if rank > 0:
            dist.recv(x, src=rank - 1)
        f0, cpu = time.perf_counter(), time.thread_time()
        for matmuls in forward:
            x = _work(matmuls, x)
        f1, cpu_forward = time.perf_counter(), time.thread_time() - cpu
        if rank < world_size - 1:
            dist.send(x, dst=rank + 1)
            dist.recv(x, src=rank + 1)
        b0, cpu = time.perf_counter(), time.thread_time()
        for matmuls in backward:
            x = _work(matmuls, x)
        b1, cpu_backward = time.perf_counter(), time.thread_time() - cpu
        if rank > 0:
            dist.send(x, dst=rank - 1)
        ends.append(time.perf_counter())
        spans.append([f0, f1, b0, b1])
        busy.append(cpu_forward + cpu_backward)
    return {"starts": starts, "spans": spans[1:], "busy": busy[1:], "begins": begins[1:], "ends": ends[1:]}


def run_split(student, case: Case, timeout: float):
    """The student's split of ``case`` run as naive model-parallel steps on ``case.stages`` gloo ranks: a
    RankRun of one ``StepRecord`` per rank (or the reason there are none)."""
    return run_answer(_naive_steps, case.stages, student, case.arguments(), record=StepRecord,
                      text=FailureText(NAME), timeout=timeout, one_per_rank=True)
