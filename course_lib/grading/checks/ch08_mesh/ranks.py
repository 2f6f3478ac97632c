"""What runs on the ranks for chapter 08's mesh checks: the student's mapping called in one process, and
torch's DeviceMesh built on real gloo ranks beside it, each answer as plain data.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch.distributed as dist

from course_lib.grading.attempt.judge_runner import failures, ranks_of, run_answer, runs_until_failure
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with

RANK_TIMEOUT_S = 60


def plain(value):
    """A student's answer as plain data (numpy or torch integers become ints), anything else as its repr."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, dict):
        return {str(k) if isinstance(k, str) else repr(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return repr(value)[:200]


@dataclass(frozen=True)
class CallOutcome:
    """One call of the student's function: what it returned (plain data), or what it raised (as text)."""

    value: object = None
    raised: str | None = None


def _call(function, args):
    try:
        return {"value": plain(function(*args))}
    except Exception as error:   # noqa: BLE001 - reported to the judging side as the student's error
        return {"raised": f"{type(error).__name__}: {error}"[:300]}


def calls_side(rank, world_size, students, calls):
    """Rank side (one process): every (function name, args) call of the student's functions."""
    functions = {s.name: s.resolve() for s in students}
    return [_call(functions[name], args) for name, args in calls]


def _mesh_rank(rank, world_size, meshes, students):
    """Rank side: torch's coordinate and groups for every mesh, and (optionally) the student's answers.
    A mesh given with a rank tensor (the hidden checks' placed meshes) is built from it by DeviceMesh."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    functions = {s.name: s.resolve() for s in students}
    out = []
    for shape, names, placement, layout in meshes:
        mesh = (init_device_mesh("cpu", shape, mesh_dim_names=names) if layout is None
                else DeviceMesh("cpu", layout, mesh_dim_names=names))
        torch_answer = {"coordinates": dict(zip(names, mesh.get_coordinate(), strict=True)),
                        "groups": {n: dist.get_process_group_ranks(mesh.get_group(n)) for n in names}}
        args = (shape, names, rank) if placement is None else (shape, names, rank, placement)
        answers = {name: _call(f, args) for name, f in functions.items()}
        out.append({"torch": torch_answer, "answers": answers, "args": args})
    return out


@dataclass(frozen=True)
class MeshOutcome:
    """One rank of one mesh: torch's answer ({"coordinates": ..., "groups": ...}), the arguments the
    student's functions were called with there, and each one's call ({function name: its CallOutcome's
    fields}: read it with ``answer``)."""

    torch: dict
    answers: dict
    args: tuple

    def answer(self, name: str) -> CallOutcome:
        """The call of the student's function ``name`` on this rank, as a CallOutcome."""
        return CallOutcome(**self.answers[name])


def run_meshes(meshes_by_world: dict, students=(), timeout: float = RANK_TIMEOUT_S) -> dict:
    """{mesh: per rank its MeshOutcome}; a run that fails or hangs fails the check with its reason.

    A mesh is (shape, names) for torch's own layout, or (shape, names, placement, rank tensor). Every
    mesh is built with DeviceMesh on real gloo ranks; students' functions run beside it."""
    specs_by_world = {world_size: [tuple(m) + (None, None) if len(m) == 2 else tuple(m) for m in meshes]
                      for world_size, meshes in meshes_by_world.items()}
    subject = " and ".join(s.name for s in students) or "torch's DeviceMesh"

    def run_one(world_size: int):
        specs = specs_by_world[world_size]
        return run_answer(_mesh_rank, world_size, specs, list(students), record=MeshOutcome,
                          text=FailureText(subject), timeout=timeout, cases=specs)

    runs = runs_until_failure(run_one, specs_by_world)
    fail_with(failures(runs), "the ranks failed while building the meshes")
    results: dict = {}
    for run in runs:
        for each in ranks_of(run):
            shape, names, placement, _ = each.case
            results.setdefault((tuple(shape), tuple(names), placement), []).append(each.outcome)
    return results
