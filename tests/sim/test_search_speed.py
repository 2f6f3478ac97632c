"""The layout search's shortcuts give what the long way gives (layout.py's group shapes)."""

import itertools
import math

from course_lib.sim.job.layout import _group_shapes, coordinates, strides
from course_lib.sim.network.group_links import members_per_node


def _shapes_the_long_way(dims, degrees, placement, gpus_per_node):
    step, groups = strides(degrees, placement), {}
    for rank in range(math.prod(degrees.values())):
        coords = coordinates(rank, degrees, placement)
        groups.setdefault(rank - sum(coords[d] * step[d] for d in dims), []).append(rank)
    counts = (members_per_node(members, gpus_per_node) for members in groups.values())
    return sorted({(len(c), min(c.values())) for c in counts})


def test_group_shapes_equal_counting_every_rank():
    names = ("tp", "cp", "dp", "pp")
    for sizes in itertools.product((1, 2, 3, 4), (1, 2), (1, 3, 4), (1, 2, 6)):
        degrees = dict(zip(names, sizes, strict=True))
        for placement in (names, ("dp", "tp", "pp", "cp"), ("pp", "cp", "tp", "dp")):
            for dims, g in itertools.product((("tp",), ("dp", "cp"), ("pp",), ("cp",)), (1, 4, 8, 6)):
                expected = _shapes_the_long_way(dims, degrees, placement, g)
                assert _group_shapes(dims, tuple(degrees.items()), placement, g) == expected
