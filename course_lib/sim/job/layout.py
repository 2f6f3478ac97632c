"""How a DP x TP x PP x CP job is laid out: ranks to coordinates, group links, layers to stages.

``placement`` lists the dimensions from innermost (neighbouring ranks, same node) to outermost.
"""

from __future__ import annotations

import functools
import math

from ..checks import whole
from ..cluster.pods import members_per_full_pod
from ..network.group_links import group_link, members_per_node

DIMENSIONS = ("tp", "cp", "dp", "pp")
# Megatron-Core's default, innermost first: initialize_model_parallel(order="tp-cp-ep-dp-pp") in
# megatron/core/parallel_state.py (EP, expert parallelism, left out here): TP on NVLink, PP outermost.
MEGATRON_CORE_ORDER = ("tp", "cp", "dp", "pp")
# Llama 3's: [TP, CP, PP, DP] (Dubey et al. 2024, section 3.3.2): data parallel (FSDP) outermost, because
# it tolerates the most latency by prefetching weights and reducing gradients asynchronously.
LLAMA3_ORDER = ("tp", "cp", "pp", "dp")
PLACEMENTS = {"Megatron-Core": MEGATRON_CORE_ORDER, "Llama 3": LLAMA3_ORDER}
DEFAULT_PLACEMENT = MEGATRON_CORE_ORDER


def check_degrees(world_size: int, degrees: dict) -> None:
    for name, value in degrees.items():
        whole(name, value)
    product = math.prod(degrees.values())
    if product != world_size:
        spelled = " x ".join(f"{k}={v}" for k, v in degrees.items())
        others = product // degrees["dp"]
        hint = (f"for example dp={world_size // others}" if world_size % others == 0
                else f"choose degrees whose product divides into {world_size}")
        raise ValueError(f"{spelled} = {product} devices, but the cluster has {world_size}: the degrees must "
                         f"multiply to the world size ({hint}), or change the cluster")


def check_placement(placement) -> tuple:
    placement = tuple(placement)
    if sorted(placement) != sorted(DIMENSIONS):
        raise ValueError(f"placement must order all of {DIMENSIONS} (innermost first), got {placement}")
    return placement


def strides(degrees: dict, placement) -> dict:
    """Rank distance between neighbours along each dimension."""
    out, stride = {}, 1
    for dim in placement:
        out[dim] = stride
        stride *= degrees[dim]
    return out


def coordinates(rank: int, degrees: dict, placement) -> dict:
    """{dimension: index} of ``rank``."""
    out = {}
    for dim in placement:
        rank, out[dim] = divmod(rank, degrees[dim])
    return out


def dimension_link(cluster, dims, degrees: dict, placement):
    """The GroupLink collectives along ``dims`` run on; in a synchronous step the slowest group sets the
    pace: the one that crosses pods (on a cluster with pods), spans the most nodes, with the fewest members
    on one of them."""
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    pod_gpus = cluster.pod_gpus if cluster.has_pods else None
    shapes = _group_shapes(dims, tuple(degrees.items()), tuple(placement), cluster.gpus_per_node, pod_gpus)
    links = [group_link(cluster.preset.intra_node, cluster.network_link(per_pod), nodes, per_node,
                        cluster.nics_per_node) for nodes, per_node, per_pod in shapes]
    return min(links, key=lambda link: (link.bandwidth, -link.latency, -link.nodes))


def expert_link(cluster, degrees: dict, placement, ep: int):
    """The GroupLink of the expert-parallel groups: ``ep`` neighbouring data-parallel replicas (the inner
    part of the dp dimension, so the group stays as close together as dp allows)."""
    split = {**{d: v for d, v in degrees.items() if d != "dp"}, "ep": ep, "edp": degrees["dp"] // ep}
    order = tuple(part for d in placement for part in (("ep", "edp") if d == "dp" else (d,)))
    return dimension_link(cluster, "ep", split, order)


@functools.lru_cache(maxsize=256)
def _group_shapes(dims: tuple, degree_items: tuple, placement: tuple, gpus_per_node: int,
                  pod_gpus: int | None = None) -> list:
    """Distinct (nodes spanned, fewest members on one node, fewest members in one pod) over every group
    along ``dims`` (the last None for a group inside one pod, or where ``pod_gpus`` is None: a network
    flat above the node; pods.members_per_full_pod)."""
    # A group is its first rank (base) plus fixed offsets; with nodes (and pods, whole nodes) of
    # consecutive ranks, which nodes and pods its members share depends only on base % pod_gpus (or
    # base % gpus_per_node without pods), so at most that many groups are counted instead of every rank of
    # the cluster (16,384 of them took seconds). A partly used last pod breaks the period: then every
    # group's own base is counted (each rank once, without the coordinates that made the long way slow).
    degrees = dict(degree_items)
    world = math.prod(degrees.values())
    step = strides(degrees, placement)
    offsets = [0]
    for d in dims:
        offsets = [o + i * step[d] for o in offsets for i in range(degrees[d])]
    period = (world if world % pod_gpus else pod_gpus) if pod_gpus else gpus_per_node
    residues = {0}
    for d in degrees:
        if d not in dims:
            residues = {(r + i * step[d]) % period for r in residues for i in range(degrees[d])}
    shapes = set()
    for r in residues:
        members = [r + o for o in offsets]
        counts = members_per_node(members, gpus_per_node)
        per_pod = members_per_full_pod(members, pod_gpus, world) if pod_gpus else None
        shapes.add((len(counts), min(counts.values()), per_pod))
    return sorted(shapes, key=lambda shape: (shape[0], shape[1], shape[2] or 0))


def split_layers(layers: int, stages: int, virtual_stages: int = 1) -> list:
    """Layers of each virtual stage j (chunk c of stage s is j = c*stages + s), as even as possible:
    the first ``layers % (stages*v)`` virtual stages take one more (the last stage also runs the head)."""
    parts = stages * virtual_stages
    if parts > layers:
        raise ValueError(f"{stages} stages x {virtual_stages} virtual stages = {parts} pieces but the model "
                         f"has only {layers} layers: use pp * virtual_stages <= {layers}")
    base, extra = divmod(layers, parts)
    return [base + (1 if j < extra else 0) for j in range(parts)]
