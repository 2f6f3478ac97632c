"""Pipeline schedules: what each stage runs, in order (GPipe, 1F1B, interleaved 1F1B, or any hand-made one).

A Schedule lists each stage's ordered ops (phase, microbatch, chunk). "F" is a forward, "B" a backward, and
"W" the weight-gradient half of a backward split in two (Qi et al. 2024): where a stage lists an op's "W",
its "B" computes only the input gradient. pipeline_play.py plays a Schedule on per-stage clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral

from ..checks import one_of, whole
from ..vocabulary import PIPELINE_PLACEMENTS, PIPELINE_SCHEDULES


@dataclass
class Schedule:
    """Per stage (device) the ordered ops ``(phase, microbatch, chunk)``, phase "F", "B" or "W".

    Chunk c of device s is virtual stage ``c*p + s`` with ``placement="loop"`` (Megatron's interleaving),
    or, with two chunks, ``s`` and ``2p-1-s`` with ``placement="v"`` (the V of ZB-V and DualPipeV).
    Every stage lists each forward and backward of its chunks once; a "W", if listed, after its "B".
    """

    kind: str
    stages: int
    microbatches: int
    virtual_stages: int
    ops: list
    placement: str = "loop"
    split: list = field(init=False, repr=False)   # per stage: the (microbatch, chunk) whose "W" it lists

    def __post_init__(self):
        _check_counts(self.stages, self.microbatches, self.virtual_stages)
        one_of("placement", self.placement, PIPELINE_PLACEMENTS)
        if self.placement == "v" and self.virtual_stages != 2:
            raise ValueError(f"placement='v' gives each stage two chunks (s and 2p-1-s): use "
                             f"virtual_stages=2, got {self.virtual_stages}")
        self.ops = [[_normalise(op) for op in stage] for stage in self.ops]
        if len(self.ops) != self.stages:
            raise ValueError(f"the schedule lists {len(self.ops)} stages but stages={self.stages}")
        self.split = [_check_stage(s, ops, self.microbatches, self.virtual_stages)
                      for s, ops in enumerate(self.ops)]

    def virtual_stage(self, stage: int, chunk: int) -> int:
        """The position in the model of ``chunk`` of ``stage`` (0 is the model's first layers)."""
        if self.placement == "v" and chunk == 1:
            return 2 * self.stages - 1 - stage
        return chunk * self.stages + stage

    def stage_of(self, virtual_stage: int) -> int:
        """The stage (device) that holds ``virtual_stage``."""
        p = self.stages
        if self.placement == "v":
            return virtual_stage if virtual_stage < p else 2 * p - 1 - virtual_stage
        return virtual_stage % p

    def __getitem__(self, stage: int) -> list:
        """The ordered ops of ``stage``."""
        return self.ops[stage]

    def __len__(self) -> int:
        return self.stages


def _check_stage(s: int, ops: list, microbatches: int, chunks: int) -> set:
    """Each F and B of every (microbatch, chunk) once, B after its F, W (optional) once and after its B;
    returns the (microbatch, chunk) pairs whose backward this stage splits."""
    seen, split = set(), set()
    for op in ops:
        phase, mb, c = op
        if phase not in "FBW" or not (0 <= mb < microbatches and 0 <= c < chunks):
            raise ValueError(f"stage {s}: op {op} is not (\"F\"|\"B\"|\"W\", microbatch < {microbatches}, "
                             f"chunk < {chunks})")
        if op in seen:
            raise ValueError(f"stage {s}: op {op} appears twice; each op must appear once")
        before = {"B": "F", "W": "B"}.get(phase)
        if before and (before, mb, c) not in seen:
            what = "backward" if phase == "B" else "weight gradient (W)"
            raise ValueError(f"stage {s}: {what} of microbatch {mb} comes before its "
                             f"{'forward' if phase == 'B' else 'backward (B)'}")
        seen.add(op)
        if phase == "W":
            split.add((mb, c))
    expected = {(ph, mb, c) for ph in "FB" for mb in range(microbatches) for c in range(chunks)}
    if not expected <= seen:
        raise ValueError(f"stage {s} is missing ops, for example {sorted(expected - seen)[:3]}")
    return split


def _normalise(op) -> tuple:
    """("F", 3) or ("f", 3, 0) -> ("F", 3, 0): hand-written schedules may leave out the chunk."""
    try:
        op = tuple(op)
    except TypeError:
        raise ValueError(f"a schedule op is (phase, microbatch[, chunk]), got {op!r}") from None
    if len(op) == 2:
        op = (*op, 0)
    whole_numbers = all(isinstance(x, Integral) and not isinstance(x, bool) for x in op[1:])
    if len(op) != 3 or not isinstance(op[0], str) or not whole_numbers:
        raise ValueError(f"a schedule op is (\"F\", \"B\" or \"W\", microbatch[, chunk]), got {op!r}")
    return (op[0].upper(), int(op[1]), int(op[2]))


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


def bubble_fraction_formula(stages: int, microbatches: int, virtual_stages: int = 1) -> float:
    """Idle share, equal stage times, no communication: (p-1) / (v m + p - 1) (Narayanan et al. 2021)."""
    _check_counts(stages, microbatches, virtual_stages)
    p, m, v = stages, microbatches, virtual_stages
    return (p - 1) / (v * m + p - 1)
