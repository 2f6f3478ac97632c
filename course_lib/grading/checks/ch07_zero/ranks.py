"""The rank side of chapter 07's part-1 checks: each function run on real ranks with inputs the check built.

The rank side builds its inputs from a seed (or counts 1, 2, 3, ... for the visible case), runs one student
function under ``record_traffic`` and returns plain data; ch07_zero.py and the hidden checks judge it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.grading.attempt.judge_runner import run_training_answer
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.real import record_traffic

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "int64": torch.int64}
GATHERS = ("all_gather_into_tensor", "all_gather")
REDUCE_SCATTERS = ("reduce_scatter_tensor", "reduce_scatter")
# torch's own ZeRO and FSDP (FSDP2's fully_shard, FSDP1, the FlatParameter) would do the exercise.
TORCH_ZERO_AND_FSDP = ("torch.distributed.optim.zero_redundancy_optimizer", "torch.distributed.fsdp",
                       "torch.distributed._composable.fsdp")


def chapter_refusal(exercise: str) -> Refusal:
    """What every answer of chapter 07 may not run: torch's ZeRO and FSDP, and course_lib."""
    return Refusal(exercise, modules=TORCH_ZERO_AND_FSDP, allowed=("grading/checks/ch07_zero/probes.py",),
                   why="the exercise is to shard parameters, gradients and optimizer state yourself")


@dataclass(frozen=True)
class FlatCase:
    """A list of tensors to shard: their shapes and dtype names (two dtypes: must be refused)."""

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...] = ("float32",)
    counting: bool = False     # values 1, 2, 3, ... in order (times rank + 1 for gradients)

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def mixed(self) -> bool:
        return len(set(self.dtypes)) > 1

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtypes[0]]

    def shard_numel(self, world_size: int) -> int:
        return math.ceil(self.numel / world_size)

    def bytes_moved(self, world_size: int) -> int:
        """Bytes of one all-gather or reduce-scatter of the whole padded buffer (nccl-tests' count)."""
        return self.shard_numel(world_size) * world_size * self.dtype.itemsize

    def describe(self, world_size: int) -> str:
        kinds = "/".join(dict.fromkeys(self.dtypes))
        return (f"{world_size} ranks, {len(self.shapes)} {kinds} tensors of shapes "
                f"{[tuple(s) for s in self.shapes]} ({self.numel} elements)")


def case_tensors(case: FlatCase, seed: int, index: int, rank: int | None = None) -> list[torch.Tensor]:
    """The case's tensors: the same on every rank (parameters) unless ``rank`` is given (gradients)."""
    salt = 0 if rank is None else rank + 1
    if case.counting:
        flat = torch.arange(1, case.numel + 1, dtype=case.dtype) * max(salt, 1)
        return [piece.reshape(shape).clone() for piece, shape in
                zip(flat.split([math.prod(s) for s in case.shapes]), case.shapes, strict=True)]
    generator = torch.Generator().manual_seed((seed * 1_000_003 + index * 1009 + salt * 7919) % 2**63)
    dtypes = case.dtypes * len(case.shapes) if len(case.dtypes) == 1 else case.dtypes
    tensors = []
    for shape, name in zip(case.shapes, dtypes, strict=True):
        values = torch.randn(shape, generator=generator, dtype=torch.float64)
        values = (values * 100).round() if name == "int64" else values
        tensors.append(values.to(DTYPES[name]))
    return tensors


def _events(log) -> list[tuple[str, int]]:
    return [(str(event.op), int(event.nbytes)) for event in log.events]


def _call(function, *args) -> dict:
    """Call student code; an exception is data here (refusing mixed dtypes is what some cases want)."""
    try:
        return {"value": function(*args), "raised": None}
    except Exception as error:  # noqa: BLE001 - judged on the other side
        return {"value": None, "raised": f"{type(error).__name__}: {error}"[:300]}


def _plain(value):
    """Tensors and lists of tensors as detached copies; anything else as its type name."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
        return [v.detach().clone() for v in value]
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class ShardOutcome:
    """One rank's shard_parameters in one case: the shard (or its type's name), what it raised (None when
    nothing), and whether the tensors it was given were left unchanged."""

    shard: object
    raised: str | None
    unchanged: bool


@dataclass(frozen=True)
class GatherOutcome:
    """One rank's gather_parameters in one case: what it gave back, what it raised, its calls (op, nbytes)."""

    gathered: object
    raised: str | None
    events: list


@dataclass(frozen=True)
class ReduceScatterOutcome:
    """One rank's reduce_scatter_gradients in one case: its shard, what it raised, its calls, and the
    gradients summed by torch's all-reduce."""

    shard: object
    raised: str | None
    events: list
    all_reduced: list


def shard_side(rank, world_size, student, cases, seed):
    """Rank side of shard_parameters: each rank shards the same tensors; no communication allowed."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        tensors = case_tensors(case, seed, index)
        before = [t.clone() for t in tensors]
        with record_traffic(forbid=("collectives", "point_to_point"),
                            reason="shard_parameters needs no communication: every rank holds the tensors"):
            called = _call(function, tensors)
        unchanged = all(torch.equal(a, b) for a, b in zip(tensors, before, strict=True))
        outcomes.append({"shard": _plain(called["value"]), "raised": called["raised"],
                         "unchanged": unchanged})
    return outcomes


def _equal_sizes(shard: torch.Tensor) -> list[int]:
    """Every rank's shard length (the check's own all-gather, outside any recording)."""
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([shard.numel()]))
    return [int(s) for s in sizes]


def gather_side(rank, world_size, student, cases, seed, make_shard):
    """Rank side of gather_parameters: the shard comes from the check's ``make_shard``; only the gather is
    recorded. Shards of unequal lengths are reported, not handed to an all-gather (gloo would abort)."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        shard = make_shard(case_tensors(case, seed, index))
        sizes = _equal_sizes(shard)
        if len(set(sizes)) > 1:
            outcomes.append({"gathered": None, "events": [], "raised": (
                f"the shards have unequal lengths {sizes} on ranks 0..{world_size - 1}: an all-gather "
                "needs pieces of one size (pad the flat buffer to a multiple of the world size)")})
            continue
        with record_traffic() as log:
            called = _call(function, shard, [torch.Size(s) for s in case.shapes])
        outcomes.append({"gathered": _plain(called["value"]), "raised": called["raised"],
                         "events": _events(log)})
    return outcomes


def reduce_scatter_side(rank, world_size, student, cases, seed):
    """Rank side of reduce_scatter_gradients: each rank's own gradients; torch's all-reduce as reference."""
    function = student.resolve()
    outcomes = []
    for index, case in enumerate(cases):
        grads = case_tensors(case, seed, index, rank)
        summed = [g.clone() for g in grads]
        for tensor in summed:
            dist.all_reduce(tensor)
        with record_traffic() as log:
            called = _call(function, [g.clone() for g in grads])
        outcomes.append({"shard": _plain(called["value"]), "raised": called["raised"], "events": _events(log),
                         "all_reduced": summed})
    return outcomes


# What each rank side sends back per case
OUTCOMES = {shard_side: ShardOutcome, gather_side: GatherOutcome, reduce_scatter_side: ReduceScatterOutcome}


def run_part(side, world_size: int, name: str, candidate, cases, seed: int, *extra, timeout: float,
             refusal: Refusal):
    """``side`` on real ranks with the student's function ``name`` under the exercise's ``refusal``."""
    student = as_student_function(candidate, name, refusal=refusal)
    return run_training_answer(side, world_size, student, cases, seed, *extra, record=OUTCOMES[side],
                               name=name, timeout=timeout, cases=cases, seed=seed)
