"""Hidden checks of chapter 08 (instructor-only): the rank-to-mesh mapping on meshes the student never saw.

Meshes (1 to 4 dimensions, sizes 1 to 5, names a random order of pp/dp/cp/tp, half of them with a random
placement order, half with torch's) are drawn at grading time from a seed taken from os.urandom, named in
every failure. The expected layout is enumerated here, in the judging process: innermost placement
dimension fastest (torch's init_device_mesh: the last name innermost, row-major).
``check_mesh_matches_torch_hidden`` checks against torch's DeviceMesh itself on real gloo ranks, a placed
mesh included (built from its rank tensor). Student code runs only in children, under the exercise's
Refusal (torch.distributed.device_mesh and course_lib).

Test cells of solutions/08_nd_parallelism/08_nd_parallelism.ipynb, their points, and their hidden part:

  grade_id                    points  hidden check
  test_mesh_coordinates          3    check_mesh_coordinates_hidden(mesh_coordinates)
  test_mesh_groups               3    check_mesh_groups_hidden(mesh_groups)
  test_mesh_matches_torch        2    check_mesh_matches_torch_hidden(mesh_coordinates, mesh_groups)
  test_groups_inside_node        2    check_groups_inside_node_hidden(groups_inside_node)
  test_mesh_bad_shapes           2    check_mesh_bad_shapes_hidden(mesh_coordinates, mesh_groups,
                                                                   groups_inside_node)
The expected points of known-wrong submissions: autograde_tests/fixtures/mesh/expected_scores.json.
"""

from __future__ import annotations

import itertools
import math
import random

import torch

from course_lib.grading.attempt.exercise import Exercise
from course_lib.grading.checks.ch08_mesh.nodes import check_mesh_bad_shapes
from course_lib.grading.checks.ch08_mesh.visible import (
    REFUSAL,
    check_mesh_matches_torch,
    judge_calls,
    student_answers,
)

from ._seeds import fresh_seed

NAMES = ("pp", "dp", "cp", "tp")
EDGE_MESHES = [((1,), ("dp",), None), ((1, 1, 1, 1), ("tp", "pp", "dp", "cp"), None), ((5,), ("tp",), None),
               ((1, 6, 1), ("pp", "dp", "tp"), None), ((3, 1), ("tp", "dp"), ("tp", "dp")),
               ((2, 3, 1, 2), ("cp", "pp", "tp", "dp"), ("cp", "tp", "dp", "pp")),
               ((2, 3), ("dp", "tp"), ("dp", "tp"))]


def random_meshes(seed: int, count: int = 30) -> list:
    """(shape, names, placement or None) with 1-4 dimensions of size 1-5, plus the edge cases."""
    rng = random.Random(seed)
    meshes = list(EDGE_MESHES)
    while len(meshes) < count + len(EDGE_MESHES):
        ndim = rng.randint(1, 4)
        shape = tuple(rng.choice((1, 1, 2, 2, 3, 4, 5)) for _ in range(ndim))
        names = tuple(rng.sample(NAMES, ndim))
        meshes.append((shape, names, tuple(rng.sample(names, ndim)) if rng.random() < 0.5 else None))
    return meshes


def rank_of(shape, names, placement):
    """{coordinate tuple (in names' order): rank} with placement[0] varying fastest."""
    order = tuple(reversed(names)) if placement is None else tuple(placement)
    sizes = dict(zip(names, shape, strict=True))
    stride, strides = 1, {}
    for name in order:
        strides[name], stride = stride, stride * sizes[name]
    return {c: sum(i * strides[n] for i, n in zip(c, names, strict=True))
            for c in itertools.product(*(range(s) for s in shape))}


def enumerate_layout(shape, names, placement=None) -> list:
    """Per rank {"coordinates", "groups"}, ranks in order."""
    index = rank_of(shape, names, placement)
    out = [None] * len(index)
    for c, rank in index.items():
        groups = {n: [index[c[:d] + (k,) + c[d + 1:]] for k in range(shape[d])] for d, n in enumerate(names)}
        out[rank] = {"coordinates": dict(zip(names, c, strict=True)), "groups": groups}
    return out


def rank_tensor(shape, names, placement) -> torch.Tensor:
    """The mesh tensor DeviceMesh takes for a placed layout: entry at a coordinate is its rank."""
    tensor = torch.zeros(shape, dtype=torch.int64)
    for c, rank in rank_of(shape, names, placement).items():
        tensor[c] = rank
    return tensor


def _args(shape, names, last, placement):
    return (shape, names, last) if placement is None else (shape, names, last, placement)


def _check_layout(candidate, name: str, key: str) -> None:
    seed = fresh_seed(4)
    calls, expected = [], []
    for shape, names, placement in random_meshes(seed):
        layout = enumerate_layout(shape, names, placement)
        world = len(layout)
        ranks = range(world) if world <= 24 else random.Random(seed).sample(range(world), 24)
        for rank in ranks:
            calls.append(_args(shape, names, rank, placement))
            expected.append(layout[rank][key])
    outcomes = student_answers({name: candidate}, [(name, args) for args in calls], name)
    judge_calls(name, calls, outcomes, expected, f"{name} is wrong on hidden meshes (seed {seed}; the "
                "placement's first name varies fastest; without one, the last name does, as in torch)")


def check_mesh_coordinates_hidden(mesh_coordinates) -> None:
    _check_layout(mesh_coordinates, "mesh_coordinates", "coordinates")


def check_mesh_groups_hidden(mesh_groups) -> None:
    _check_layout(mesh_groups, "mesh_groups", "groups")


TORCH_MESHES = {8: [((8,), ("dp",)), ((4, 2), ("tp", "pp")), ((2, 1, 2, 2), ("dp", "cp", "pp", "tp")),
                    ((1, 2, 4, 1), ("pp", "tp", "dp", "cp"))],
                6: [((3, 2), ("dp", "tp")), ((2, 1, 3), ("cp", "pp", "dp")), ((1, 1, 6), ("tp", "pp", "cp"))]}
PLACED_TORCH_MESHES = {8: [((2, 2, 2), ("pp", "dp", "tp"), ("dp", "pp", "tp")),
                           ((4, 2), ("dp", "tp"), ("dp", "tp"))]}


def check_mesh_matches_torch_hidden(mesh_coordinates, mesh_groups) -> None:
    """On real gloo ranks, world sizes 6 and 8, size-1 dimensions and placed meshes included."""
    meshes = {world: list(m) for world, m in TORCH_MESHES.items()}
    for world, placed in PLACED_TORCH_MESHES.items():
        meshes[world] += [(s, n, p, rank_tensor(s, n, p)) for s, n, p in placed]
    check_mesh_matches_torch(mesh_coordinates, mesh_groups, meshes)


def check_groups_inside_node_hidden(groups_inside_node) -> None:
    seed = fresh_seed(4)
    calls, expected = [], []
    for shape, names, placement in random_meshes(seed, count=20):
        layout = enumerate_layout(shape, names, placement)
        world = math.prod(shape)
        for gpus_per_node in sorted({1, 2, 3, 4, 8, world}):
            calls.append(_args(shape, names, gpus_per_node, placement))
            expected.append({n: all(len({r // gpus_per_node for r in a["groups"][n]}) == 1 for a in layout)
                             for n in names})
    outcomes = student_answers({"groups_inside_node": groups_inside_node},
                               [("groups_inside_node", args) for args in calls], "groups_inside_node")
    judge_calls("groups_inside_node", calls, outcomes, expected,
                f"groups_inside_node is wrong on hidden meshes (seed {seed})")


HIDDEN_BAD_CALLS = [
    ("mesh_coordinates", ((0,), ("dp",), 0), "a dimension of size 0"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp", "pp"), 0), "three names for two dimensions"),
    ("mesh_coordinates", ((2, 2), ("tp", "tp"), 1), "the same name twice"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp"), -1), "a negative rank"),
    ("mesh_coordinates", ((1, 1), ("dp", "tp"), 1), "rank 1 in a one-rank mesh"),
    ("mesh_coordinates", ((2, 2.5), ("dp", "tp"), 0), "a fractional size"),
    ("mesh_coordinates", ((2, True), ("dp", "tp"), 0), "a size given as True"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp"), 0, ("tp",)), "a placement missing a dimension"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp"), 0, ("tp", "tp")), "a placement naming tp twice"),
    ("mesh_groups", ((3, 0, 2), ("pp", "dp", "tp"), 0), "a dimension of size 0"),
    ("mesh_groups", ((2, 4), ("dp", "tp"), 8), "rank 8 in a mesh of 8 ranks"),
    ("mesh_groups", ((), (), 0), "a mesh with no dimensions"),
    ("mesh_groups", ((2, 4), ("dp",), 3), "one name for two dimensions"),
    ("mesh_groups", ((2, 4), ("dp", "tp"), 3, ("pp", "dp")), "a placement naming another dimension"),
    ("groups_inside_node", ((2, -4), ("dp", "tp"), 8), "a negative size"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), -8), "a negative node size"),
    ("groups_inside_node", ((2, 4), ("dp",), 8), "one name for two dimensions"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), 2.5), "2.5 GPUs per node"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), True), "True GPUs per node"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), 4, ("dp",)), "a placement missing a dimension"),
]


def check_mesh_bad_shapes_hidden(mesh_coordinates, mesh_groups, groups_inside_node) -> None:
    check_mesh_bad_shapes(mesh_coordinates, mesh_groups, groups_inside_node, HIDDEN_BAD_CALLS)


POINTS = {
    "test_mesh_coordinates": 3,
    "test_mesh_groups": 3,
    "test_mesh_matches_torch": 2,
    "test_groups_inside_node": 2,
    "test_mesh_bad_shapes": 2,
}
EXERCISE = Exercise(
    "ch08_mesh", "08_nd_parallelism", answers=("mesh_coordinates", "mesh_groups", "groups_inside_node"),
    points=POINTS, fixtures="mesh", refusals=(REFUSAL,))
# grade_id -> (its hidden check, the answers the check is given): the rows instructor/registry.py collects
ROWS = {
    "test_mesh_coordinates": (check_mesh_coordinates_hidden, ("mesh_coordinates",)),
    "test_mesh_groups": (check_mesh_groups_hidden, ("mesh_groups",)),
    "test_mesh_matches_torch": (check_mesh_matches_torch_hidden, ("mesh_coordinates", "mesh_groups")),
    "test_groups_inside_node": (check_groups_inside_node_hidden, ("groups_inside_node",)),
    "test_mesh_bad_shapes": (
        check_mesh_bad_shapes_hidden, ("mesh_coordinates", "mesh_groups", "groups_inside_node")),
}
