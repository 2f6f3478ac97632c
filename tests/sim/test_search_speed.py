"""The layout search's shortcuts give what the long way gives (layout.py's group shapes)."""

import itertools
import math

from course_lib.sim.cluster.pods import members_per_full_pod
from course_lib.sim.job.layout import _group_shapes, coordinates, strides
from course_lib.sim.network.group_links import members_per_node


def _shapes_the_long_way(dims, degrees, placement, gpus_per_node, pod_gpus=None):
    step, groups, world = strides(degrees, placement), {}, math.prod(degrees.values())
    for rank in range(world):
        coords = coordinates(rank, degrees, placement)
        groups.setdefault(rank - sum(coords[d] * step[d] for d in dims), []).append(rank)
    shapes = set()
    for members in groups.values():
        counts = members_per_node(members, gpus_per_node)
        per_pod = members_per_full_pod(members, pod_gpus, world) if pod_gpus else None
        shapes.add((len(counts), min(counts.values()), per_pod))
    return sorted(shapes, key=lambda shape: (shape[0], shape[1], shape[2] or 0))


def test_group_shapes_equal_counting_every_rank():
    names = ("tp", "cp", "dp", "pp")
    for sizes in itertools.product((1, 2, 3, 4), (1, 2), (1, 3, 4), (1, 2, 6)):
        degrees = dict(zip(names, sizes, strict=True))
        for placement in (names, ("dp", "tp", "pp", "cp"), ("pp", "cp", "tp", "dp")):
            for dims, g in itertools.product((("tp",), ("dp", "cp"), ("pp",), ("cp",)), (1, 4, 8, 6)):
                expected = _shapes_the_long_way(dims, degrees, placement, g)
                assert _group_shapes(dims, tuple(degrees.items()), placement, g) == expected


def test_group_shapes_across_pods_equal_counting_every_rank():
    # pods of whole nodes, the last one partly used where the world is not a whole number of pods
    names = ("tp", "cp", "dp", "pp")
    for sizes in itertools.product((1, 2, 4), (1, 2), (1, 3, 4), (1, 2, 6)):
        degrees = dict(zip(names, sizes, strict=True))
        for placement in (names, ("tp", "cp", "pp", "dp"), ("pp", "cp", "tp", "dp")):
            nodes_and_pods = ((2, 4), (4, 8), (2, 6))
            for dims, (g, pod) in itertools.product((("tp",), ("dp", "cp"), ("pp",)), nodes_and_pods):
                expected = _shapes_the_long_way(dims, degrees, placement, g, pod)
                assert _group_shapes(dims, tuple(degrees.items()), placement, g, pod) == expected
