"""Pipeline schedules (GPipe, 1F1B, interleaved 1F1B) and their simulation on per-stage clocks.

A Schedule lists each stage's ordered ops (phase "F"/"B", microbatch, chunk); the simulator plays
them with cross-stage dependencies and returns a Timeline with makespan, bubble and peak activations.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..checks import amount, whole
from ..timeline import Timeline
from ..vocabulary import PIPELINE_SCHEDULES


@dataclass
class Schedule:
    """Per stage the ordered ops ``(phase, microbatch, chunk)``; chunk c of stage s is virtual stage c*p+s."""

    kind: str
    stages: int
    microbatches: int
    virtual_stages: int
    ops: list

    def __post_init__(self):
        _check_counts(self.stages, self.microbatches, self.virtual_stages)
        self.ops = [[_normalise(op) for op in stage] for stage in self.ops]
        if len(self.ops) != self.stages:
            raise ValueError(f"the schedule lists {len(self.ops)} stages but stages={self.stages}")
        expected = {(ph, mb, c) for ph in "FB" for mb in range(self.microbatches)
                    for c in range(self.virtual_stages)}
        for s, ops in enumerate(self.ops):
            seen = set()
            for op in ops:
                if op not in expected:
                    raise ValueError(f"stage {s}: op {op} is not (\"F\"|\"B\", microbatch < "
                                     f"{self.microbatches}, chunk < {self.virtual_stages})")
                if op in seen:
                    raise ValueError(f"stage {s}: op {op} appears twice; each op must appear once")
                if op[0] == "B" and ("F", op[1], op[2]) not in seen:
                    raise ValueError(f"stage {s}: backward of microbatch {op[1]} comes before its forward")
                seen.add(op)
            if len(seen) != len(expected):
                missing = sorted(expected - seen)[:3]
                raise ValueError(f"stage {s} is missing ops, for example {missing}")


    def __getitem__(self, stage: int) -> list:
        """The ordered ops of ``stage``."""
        return self.ops[stage]

    def __len__(self) -> int:
        return self.stages


def _normalise(op) -> tuple:
    """("F", 3) or ("f", 3, 0) -> ("F", 3, 0): hand-written schedules may leave out the chunk."""
    op = tuple(op)
    if len(op) == 2:
        op = (*op, 0)
    if len(op) != 3 or not isinstance(op[0], str):
        raise ValueError(f"a schedule op is (\"F\" or \"B\", microbatch[, chunk]), got {op!r}")
    return (op[0].upper(), op[1], op[2])


def _check_counts(stages, microbatches, virtual_stages):
    for name, value in (("stages", stages), ("microbatches", microbatches),
                        ("virtual_stages", virtual_stages)):
        whole(name, value)


def pipeline_schedule(kind: str, stages: int, microbatches: int, virtual_stages: int = 1) -> Schedule:
    """The op order of every stage for ``kind`` in gpipe, 1f1b, interleaved_1f1b (Megatron's order)."""
    if kind not in PIPELINE_SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {kind!r}; use one of {', '.join(PIPELINE_SCHEDULES)}")
    _check_counts(stages, microbatches, virtual_stages)
    p, m, v = int(stages), int(microbatches), int(virtual_stages)   # numpy integers become plain ints
    if kind != "interleaved_1f1b" and v != 1:
        raise ValueError(f"virtual_stages={v} needs kind='interleaved_1f1b'; {kind} has one chunk per stage")
    if kind == "interleaved_1f1b":
        if m < p or m % p:
            raise ValueError(f"interleaved 1F1B needs the micro-batch count to be a multiple of the stage "
                             f"count and at least it (got microbatches={m}, stages={p}): use "
                             f"microbatches={max(p, -(-m // p) * p)}, or kind='1f1b'")
        return Schedule(kind, p, m, v, [_interleaved(s, p, m, v) for s in range(p)])
    if kind == "gpipe":
        ops = [[("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)] for _ in range(p)]
        return Schedule(kind, p, m, 1, ops)
    ops = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        stage = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            stage += [("F", warmup + i, 0), ("B", i, 0)]
        stage += [("B", i, 0) for i in range(m - warmup, m)]
        ops.append(stage)
    return Schedule(kind, p, m, 1, ops)


def _interleaved(s: int, p: int, m: int, v: int) -> list:
    """Megatron-LM's interleaved order: groups of p micro-batches cycle through the v chunks."""
    total = m * v

    def op(phase, k):
        chunk = (k // p) % v
        return (phase, (k // (p * v)) * p + k % p, chunk if phase == "F" else v - 1 - chunk)

    warmup = total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total)
    ops = [op("F", k) for k in range(warmup)]
    for i in range(total - warmup):
        ops += [op("F", warmup + i), op("B", i)]
    ops += [op("B", k) for k in range(total - warmup, total)]
    return ops


def play_schedule(schedule: Schedule, fwd, bwd, t_comm: float = 0.0):
    """Start/end of every op: ``fwd[s][c]``/``bwd[s][c]`` are op durations, ``t_comm`` a stage-to-stage hop.

    Returns (per stage a list of (op, start, end), peak chunk-microbatches held per stage).
    """
    p, v = schedule.stages, schedule.virtual_stages
    last = p * v - 1
    done: dict = {}
    waiting: dict = {}
    ptr, clock = [0] * p, [0.0] * p
    held, peak = [0] * p, [0] * p
    placed = [[] for _ in range(p)]
    ready = deque(range(p))
    while ready:
        s = ready.popleft()
        ops = schedule.ops[s]
        while ptr[s] < len(ops):
            phase, mb, c = ops[ptr[s]]
            j = c * p + s
            if phase == "F":
                dep, src = (("F", mb, j - 1), (j - 1) % p) if j > 0 else (None, s)
            else:
                dep, src = (("B", mb, j + 1), (j + 1) % p) if j < last else (("F", mb, j), s)
            start = clock[s]
            if dep is not None:
                t = done.get(dep)
                if t is None:
                    waiting.setdefault(dep, []).append(s)
                    break
                t = t + t_comm if src != s else t
                start = t if t > start else start
            end = start + (fwd[s][c] if phase == "F" else bwd[s][c])
            placed[s].append(((phase, mb, c), start, end))
            clock[s] = end
            key = (phase, mb, j)
            done[key] = end
            ptr[s] += 1
            held[s] += 1 if phase == "F" else -1
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


def simulate_pipeline(schedule: Schedule, t_forward, t_backward, t_comm: float = 0.0) -> Timeline:
    """Play ``schedule``: ``t_forward``/``t_backward`` are one micro-batch's time through a whole stage
    (a number or one per stage; an interleaved chunk takes 1/virtual_stages of it), ``t_comm`` a hop.

    The Timeline has ``.makespan``, ``.bubble_fraction`` and ``.peak_activations[stage]`` (micro-batches
    of activations held at once, in whole-stage micro-batches).
    """
    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a Schedule, for example pipeline_schedule('1f1b', 4, 8), "
                         f"got {schedule!r}")
    p, v = schedule.stages, schedule.virtual_stages
    amount("t_comm", t_comm, unit="seconds")
    fwd = [[t / v] * v for t in _per_stage(t_forward, p, "t_forward")]
    bwd = [[t / v] * v for t in _per_stage(t_backward, p, "t_backward")]
    placed, peak = play_schedule(schedule, fwd, bwd, t_comm)
    timeline = Timeline([f"stage {s}" for s in range(p)],
                        title=f"{schedule.kind}: {p} stages, {schedule.microbatches} micro-batches"
                              + (f", {v} virtual stages" if v > 1 else ""))
    last = p * v - 1
    for s, ops in enumerate(placed):
        for (phase, mb, c), start, end in ops:
            label = f"{phase}{mb}" if v == 1 else f"{phase}{mb}.{c}"
            timeline.add(s, start, end, "compute", label, {"phase": phase, "microbatch": mb, "chunk": c})
            j = c * p + s
            target = j + 1 if phase == "F" else j - 1
            if t_comm > 0 and 0 <= target <= last and target % p != s:
                what = "activation" if phase == "F" else "gradient"
                timeline.add(s, end, end + t_comm, "comm", f"send {what} {mb} -> stage {target % p}",
                             {"phase": phase, "microbatch": mb, "dst_stage": target % p})
    timeline.attach_pipeline(schedule, [x if v == 1 else x / v for x in peak])
    return timeline


def bubble_fraction_formula(stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Idle share, equal stage times, no communication: (p-1) / (v m + p - 1) (Narayanan et al. 2021)."""
    _check_counts(stages, microbatches, virtual_stages)
    p, m, v = stages, microbatches, virtual_stages
    return (p - 1) / (v * m + p - 1)
