"""Checks of chapter 07, part 1 (flat-parameter sharding): the student's functions on real ranks.

The rank side builds its inputs from a seed, runs the student's function under ``record_traffic`` and
returns plain data; the judging side holds the expectations. Visible checks judge by round trips and
against ``dist.all_reduce``; the instructor's hidden checks also rebuild each expected shard themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from course_lib.dist import record_traffic
from course_lib.grading.attempt.rank_attempt import attempt, fail_with
from course_lib.grading.attempt.student_function import StudentFunction, as_student_function

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
          "int64": torch.int64}
GATHERS = ("all_gather_into_tensor", "all_gather")
REDUCE_SCATTERS = ("reduce_scatter_tensor", "reduce_scatter")
VISIBLE_TIMEOUT_S = 20


@dataclass(frozen=True)
class FlatCase:
    """A list of tensors to shard: their shapes and dtype names (two dtypes: must be refused)."""

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...] = ("float32",)

    @property
    def numel(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    @property
    def mixed(self) -> bool:
        return len(set(self.dtypes)) > 1

    def shard_numel(self, world_size: int) -> int:
        return math.ceil(self.numel / world_size)

    def bytes_moved(self, world_size: int) -> int:
        """Bytes of one all-gather or reduce-scatter of the whole padded buffer (nccl-tests' count)."""
        return self.shard_numel(world_size) * world_size * DTYPES[self.dtypes[0]].itemsize

    def describe(self, world_size: int) -> str:
        kinds = "/".join(dict.fromkeys(self.dtypes))
        return (f"{world_size} ranks, {len(self.shapes)} {kinds} tensors of shapes "
                f"{[tuple(s) for s in self.shapes]} ({self.numel} elements)")


def case_tensors(case: FlatCase, seed: int, index: int, rank: int | None = None) -> list[torch.Tensor]:
    """The case's tensors: the same on every rank (parameters) unless ``rank`` is given (gradients)."""
    salt = 0 if rank is None else rank + 1
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


def gather_side(rank, world_size, student, cases, seed, make_shard):
    """Rank side of gather_parameters: the shard comes from ``make_shard`` (a StudentFunction or the
    instructor's own); only the gather is recorded."""
    function = student.resolve()
    shard_of = make_shard.resolve() if isinstance(make_shard, StudentFunction) else make_shard
    outcomes = []
    for index, case in enumerate(cases):
        shard = shard_of(case_tensors(case, seed, index))
        with record_traffic() as log:
            called = _call(function, shard, [torch.Size(s) for s in case.shapes])
        outcomes.append({"gathered": _plain(called["value"]), "raised": called["raised"],
                         "events": _events(log)})
    return outcomes


def reduce_scatter_side(rank, world_size, student, cases, seed, gather):
    """Rank side of reduce_scatter_gradients: each rank's own gradients; torch's all-reduce for reference;
    with ``gather`` (visible checks) the shard is also gathered back by the student's gather_parameters."""
    function = student.resolve()
    gather_fn = gather.resolve() if gather is not None else None
    outcomes = []
    for index, case in enumerate(cases):
        grads = case_tensors(case, seed, index, rank)
        summed = [g.clone() for g in grads]
        for tensor in summed:
            dist.all_reduce(tensor)
        with record_traffic() as log:
            called = _call(function, [g.clone() for g in grads])
        outcome = {"shard": _plain(called["value"]), "raised": called["raised"], "events": _events(log),
                   "all_reduced": summed}
        if gather_fn is not None and called["raised"] is None:
            outcome["regathered"] = _plain(_call(gather_fn, called["value"],
                                                 [torch.Size(s) for s in case.shapes])["value"])
        outcomes.append(outcome)
    return outcomes


def close(actual, expected) -> bool:
    if not isinstance(actual, torch.Tensor):
        return False
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return False
    if expected.is_floating_point():
        tolerance = 2e-2 if expected.dtype == torch.bfloat16 else 1e-5
        return bool(torch.allclose(actual.double(), expected.double(), rtol=tolerance, atol=tolerance))
    return bool(torch.equal(actual, expected))


def shard_problems(case: FlatCase, world_size: int, outcome: dict) -> list[str]:
    """Size, dtype, refusal of mixed dtypes, inputs untouched: what can be said of one rank's shard alone."""
    where = case.describe(world_size)
    if case.mixed:
        return [] if outcome["raised"] and outcome["raised"].startswith("TypeError") else [
            f"{where}: tensors of different dtypes cannot share one flat buffer: raise TypeError "
            f"(got {outcome['raised'] or 'no error'})"]
    if outcome["raised"]:
        return [f"{where}: raised {outcome['raised']}"]
    shard, want = outcome["shard"], case.shard_numel(world_size)
    problems = [] if outcome["unchanged"] else [f"{where}: the tensors you were given changed: leave them"]
    if not isinstance(shard, torch.Tensor):
        return problems + [f"{where}: expected a tensor, got {shard}"]
    if shard.dim() != 1 or shard.numel() != want or shard.dtype != DTYPES[case.dtypes[0]]:
        problems.append(f"{where}: expected a 1-D {case.dtypes[0]} shard of ceil({case.numel}/{world_size})"
                        f" = {want} elements, got shape {tuple(shard.shape)}, {shard.dtype}")
    return problems


def traffic_problems(case: FlatCase, world_size: int, events, allowed: tuple[str, ...], what: str) -> list:
    """Exactly one collective of ``allowed``, moving the whole padded buffer, and nothing else."""
    where = case.describe(world_size)
    want = case.bytes_moved(world_size)
    if len(events) != 1:
        return [f"{where}: expected exactly one {what}, recorded {[op for op, _ in events] or 'no call'}"]
    op, nbytes = events[0]
    if op not in allowed:
        return [f"{where}: expected one {what} ({' or '.join(allowed)}), recorded {op}"]
    if nbytes != want:
        return [f"{where}: the {what} moved {nbytes} bytes; the padded buffer is {world_size} shards of "
                f"{case.shard_numel(world_size)} elements = {want} bytes"]
    return []


VISIBLE_CASES = (FlatCase(((3, 4), (5,))), FlatCase(((2, 2), (3,)), ("float32", "float64")))


def _visible_run(side, world_size: int, name: str, candidate, cases, *partners):
    """``side`` on real ranks with the student's ``name`` (and the partner functions it relies on, as
    (name, function) pairs); fails the check at once when the run itself did not complete."""
    student = as_student_function(candidate, name)
    helpers = [as_student_function(function, partner) for partner, function in partners]
    run = attempt(side, world_size, student, cases, 7, *helpers, name=name, timeout=VISIBLE_TIMEOUT_S)
    fail_with([run.error] if run.error else [], f"{name} did not run")
    return run


def check_shard_parameters(shard_parameters, world_size: int = 3) -> None:
    """Visible test: one shard per rank, ceil(numel / N) long; together the shards are the tensors."""
    run = _visible_run(shard_side, world_size, "shard_parameters", shard_parameters, VISIBLE_CASES)
    problems = [p for rank in range(world_size) for case, outcome in zip(VISIBLE_CASES, run.per_rank[rank],
                                                                          strict=True)
                for p in shard_problems(case, world_size, outcome)]
    fail_with(problems, "shard_parameters gave wrong shards")
    case = VISIBLE_CASES[0]
    joined = torch.cat([run.per_rank[rank][0]["shard"] for rank in range(world_size)])
    flat = torch.cat([t.reshape(-1) for t in case_tensors(case, 7, 0)])
    if not torch.equal(joined[:case.numel], flat) or joined[case.numel:].any():
        fail_with([f"{case.describe(world_size)}: rank 0's shard, then rank 1's, ... should be the tensors "
                   f"flattened in order, then zeros; got {joined.tolist()}, expected {flat.tolist()} "
                   "+ zeros"],
                  "shard_parameters gave wrong shards")
    print(f"shard_parameters: {world_size} ranks, {case.numel} elements -> shards of "
          f"{case.shard_numel(world_size)}, in order, zero-padded; mixed dtypes refused")


def check_gather_parameters(gather_parameters, shard_parameters, world_size: int = 3) -> None:
    """Visible test: your gather undoes your shard, with one all-gather of the padded buffer."""
    cases = VISIBLE_CASES[:1]
    run = _visible_run(gather_side, world_size, "gather_parameters", gather_parameters, cases,
                       ("shard_parameters", shard_parameters))
    problems = []
    for rank, (outcome,) in enumerate(run.per_rank):
        expected = case_tensors(cases[0], 7, 0)
        got = outcome["gathered"]
        if outcome["raised"] or not isinstance(got, list) or len(got) != len(expected) or not all(
                close(a, b) for a, b in zip(got, expected, strict=True)):
            problems.append(f"rank {rank}, {cases[0].describe(world_size)}: expected the original tensors "
                            f"(shapes {[tuple(t.shape) for t in expected]}), got "
                            f"{outcome['raised'] or summarize(got)}")
        problems += traffic_problems(cases[0], world_size, outcome["events"], GATHERS, "all-gather")
    fail_with(problems, "gather_parameters(shard_parameters(tensors), shapes) is not the tensors")
    print(f"gather_parameters: the {world_size} shards gathered back into the tensors with one all-gather "
          f"of {cases[0].bytes_moved(world_size)} bytes")


def check_reduce_scatter_gradients(reduce_scatter_gradients, gather_parameters, world_size: int = 3) -> None:
    """Visible test: gathering the shards of your reduce-scatter gives dist.all_reduce's sums."""
    cases = VISIBLE_CASES[:1]
    run = _visible_run(reduce_scatter_side, world_size, "reduce_scatter_gradients", reduce_scatter_gradients,
                       cases, ("gather_parameters", gather_parameters))
    problems = []
    for rank, (outcome,) in enumerate(run.per_rank):
        where = f"rank {rank}, {cases[0].describe(world_size)}"
        if outcome["raised"]:
            problems.append(f"{where}: raised {outcome['raised']}")
            continue
        shard, want = outcome["shard"], cases[0].shard_numel(world_size)
        if not isinstance(shard, torch.Tensor) or shard.shape != (want,):
            problems.append(f"{where}: expected a shard of {want} elements, got {summarize(shard)}")
        got = outcome.get("regathered")
        if not isinstance(got, list) or not all(close(a, b) for a, b in
                                                zip(got, outcome["all_reduced"], strict=False)):
            problems.append(f"{where}: gather_parameters(your shard) should equal dist.all_reduce of the "
                            f"gradients, {[t.reshape(-1)[:3].tolist() for t in outcome['all_reduced']]}"
                            f"...; got {summarize(got)}")
        problems += traffic_problems(cases[0], world_size, outcome["events"], REDUCE_SCATTERS,
                                     "reduce-scatter")
    fail_with(problems, "reduce_scatter_gradients gave wrong shards")
    print(f"reduce_scatter_gradients: the shards hold dist.all_reduce's sums, with one reduce-scatter of "
          f"{cases[0].bytes_moved(world_size)} bytes")


def summarize(value) -> str:
    """A short description of what a student's function returned, for messages."""
    if isinstance(value, list):
        return f"{len(value)} tensors of shapes {[tuple(getattr(v, 'shape', ())) for v in value]}"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return str(value)
