"""Checks of chapter 08's mapping, continued: which groups stay inside a node, and what bad input raises.

Expectations come from torch's DeviceMesh on real ranks (torch's own layout) or are written out as data
(ch08_mesh.PLACED); the student's functions run only in a child process under the exercise's refusal.
"""

from __future__ import annotations

from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.checks.ch08_mesh.judge import inside_node_from_groups
from course_lib.grading.checks.ch08_mesh.visible import (
    PLACED,
    PLACED_INSIDE_NODE,
    VISIBLE_MESHES,
    judge_calls,
    student_answers,
    torch_reference,
)


def check_groups_inside_node(groups_inside_node) -> None:
    """Visible test: which dimensions' groups stay inside a node, against torch's groups, and for the
    placed mesh."""
    calls, expected = [], []
    for (shape, names, _), per_rank in torch_reference(VISIBLE_MESHES).items():
        for gpus_per_node in (1, 2, 4, 8):
            calls.append((shape, names, gpus_per_node))
            expected.append(inside_node_from_groups([a["groups"] for a in per_rank], gpus_per_node))
    shape, names, placement = PLACED
    for gpus_per_node, want in PLACED_INSIDE_NODE.items():
        calls.append((shape, names, gpus_per_node, placement))
        expected.append(want)
    outcomes = student_answers({"groups_inside_node": groups_inside_node},
                               [("groups_inside_node", args) for args in calls], "groups_inside_node")
    judge_calls("groups_inside_node", calls, outcomes, expected,
                "groups_inside_node is wrong (a node holds ranks node*G .. node*G + G-1)")
    print(f"groups_inside_node: right on {len(calls)} calls")


VISIBLE_BAD_CALLS = [
    ("mesh_coordinates", ((2, 0), ("dp", "tp"), 0), "a dimension of size 0"),
    ("mesh_coordinates", ((2, 4), ("dp",), 0), "one name for two dimensions"),
    ("mesh_coordinates", ((2, 4), ("dp", "dp"), 0), "the same name twice"),
    ("mesh_coordinates", ((2, 4), ("dp", "tp"), 8), "rank 8 in a mesh of 8 ranks (0..7)"),
    ("mesh_coordinates", ((2, 4), ("dp", "tp"), 0, ("dp", "pp")), "a placement naming another dimension"),
    ("mesh_groups", ((2, -2), ("dp", "tp"), 0), "a negative size"),
    ("mesh_groups", ((2, 4), ("dp", "dp"), 0), "the same name twice"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), 0), "0 GPUs per node"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), 2.5), "2.5 GPUs per node"),
]


def check_mesh_bad_shapes(mesh_coordinates, mesh_groups, groups_inside_node, bad_calls=None) -> None:
    """Visible test: a shape, names, rank, placement or node size that makes no sense raises ValueError."""
    functions = {"mesh_coordinates": mesh_coordinates, "mesh_groups": mesh_groups,
                 "groups_inside_node": groups_inside_node}
    bad = bad_calls or VISIBLE_BAD_CALLS
    outcomes = student_answers(functions, [(name, args) for name, args, _ in bad], "the mesh functions")
    problems = []
    for (name, args, why), outcome in zip(bad, outcomes, strict=True):
        error = outcome.raised
        if error is None:
            problems.append(f"{name}{args} ({why}) returned {outcome.value!r}; raise ValueError saying "
                            "what is wrong")
        elif not error.startswith("ValueError"):
            problems.append(f"{name}{args} ({why}) raised {error}; raise ValueError saying what is wrong")
    fail_with(problems, "bad input must raise ValueError")
    print(f"bad input: {len(bad)} calls, each refused with ValueError")
