"""Checks of chapter 08's rank-to-mesh exercise, against PyTorch's own ``init_device_mesh`` on real ranks.

The reference is always torch's DeviceMesh (its coordinates and its process groups), run on gloo CPU
ranks; this module never computes a mesh layout itself, so it cannot hand the exercise to a student.
"""

from __future__ import annotations

import io
import tokenize

import torch.distributed as dist

from course_lib.dist import RankFailure, RanksHungError, run_ranks
from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function

# Names that would hand the answer back to torch or the course (comments and strings are not searched).
FORBIDDEN_NAMES = {"init_device_mesh", "DeviceMesh", "device_mesh", "get_coordinate", "course_lib",
                   "get_process_group_ranks"}
VISIBLE_MESHES = {8: [((2, 4), ("dp", "tp")), ((2, 1, 4), ("pp", "cp", "tp")),
                      ((2, 2, 2), ("tp", "dp", "pp"))]}
RANK_TIMEOUT_S = 60
_REFERENCE_CACHE: dict = {}


def refuse_shortcuts(*candidates) -> None:
    """The exercise is the index arithmetic: torch's DeviceMesh and the course's own layout are off limits."""
    for candidate in candidates:
        student = as_student_function(candidate)
        try:
            tokens = tokenize.generate_tokens(io.StringIO(student.source_text()).readline)
            names = {t.string for t in tokens if t.type == tokenize.NAME}
        except (tokenize.TokenError, SyntaxError):
            names = set()
        used = sorted(names & FORBIDDEN_NAMES)
        if used:
            raise AssertionError(f"{student.name} uses {', '.join(used)}: work the layout out from the shape "
                                 "with your own arithmetic (torch's DeviceMesh is the reference)")


def _call(function, args):
    try:
        return {"value": function(*args)}
    except Exception as error:   # noqa: BLE001 - reported to the judging side as the student's error
        return {"error": f"{type(error).__name__}: {error}"}


def _mesh_rank(rank, world_size, meshes, students):
    """Rank side: torch's coordinate and groups for every mesh, and (optionally) the student's answers."""
    from torch.distributed.device_mesh import init_device_mesh

    functions = {s.name: s.resolve() for s in students}
    out = []
    for shape, names in meshes:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        torch_answer = {"coordinates": dict(zip(names, mesh.get_coordinate(), strict=True)),
                        "groups": {n: dist.get_process_group_ranks(mesh.get_group(n)) for n in names}}
        answers = {name: _call(f, (shape, names, rank)) for name, f in functions.items()}
        out.append({"torch": torch_answer, "student": answers})
    return out


def run_meshes(meshes_by_world: dict, students=(), timeout: float = RANK_TIMEOUT_S) -> dict:
    """{(shape, names): per rank {"torch": ..., "student": {function name: {"value"|"error"}}}}.

    Every mesh is built with init_device_mesh on real gloo ranks; students' functions run beside it.
    """
    results = {}
    for world_size, meshes in meshes_by_world.items():
        per_rank = run_ranks(_mesh_rank, world_size, list(meshes), list(students), timeout=timeout,
                             plain_results=True)
        for index, (shape, names) in enumerate(meshes):
            results[(tuple(shape), tuple(names))] = [per_rank[r][index] for r in range(world_size)]
    return results


def torch_reference(meshes_by_world: dict) -> dict:
    """torch's answers only, cached: {(shape, names): [{"coordinates": ..., "groups": ...} per rank]}."""
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
    plain = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in got.items()} \
        if isinstance(got, dict) else got
    if plain != expected:
        call = f"{name}({', '.join(map(repr, args))})"
        problems.append(f"{call} returned {got!r}, expected {expected!r}")


def _answers(candidate, name: str, calls: list) -> list:
    """The student's results on every call (a plain function here; see the hidden checks for isolation)."""
    student = as_student_function(candidate, name)
    function = student.resolve()
    return [_call(function, args) for args in calls]


def _check_against_torch(candidate, name: str, pick) -> None:
    refuse_shortcuts(as_student_function(candidate, name))
    reference = torch_reference(VISIBLE_MESHES)
    calls, expected = [], []
    for (shape, names), per_rank in reference.items():
        for rank, answer in enumerate(per_rank):
            calls.append((shape, names, rank))
            expected.append(pick(answer))
    problems = []
    for args, outcome, want in zip(calls, _answers(candidate, name, calls), expected, strict=True):
        if "error" in outcome:
            problems.append(f"{name}{args} raised {outcome['error']}")
        else:
            compare(name, args, outcome["value"], want, problems)
    fail_with(problems, f"{name} disagrees with torch's init_device_mesh")


def check_mesh_coordinates(mesh_coordinates) -> None:
    """Visible test: every rank's coordinates equal DeviceMesh.get_coordinate() on the same mesh."""
    _check_against_torch(mesh_coordinates, "mesh_coordinates", lambda answer: answer["coordinates"])


def check_mesh_groups(mesh_groups) -> None:
    """Visible test: every rank's group along each dimension equals torch's process group of it."""
    _check_against_torch(mesh_groups, "mesh_groups", lambda answer: answer["groups"])


def check_mesh_matches_torch(mesh_coordinates, mesh_groups, meshes_by_world=None) -> None:
    """Visible test: your two functions, called in each real rank beside init_device_mesh, agree with it."""
    students = [as_student_function(mesh_coordinates, "mesh_coordinates"),
                as_student_function(mesh_groups, "mesh_groups")]
    refuse_shortcuts(*students)
    try:
        runs = run_meshes(meshes_by_world or VISIBLE_MESHES, students)
    except (RankFailure, RanksHungError) as error:
        raise AssertionError(f"the ranks failed while building the meshes: {error}") from None
    problems = []
    for (shape, names), per_rank in runs.items():
        for rank, result in enumerate(per_rank):
            for student, key in zip(students, ("coordinates", "groups"), strict=True):
                outcome = result["student"][student.name]
                args = (shape, names, rank)
                if "error" in outcome:
                    problems.append(f"on rank {rank}: {student.name}{args} raised {outcome['error']}")
                else:
                    compare(f"on rank {rank}: {student.name}", args, outcome["value"], result["torch"][key],
                            problems)
    fail_with(problems, "on real ranks, your layout and torch's DeviceMesh differ")


def check_groups_inside_node(groups_inside_node) -> None:
    """Visible test: which dimensions' groups stay inside a node, against torch's groups."""
    refuse_shortcuts(as_student_function(groups_inside_node, "groups_inside_node"))
    problems = []
    for (shape, names), per_rank in torch_reference(VISIBLE_MESHES).items():
        for gpus_per_node in (1, 2, 4, 8):
            expected = inside_node_from_groups([a["groups"] for a in per_rank], gpus_per_node)
            args = (shape, names, gpus_per_node)
            outcome = _answers(groups_inside_node, "groups_inside_node", [args])[0]
            if "error" in outcome:
                problems.append(f"groups_inside_node{args} raised {outcome['error']}")
            else:
                compare("groups_inside_node", args, outcome["value"], expected, problems)
    fail_with(problems, "groups_inside_node is wrong (a node holds ranks node*G .. node*G + G-1)")


def raises_value_error(candidate, name: str, args) -> str | None:
    """None when the call raised ValueError, else what happened instead (isolated for a StudentFunction)."""
    student = as_student_function(candidate, name)
    try:
        if student.function is not None:
            returned = student.function(*args)
        else:
            [returned] = map_isolated(student, [args], name=name, timeout=30)
    except ValueError:
        return None
    except IsolatedCallError as error:
        text = str(error)
        return None if text.startswith("ValueError") else f"raised {text.splitlines()[0][:200]}"
    except Exception as error:   # noqa: BLE001 - the wrong kind of error is the student's mistake
        return f"raised {type(error).__name__}: {error}"
    return f"returned {returned!r}"


VISIBLE_BAD_CALLS = [
    ("mesh_coordinates", ((2, 0), ("dp", "tp"), 0), "a dimension of size 0"),
    ("mesh_coordinates", ((2, 4), ("dp",), 0), "one name for two dimensions"),
    ("mesh_coordinates", ((2, 4), ("dp", "dp"), 0), "the same name twice"),
    ("mesh_coordinates", ((2, 4), ("dp", "tp"), 8), "rank 8 in a mesh of 8 ranks (0..7)"),
    ("mesh_groups", ((2, -2), ("dp", "tp"), 0), "a negative size"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), 0), "0 GPUs per node"),
]


def check_mesh_bad_shapes(mesh_coordinates, mesh_groups, groups_inside_node, bad_calls=None) -> None:
    """Visible test: a shape, names, rank or node size that makes no sense raises ValueError."""
    functions = {"mesh_coordinates": mesh_coordinates, "mesh_groups": mesh_groups,
                 "groups_inside_node": groups_inside_node}
    problems = []
    for name, args, why in bad_calls or VISIBLE_BAD_CALLS:
        outcome = raises_value_error(functions[name], name, args)
        if outcome is not None:
            problems.append(f"{name}{args} ({why}) {outcome}; raise ValueError saying what is wrong")
    fail_with(problems, "bad input must raise ValueError")
