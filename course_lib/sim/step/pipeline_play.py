"""Playing a pipeline Schedule on one virtual clock per stage: when each op starts and ends, what it holds.

Each op starts once its stage is free and the op it depends on has finished (plus a hop when that op ran
on another stage): a forward waits for the previous virtual stage's forward, a backward for the next one's
backward, a weight gradient ("W") only for its own stage's backward.
"""

from __future__ import annotations

from collections import deque

from ..checks import amount
from ..timeline import Timeline
from .schedules import Schedule


def _dependency(schedule: Schedule, phase: str, mb: int, j: int):
    """(op it waits for, the stage that runs it), or (None, None) for the model's first forward."""
    last = schedule.stages * schedule.virtual_stages - 1
    if phase == "F":
        return (("F", mb, j - 1), schedule.stage_of(j - 1)) if j > 0 else (None, None)
    if phase == "B":
        return (("B", mb, j + 1), schedule.stage_of(j + 1)) if j < last else (("F", mb, j), None)
    return ("B", mb, j), None


def play_schedule(schedule: Schedule, fwd, bwd, t_comm: float = 0.0, wgt=None):
    """Start/end of every op: ``fwd[s][c]``/``bwd[s][c]``/``wgt[s][c]`` are op durations (a "B" whose "W"
    the stage does not list runs both, ``bwd + wgt``), ``t_comm`` a stage-to-stage hop.

    Returns (per stage a list of (op, start, end), peak chunk-microbatches held per stage): a micro-batch's
    activations are held from its forward until its backward, or until its "W" when that is split off.
    """
    p = schedule.stages
    wgt = wgt or [[0.0] * schedule.virtual_stages for _ in range(p)]
    done: dict = {}
    waiting: dict = {}
    ptr, clock = [0] * p, [0.0] * p
    held, peak = [0] * p, [0] * p
    placed = [[] for _ in range(p)]
    ready = deque(range(p))
    while ready:
        s = ready.popleft()
        ops, split = schedule.ops[s], schedule.split[s]
        while ptr[s] < len(ops):
            phase, mb, c = ops[ptr[s]]
            j = schedule.virtual_stage(s, c)
            dep, src = _dependency(schedule, phase, mb, j)
            start = clock[s]
            if dep is not None:
                t = done.get(dep)
                if t is None:
                    waiting.setdefault(dep, []).append(s)
                    break
                t = t + t_comm if src is not None and src != s else t
                start = t if t > start else start
            whole = (mb, c) not in split
            duration = (fwd[s][c] if phase == "F" else wgt[s][c] if phase == "W"
                        else bwd[s][c] + (wgt[s][c] if whole else 0.0))
            end = start + duration
            placed[s].append(((phase, mb, c), start, end))
            clock[s] = end
            key = (phase, mb, j)
            done[key] = end
            ptr[s] += 1
            held[s] += 1 if phase == "F" else -1 if phase == "W" or whole else 0
            peak[s] = max(peak[s], held[s])
            ready.extend(waiting.pop(key, ()))
    stuck = [s for s in range(p) if ptr[s] < len(schedule.ops[s])]
    if stuck:
        detail = "; ".join(f"stage {s} waits at {schedule.ops[s][ptr[s]]}" for s in stuck[:4])
        raise ValueError(f"the schedule deadlocks ({detail}): an op waits for one that is ordered after "
                         "another op waiting for it; reorder the stages' ops")
    return placed, peak


def _per_stage(value, stages: int, name: str) -> list:
    message = f"{name} must be a finite time >= 0 or a list of {stages} such times (one per stage)"
    try:   # float("2") would accept a string, so every item goes through the number check
        items = [value] * stages if not hasattr(value, "__len__") or isinstance(value, str) else list(value)
        values = [amount(name, x) for x in items]
    except (TypeError, ValueError):
        raise ValueError(f"{message}, got {value!r}") from None
    if len(values) != stages:
        raise ValueError(f"{message}, got {len(values)} values")
    return values


def simulate_pipeline(schedule: Schedule, t_forward, t_backward, t_comm: float = 0.0,
                      t_weight=0.0) -> Timeline:
    """Play ``schedule``: ``t_forward``/``t_backward`` are one micro-batch's time through a whole stage
    (a number or one per stage; an interleaved chunk takes 1/virtual_stages of it), ``t_comm`` a hop.

    With a split backward, ``t_backward`` is the input-gradient part ("B") and ``t_weight`` the
    weight-gradient part ("W"); a "B" whose "W" the stage does not list takes both. The Timeline has
    ``.makespan``, ``.bubble_fraction`` and ``.peak_activations[stage]`` (micro-batches of activations
    held at once, in whole-stage micro-batches, from a forward until its backward or its "W").
    """
    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a Schedule, for example pipeline_schedule('1f1b', 4, 8), "
                         f"got {schedule!r}")
    p, v = schedule.stages, schedule.virtual_stages
    amount("t_comm", t_comm, unit="seconds")
    fwd, bwd, wgt = ([[t / v] * v for t in _per_stage(value, p, name)] for value, name in
                     ((t_forward, "t_forward"), (t_backward, "t_backward"), (t_weight, "t_weight")))
    placed, peak = play_schedule(schedule, fwd, bwd, t_comm, wgt)
    timeline = Timeline([f"stage {s}" for s in range(p)],
                        title=f"{schedule.kind}: {p} stages, {schedule.microbatches} micro-batches"
                              + (f", {v} virtual stages" if v > 1 else ""))
    for s, ops in enumerate(placed):
        for (phase, mb, c), start, end in ops:
            _add_op(timeline, schedule, s, (phase, mb, c), start, end, t_comm)
    timeline.attach_pipeline(schedule, [x if v == 1 else x / v for x in peak])
    return timeline


def _add_op(timeline: Timeline, schedule: Schedule, s: int, op: tuple, start: float, end: float,
            t_comm: float) -> None:
    """One op's compute event and, when it sends to another stage, its hop."""
    phase, mb, c = op
    v = schedule.virtual_stages
    timeline.add(s, start, end, "compute", f"{phase}{mb}" if v == 1 else f"{phase}{mb}.{c}",
                 {"phase": phase, "microbatch": mb, "chunk": c})
    j = schedule.virtual_stage(s, c)
    target = j + 1 if phase == "F" else j - 1
    if phase == "W" or t_comm <= 0 or not 0 <= target < schedule.stages * v:
        return
    dst = schedule.stage_of(target)
    if dst != s:
        what = "activation" if phase == "F" else "gradient"
        timeline.add(s, end, end + t_comm, "comm", f"send {what} {mb} -> stage {dst}",
                     {"phase": phase, "microbatch": mb, "dst_stage": dst})
