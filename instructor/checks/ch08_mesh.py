"""Hidden checks of chapter 08 (instructor-only): the rank-to-mesh mapping on meshes the student never saw.

Meshes (1 to 4 dimensions, sizes 1 to 5, names a random order of pp/dp/cp/tp) are drawn at grading time
from a seed taken from os.urandom, named in every failure. The expected layout is enumerated here, in
the judging process, the way torch's DeviceMesh lays out ``torch.arange(world).reshape(shape)`` (row-major:
the last dimension varies fastest); ``check_mesh_matches_torch_hidden`` checks against init_device_mesh
itself on real gloo ranks. Student code runs only in forked, sandboxed children (``map_isolated``).

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

from course_lib.grading.attempt.isolation import IsolatedCallError, map_isolated
from course_lib.grading.attempt.rank_attempt import fail_with
from course_lib.grading.attempt.student_function import as_student_function
from course_lib.grading.checks.ch08_mesh import (
    check_mesh_bad_shapes,
    check_mesh_matches_torch,
    compare,
    refuse_shortcuts,
)

from ._seeds import fresh_seed

NAMES = ("pp", "dp", "cp", "tp")
EDGE_MESHES = [((1,), ("dp",)), ((1, 1, 1, 1), ("tp", "pp", "dp", "cp")), ((5,), ("tp",)),
               ((1, 6, 1), ("pp", "dp", "tp")), ((3, 1), ("tp", "dp")),
               ((2, 3, 1, 2), ("cp", "pp", "tp", "dp"))]
TORCH_MESHES = {8: [((8,), ("dp",)), ((4, 2), ("tp", "pp")), ((2, 1, 2, 2), ("dp", "cp", "pp", "tp")),
                    ((1, 2, 4, 1), ("pp", "tp", "dp", "cp"))],
                6: [((3, 2), ("dp", "tp")), ((2, 1, 3), ("cp", "pp", "dp")), ((1, 1, 6), ("tp", "pp", "cp"))]}


def random_meshes(seed: int, count: int = 30) -> list:
    """Meshes with 1-4 dimensions of size 1-5 and names in random order, plus the edge cases."""
    rng = random.Random(seed)
    meshes = list(EDGE_MESHES)
    while len(meshes) < count + len(EDGE_MESHES):
        ndim = rng.randint(1, 4)
        shape = tuple(rng.choice((1, 1, 2, 2, 3, 4, 5)) for _ in range(ndim))
        meshes.append((shape, tuple(rng.sample(NAMES, ndim))))
    return meshes


def enumerate_layout(shape, names) -> list:
    """Per rank {"coordinates", "groups"}: rank = row-major index of its coordinate (torch's order)."""
    coords = list(itertools.product(*(range(s) for s in shape)))   # product is row-major: rank order
    index = {c: r for r, c in enumerate(coords)}
    out = []
    for c in coords:
        groups = {n: [index[c[:d] + (k,) + c[d + 1:]] for k in range(shape[d])] for d, n in enumerate(names)}
        out.append({"coordinates": dict(zip(names, c, strict=True)), "groups": groups})
    return out


def _isolated(candidate, name: str, calls: list, seed: int) -> list:
    try:
        return map_isolated(candidate, calls, name=name, timeout=60)
    except IsolatedCallError as error:
        raise AssertionError(f"{name} failed on the hidden meshes (seed {seed}): {error}") from None


def _check_layout(candidate, name: str, key: str) -> None:
    student = as_student_function(candidate, name)
    refuse_shortcuts(student)
    seed = fresh_seed(4)
    calls, expected = [], []
    for shape, names in random_meshes(seed):
        layout = enumerate_layout(shape, names)
        world = len(layout)
        ranks = range(world) if world <= 24 else random.Random(seed).sample(range(world), 24)
        for rank in ranks:
            calls.append((shape, names, rank))
            expected.append(layout[rank][key])
    problems: list = []
    for args, got, want in zip(calls, _isolated(student, name, calls, seed), expected, strict=True):
        compare(name, args, got, want, problems)
    fail_with(problems, f"{name} is wrong on hidden meshes (seed {seed}; torch lays out "
                        "torch.arange(world).reshape(shape))")


def check_mesh_coordinates_hidden(mesh_coordinates) -> None:
    _check_layout(mesh_coordinates, "mesh_coordinates", "coordinates")


def check_mesh_groups_hidden(mesh_groups) -> None:
    _check_layout(mesh_groups, "mesh_groups", "groups")


def check_mesh_matches_torch_hidden(mesh_coordinates, mesh_groups) -> None:
    """On real gloo ranks, world sizes 6 and 8, size-1 dimensions included."""
    check_mesh_matches_torch(mesh_coordinates, mesh_groups, TORCH_MESHES)


def check_groups_inside_node_hidden(groups_inside_node) -> None:
    student = as_student_function(groups_inside_node, "groups_inside_node")
    refuse_shortcuts(student)
    seed = fresh_seed(4)
    calls, expected = [], []
    for shape, names in random_meshes(seed, count=20):
        layout = enumerate_layout(shape, names)
        world = math.prod(shape)
        for gpus_per_node in sorted({1, 2, 3, 4, 8, world}):
            calls.append((shape, names, gpus_per_node))
            expected.append({n: all(len({r // gpus_per_node for r in a["groups"][n]}) == 1 for a in layout)
                             for n in names})
    problems: list = []
    answers = _isolated(student, "groups_inside_node", calls, seed)
    for args, got, want in zip(calls, answers, expected, strict=True):
        compare("groups_inside_node", args, got, want, problems)
    fail_with(problems, f"groups_inside_node is wrong on hidden meshes (seed {seed})")


HIDDEN_BAD_CALLS = [
    ("mesh_coordinates", ((0,), ("dp",), 0), "a dimension of size 0"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp", "pp"), 0), "three names for two dimensions"),
    ("mesh_coordinates", ((2, 2), ("tp", "tp"), 1), "the same name twice"),
    ("mesh_coordinates", ((2, 3), ("dp", "tp"), -1), "a negative rank"),
    ("mesh_coordinates", ((1, 1), ("dp", "tp"), 1), "rank 1 in a one-rank mesh"),
    ("mesh_coordinates", ((2, 2.5), ("dp", "tp"), 0), "a fractional size"),
    ("mesh_groups", ((3, 0, 2), ("pp", "dp", "tp"), 0), "a dimension of size 0"),
    ("mesh_groups", ((2, 4), ("dp", "tp"), 8), "rank 8 in a mesh of 8 ranks"),
    ("mesh_groups", ((), (), 0), "a mesh with no dimensions"),
    ("groups_inside_node", ((2, -4), ("dp", "tp"), 8), "a negative size"),
    ("groups_inside_node", ((2, 4), ("dp", "tp"), -8), "a negative node size"),
    ("groups_inside_node", ((2, 4), ("dp",), 8), "one name for two dimensions"),
]


def check_mesh_bad_shapes_hidden(mesh_coordinates, mesh_groups, groups_inside_node) -> None:
    check_mesh_bad_shapes(mesh_coordinates, mesh_groups, groups_inside_node, HIDDEN_BAD_CALLS)
