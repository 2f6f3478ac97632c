"""Checks of chapter 08's rank-to-mesh exercise, against PyTorch's own ``init_device_mesh`` on real ranks.

The reference for torch's own layout is always torch's DeviceMesh (its coordinates and its process
groups), run on gloo CPU ranks; the visible cases with another placement order are written out as data.
This module never computes a mesh layout itself, so it cannot hand the exercise to a student. The
student's functions run only in child processes, under the exercise's ``Refusal`` (torch's
``torch.distributed.device_mesh`` and course_lib).
"""

from __future__ import annotations

import numbers

import torch.distributed as dist

from course_lib.dist import RankFailure, RanksHungError, run_ranks
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with, run_on_ranks
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function

REFUSAL = Refusal("your rank-to-mesh mapping", modules=("torch.distributed.device_mesh",),
                  why="the exercise is a device mesh's index arithmetic; torch's DeviceMesh is what your "
                      "answer is checked against")
FUNCTIONS = ("mesh_coordinates", "mesh_groups", "groups_inside_node")
VISIBLE_MESHES = {8: [((2, 4), ("dp", "tp")), ((2, 1, 4), ("pp", "cp", "tp")),
                      ((2, 2, 2), ("tp", "dp", "pp"))]}
RANK_TIMEOUT_S = 60
_REFERENCE_CACHE: dict = {}

# A visible case with a placement order other than torch's: mesh (2, 4) named ("dp", "tp") with "dp"
# innermost, so neighbouring ranks differ in dp. Written out rank by rank (data, not a layout function).
PLACED = ((2, 4), ("dp", "tp"), ("dp", "tp"))
PLACED_COORDINATES = [{"dp": 0, "tp": 0}, {"dp": 1, "tp": 0}, {"dp": 0, "tp": 1}, {"dp": 1, "tp": 1},
                      {"dp": 0, "tp": 2}, {"dp": 1, "tp": 2}, {"dp": 0, "tp": 3}, {"dp": 1, "tp": 3}]
PLACED_GROUPS = [{"dp": [0, 1], "tp": [0, 2, 4, 6]}, {"dp": [0, 1], "tp": [1, 3, 5, 7]},
                 {"dp": [2, 3], "tp": [0, 2, 4, 6]}, {"dp": [2, 3], "tp": [1, 3, 5, 7]},
                 {"dp": [4, 5], "tp": [0, 2, 4, 6]}, {"dp": [4, 5], "tp": [1, 3, 5, 7]},
                 {"dp": [6, 7], "tp": [0, 2, 4, 6]}, {"dp": [6, 7], "tp": [1, 3, 5, 7]}]
PLACED_INSIDE_NODE = {1: {"dp": False, "tp": False}, 2: {"dp": True, "tp": False},
                      4: {"dp": True, "tp": False}, 8: {"dp": True, "tp": True}}


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


def _call(function, args):
    try:
        return {"value": plain(function(*args))}
    except Exception as error:   # noqa: BLE001 - reported to the judging side as the student's error
        return {"error": f"{type(error).__name__}: {error}"[:300]}


def calls_side(rank, world_size, students, calls):
    """Rank side (one process): every (function name, args) call of the student's functions."""
    functions = {s.name: s.resolve() for s in students}
    return [_call(functions[name], args) for name, args in calls]


def student_answers(candidates: dict, calls: list, subject: str, refusal: Refusal = REFUSAL) -> list:
    """Each call's {"value"} or {"error"}, computed in one child process under the exercise's refusal;
    a refusal, a crash or a hang fails the check with its message."""
    students = [as_student_function(f, name, refusal=refusal) for name, f in candidates.items()]
    run = run_on_ranks(calls_side, 1, students, calls, text=FailureText(subject), timeout=RANK_TIMEOUT_S)
    fail_with([run.error] if run.error else [], f"{subject} did not run")
    return run.per_rank[0]


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
        out.append({"torch": torch_answer, "student": answers, "args": args})
    return out


def run_meshes(meshes_by_world: dict, students=(), timeout: float = RANK_TIMEOUT_S) -> dict:
    """{mesh: per rank {"torch": ..., "student": {function name: {"value"|"error"}}, "args": ...}}.

    A mesh is (shape, names) for torch's own layout, or (shape, names, placement, rank tensor). Every
    mesh is built with DeviceMesh on real gloo ranks; students' functions run beside it."""
    results = {}
    for world_size, meshes in meshes_by_world.items():
        specs = [tuple(m) + (None, None) if len(m) == 2 else tuple(m) for m in meshes]
        per_rank = run_ranks(_mesh_rank, world_size, specs, list(students), timeout=timeout,
                             plain_results=True)
        for index, (shape, names, placement, _) in enumerate(specs):
            results[(tuple(shape), tuple(names), placement)] = [per_rank[r][index] for r in range(world_size)]
    return results


def torch_reference(meshes_by_world: dict) -> dict:
    """torch's answers only, cached: {(shape, names, None): [{"coordinates", "groups"} per rank]}."""
    key = repr(sorted((w, tuple(m)) for w, m in meshes_by_world.items()))
    if key not in _REFERENCE_CACHE:
        runs = run_meshes(meshes_by_world)
        _REFERENCE_CACHE[key] = {mesh: [r["torch"] for r in ranks] for mesh, ranks in runs.items()}
    return _REFERENCE_CACHE[key]


def inside_node_from_groups(per_rank_groups: list, gpus_per_node: int) -> dict:
    """{name: every group along it lies in one node}, read off torch's groups (one dict per rank)."""
    names = per_rank_groups[0].keys()
    return {n: all(len({r // gpus_per_node for r in groups[n]}) == 1 for groups in per_rank_groups)
            for n in names}


def compare(name: str, args, got, expected, problems: list) -> None:
    """Append a message when ``got`` (plain data) differs from ``expected``."""
    if got != expected:
        call = f"{name}({', '.join(map(repr, args))})"
        problems.append(f"{call} returned {got!r}, expected {expected!r}")


def judge_calls(name: str, calls: list, outcomes: list, expected: list, what: str) -> None:
    problems: list = []
    for args, outcome, want in zip(calls, outcomes, expected, strict=True):
        if "error" in outcome:
            problems.append(f"{name}{tuple(args)} raised {outcome['error']}")
        else:
            compare(name, args, outcome["value"], want, problems)
    fail_with(problems, what)


def _visible_layout_calls(key: str) -> tuple[list, list]:
    """(calls, expected) on torch's own layout (from init_device_mesh) and on the written-out placed case."""
    calls, expected = [], []
    for (shape, names, _), per_rank in torch_reference(VISIBLE_MESHES).items():
        for rank, answer in enumerate(per_rank):
            calls.append((shape, names, rank))
            expected.append(answer[key])
    table = PLACED_COORDINATES if key == "coordinates" else PLACED_GROUPS
    shape, names, placement = PLACED
    calls += [(shape, names, rank, placement) for rank in range(8)]
    return calls, expected + table


def check_mesh_coordinates(mesh_coordinates) -> None:
    """Visible test: every rank's coordinates equal DeviceMesh.get_coordinate() on the same mesh, and the
    written-out coordinates of a mesh placed with "dp" innermost."""
    calls, expected = _visible_layout_calls("coordinates")
    outcomes = student_answers({"mesh_coordinates": mesh_coordinates},
                               [("mesh_coordinates", args) for args in calls], "mesh_coordinates")
    judge_calls("mesh_coordinates", calls, outcomes, expected,
                "mesh_coordinates disagrees with torch's init_device_mesh (or with the placed case)")
    print(f"mesh_coordinates: right on {len(calls)} calls, torch's layout and a placed one")


def check_mesh_groups(mesh_groups) -> None:
    """Visible test: every rank's group along each dimension equals torch's process group of it, and the
    written-out groups of the placed mesh."""
    calls, expected = _visible_layout_calls("groups")
    outcomes = student_answers({"mesh_groups": mesh_groups}, [("mesh_groups", args) for args in calls],
                               "mesh_groups")
    judge_calls("mesh_groups", calls, outcomes, expected,
                "mesh_groups disagrees with torch's init_device_mesh (or with the placed case)")
    print(f"mesh_groups: right on {len(calls)} calls, torch's layout and a placed one")


def check_mesh_matches_torch(mesh_coordinates, mesh_groups, meshes_by_world=None) -> None:
    """Visible test: your two functions, called in each real rank beside init_device_mesh, agree with it."""
    students = [as_student_function(mesh_coordinates, "mesh_coordinates", refusal=REFUSAL),
                as_student_function(mesh_groups, "mesh_groups", refusal=REFUSAL)]
    try:
        runs = run_meshes(meshes_by_world or VISIBLE_MESHES, students)
    except (RankFailure, RanksHungError) as error:
        raise AssertionError(f"the ranks failed while building the meshes: {error}") from None
    problems = []
    for per_rank in runs.values():
        for rank, result in enumerate(per_rank):
            for student, key in zip(students, ("coordinates", "groups"), strict=True):
                outcome, args = result["student"][student.name], result["args"]
                if "error" in outcome:
                    problems.append(f"on rank {rank}: {student.name}{args} raised {outcome['error']}")
                else:
                    compare(f"on rank {rank}: {student.name}", args, outcome["value"], result["torch"][key],
                            problems)
    fail_with(problems, "on real ranks, your layout and torch's DeviceMesh differ")
