"""Checks of chapter 08's rank-to-mesh exercise, against PyTorch's own ``init_device_mesh`` on real ranks.

The reference for torch's own layout is always torch's DeviceMesh (its coordinates and its process
groups), run on gloo CPU ranks; the visible cases with another placement order are written out as data.
This module never computes a mesh layout itself, so it cannot hand the exercise to a student. The
student's functions run only in child processes, under the exercise's ``Refusal`` (torch's
``torch.distributed.device_mesh`` and course_lib).
"""

from __future__ import annotations

from course_lib.grading.attempt.judge_runner import failures, run_answer
from course_lib.grading.attempt.rank_attempt import FailureText, fail_with
from course_lib.grading.attempt.refusals import Refusal
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch08_mesh.judge import compare, judge_calls
from course_lib.grading.checks.ch08_mesh.ranks import RANK_TIMEOUT_S, CallOutcome, calls_side, run_meshes

REFUSAL = Refusal("your rank-to-mesh mapping", modules=("torch.distributed.device_mesh",),
                  why="the exercise is a device mesh's index arithmetic; torch's DeviceMesh is what your "
                      "answer is checked against")
FUNCTIONS = ("mesh_coordinates", "mesh_groups", "groups_inside_node")
VISIBLE_MESHES = {8: [((2, 4), ("dp", "tp")), ((2, 1, 4), ("pp", "cp", "tp")),
                      ((2, 2, 2), ("tp", "dp", "pp"))]}
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


def student_answers(candidates: dict, calls: list, subject: str, refusal: Refusal = REFUSAL) -> list:
    """Each call's CallOutcome (its value, or what it raised), computed in one child process under the
    exercise's refusal; a refusal, a crash or a hang fails the check with its message."""
    students = [as_student_function(f, name, refusal=refusal) for name, f in candidates.items()]
    run = run_answer(calls_side, 1, students, calls, record=CallOutcome, text=FailureText(subject),
                     timeout=RANK_TIMEOUT_S, cases=calls)
    fail_with(failures([run]), f"{subject} did not run")
    return run.records[0]


def torch_reference(meshes_by_world: dict) -> dict:
    """torch's answers only, cached: {(shape, names, None): [{"coordinates", "groups"} per rank]}."""
    key = repr(sorted((w, tuple(m)) for w, m in meshes_by_world.items()))
    if key not in _REFERENCE_CACHE:
        runs = run_meshes(meshes_by_world)
        _REFERENCE_CACHE[key] = {mesh: [r.torch for r in ranks] for mesh, ranks in runs.items()}
    return _REFERENCE_CACHE[key]


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
    runs = run_meshes(meshes_by_world or VISIBLE_MESHES, students)
    problems = []
    for per_rank in runs.values():
        for rank, result in enumerate(per_rank):
            for student, key in zip(students, ("coordinates", "groups"), strict=True):
                outcome, args = result.answer(student.name), result.args
                if outcome.raised:
                    problems.append(f"on rank {rank}: {student.name}{args} raised {outcome.raised}")
                else:
                    compare(f"on rank {rank}: {student.name}", args, outcome.value, result.torch[key],
                            problems)
    fail_with(problems, "on real ranks, your layout and torch's DeviceMesh differ")
