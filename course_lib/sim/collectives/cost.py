"""Closed-form cost of every collective under the alpha-beta model, and NCCL's bandwidth figures.

Conventions follow the NCCL performance tests: ``nbytes`` is the per-rank buffer for all_reduce,
broadcast, reduce and all_to_all, the full (gathered) buffer for all_gather/gather, the full input for
reduce_scatter/scatter. One message of m bytes costs alpha + m / bandwidth (Hockney's model).
"""

from __future__ import annotations

import math

from ..checks import amount, whole
from ..network.group_links import GroupLink
from ..vocabulary import ALGORITHM_OPS, ALGORITHMS, NCCL_CHOICES, OPS, SEGMENTED_OPS
from .nccl_forms import double_binary_tree, pairwise_all_to_all, pipelined_ring

__all__ = ["collective_time", "nccl_algorithm", "pairwise_all_to_all", "check_link", "ring_segments",
           "algorithm_bandwidth", "bus_bandwidth", "bus_factor", "rabenseifner_all_reduce"]

# busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md): the factor turns the user-visible rate into
# the rate each link must carry, so it can be compared with the hardware's peak bandwidth.
_BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def _check(op: str, nbytes: float, world_size: int, algorithm: str | None = None) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; use one of {', '.join(OPS)}")
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    if op not in ALGORITHM_OPS.get(algorithm, OPS):
        raise ValueError(f"algorithm {algorithm!r} runs {', '.join(ALGORITHM_OPS[algorithm])}, not {op!r}: "
                         f"use algorithm='ring' (or 'tree') for {op}")
    whole("world_size", world_size)
    try:
        ok = not isinstance(nbytes, bool) and 0 <= nbytes < math.inf   # NaN and infinity fail too
    except TypeError:   # a string or None
        ok = False
    if not ok:
        raise ValueError(f"nbytes must be >= 0 and finite, got {nbytes!r}: pass the buffer size in bytes")


def check_link(link) -> None:
    """Anything with a latency and a bandwidth (a Link); None or a number is named, not an AttributeError."""
    if not (hasattr(link, "latency") and hasattr(link, "bandwidth") and hasattr(link, "transfer_time")):
        raise ValueError(f"link must be a Link(latency, bandwidth), for example cluster.preset.inter_node, "
                         f"got {link!r}")


def _ring(op: str, s: float, n: int, a: float, bw: float) -> float:
    chunk = a + s / (n * bw)                  # one step moves one chunk of S/n to the ring neighbour
    if op == "all_reduce":                     # reduce-scatter then all-gather: 2(n-1) steps
        return 2 * (n - 1) * chunk
    if op in ("broadcast", "reduce"):          # pipelined along the ring in n chunks: (n-1) + (n-1) steps
        return 2 * (n - 1) * chunk
    return (n - 1) * chunk                     # reduce_scatter, all_gather, scatter, gather, all_to_all


def _tree(op: str, s: float, n: int, links: list, doubling: bool) -> float:
    """Textbook binomial tree, store-and-forward: ``links`` holds each level's link, largest distance
    first (one Link per level of ceil(log2 n))."""
    full = sum(link.transfer_time(s) for link in links)   # the full message at every level
    # Data halves at every level (scatter/gather style): the first level moves half of it, and the
    # shares add up to (n-1)/n of the buffer, exact for powers of 2.
    scale = (n - 1) / n / (1 - 0.5 ** len(links))
    halving = sum(link.latency + s * scale * 0.5 ** (k + 1) / link.bandwidth for k, link in enumerate(links))
    if op in ("broadcast", "reduce"):
        return full
    if op in ("scatter", "gather"):
        return halving
    if op == "all_to_all":                     # Bruck: log n rounds, half the buffer each
        return sum(link.transfer_time(s / 2) for link in links)
    if doubling:                               # recursive doubling / halving (Thakur et al. 2005)
        return full if op == "all_reduce" else halving
    if op == "all_reduce":                     # reduce to the root, broadcast back
        return 2 * full
    return full + halving                     # reduce_scatter = reduce+scatter, all_gather = gather+bcast


def _parameter_server(op: str, s: float, n: int, links: list) -> float:
    """Every message through one server rank, one at a time; ``links`` from the server to each worker."""
    full = sum(link.transfer_time(s) for link in links)      # a full message with every worker
    part = sum(link.transfer_time(s / n) for link in links)   # one rank's share with every worker
    if op in ("broadcast", "reduce"):
        return full
    if op == "all_reduce":
        return 2 * full
    if op in ("scatter", "gather"):
        return part
    if op in ("all_gather", "reduce_scatter"):
        return full + part
    return 2 * sum(link.transfer_time((n - 1) * s / n) for link in links)  # all_to_all relayed by the server


def ring_segments(nbytes: float, world_size: int, segment_bytes: float) -> tuple[int, float]:
    """(segments, bytes per segment) of a buffer cut as gloo's ring cuts it (gloo/allreduce.cc): pieces of
    at most ``segment_bytes``, at least two per rank's chunk so one can travel while the other is being
    reduced, and a whole number per chunk."""
    n = world_size
    count = max(math.ceil(nbytes / segment_bytes), 2 * n)
    count = math.ceil(count / n) * n
    return count, nbytes / count


def _segmented_ring(op: str, s: float, n: int, a: float, bw: float, segment_bytes: float,
                    in_flight: int) -> float:
    count, segment = ring_segments(s, n, segment_bytes)
    messages = count * (n - 1) // n            # per phase: every segment but the rank's own chunk's
    phases = 2 if op == "all_reduce" else 1
    one = a + segment / bw
    starting = min(messages, in_flight)        # sent before anything has arrived: each waits a latency
    # Later segments travel while the ones ahead are still arriving: their latency is shared by the
    # segments in flight, and a segment never takes less than its own transfer.
    streaming = (messages - starting) * max(segment / bw, one / in_flight)
    return phases * (starting * one + streaming)


def collective_time(op: str, nbytes: float, world_size: int, link, algorithm: str = "nccl",
                    segment_bytes: float | None = None, in_flight: int = 1) -> float:
    """Seconds one collective takes on ``world_size`` ranks joined by ``link`` (a Link), in closed form.

    nccl (the default): what NCCL's tuner does, the fastest under this cost model of the algorithms NCCL
    has for ``op`` (vocabulary.NCCL_CHOICES, from src/graph/tuning.cc): ring or double_binary_tree for
    all_reduce, the ring for reduce_scatter/all_gather, pipelined_ring for broadcast/reduce, pairwise for
    all_to_all, scatter and gather. ``nccl_algorithm(...)`` names the one it picks. With
    ``segment_bytes`` it is the segmented ring (as gloo runs it).

    ring: 2(n-1)(a + S/(nB)) for all_reduce, (n-1)(a + S/(nB)) for reduce_scatter/all_gather;
    tree: binomial tree, ceil(log2 n) levels; recursive_doubling: log2 n rounds (exact for powers of 2);
    parameter_server: every message through one rank, one at a time. These four are the textbook,
    store-and-forward forms. double_binary_tree (all_reduce): NCCL's pipelined tree, 2 x depth x a + 2S/B.
    hierarchical (all_reduce, reduce_scatter, all_gather): inside nodes, across nodes, inside again.
    pairwise (all_to_all, scatter, gather): every share sent directly and at once, NVLink and NIC side by
    side. pipelined_ring (broadcast, reduce): NCCL's, many chunks round the ring, (n-1) hops + S/B.

    ``link`` may be a plain Link (every hop alike) or the GroupLink a Cluster gives a group of ranks
    (``cluster.group_link(ranks)``): then every hop pays its own link's latency (NVLink or network), the
    bandwidth across nodes grows with the group's members per node (rail-optimised NICs), and trees and
    parameter servers cross nodes on one NIC per message.

    ``segment_bytes`` (ring all_reduce, reduce_scatter, all_gather only) models a ring that cuts each
    chunk into segments, as gloo (1 MiB) and NCCL do to overlap reductions with transfers: the same
    bytes travel, but every segment pays the latency, so 2k(a + S/(cB)) for c segments, k = c(n-1)/n.

    ``in_flight`` (with ``segment_bytes``): how many segments a rank keeps travelling at once. With 1,
    each waits for the one before and pays the full latency, as above. With w > 1 (gloo keeps 2), the
    first w of each phase still pay it, but every later one is sent while those ahead are arriving and
    costs max(S/(cB), (a + S/(cB)) / w): a ring of large segments runs at the link's bandwidth.
    Latency only overlaps when the ranks really run at once; ``calibrate()`` measures whether they do.
    """
    _check(op, nbytes, world_size, algorithm)
    check_link(link)
    if segment_bytes is not None and algorithm == "nccl":
        algorithm = "ring"
    if segment_bytes is not None:
        if algorithm != "ring" or op not in SEGMENTED_OPS:
            raise ValueError(f"segment_bytes applies to the ring's {', '.join(SEGMENTED_OPS)}; got "
                             f"op={op!r}, algorithm={algorithm!r}: leave segment_bytes=None for this one")
        segment_bytes = amount("segment_bytes", segment_bytes, positive=True)
    in_flight = whole("in_flight", in_flight, hint=": the number of segments a rank keeps travelling at once")
    if in_flight > 1 and segment_bytes is None:
        raise ValueError(f"in_flight={in_flight} needs segment_bytes: only a ring cut into segments has "
                         f"several in flight; pass segment_bytes=... or leave in_flight=1")
    if world_size == 1:
        return 0.0
    return _dispatch(op, nbytes, world_size, link, algorithm, segment_bytes, in_flight)


def nccl_algorithm(op: str, nbytes: float, world_size: int, link) -> str:
    """The algorithm ``algorithm="nccl"`` runs ``op`` with: the fastest of NCCL's for it (ties: the first
    listed, the ring), as NCCL's tuner picks by its own cost model (src/graph/tuning.cc)."""
    _check(op, nbytes, world_size)
    check_link(link)
    choices = NCCL_CHOICES[op]
    if world_size == 1 or len(choices) == 1:
        return choices[0]
    return min(choices, key=lambda a: _dispatch(op, nbytes, world_size, link, a, None, 1))


def _dispatch(op: str, s: float, n: int, link, algorithm: str, segment_bytes, in_flight: int) -> float:
    if algorithm == "nccl":
        algorithm = nccl_algorithm(op, s, n, link)
    grouped = isinstance(link, GroupLink)
    # A ring's step pays its hop's latency: on a group spanning nodes, the mean over one phase's hops.
    a = link.ring_latency(n - 1) / (n - 1) if grouped else link.latency
    if algorithm == "ring" and segment_bytes is not None:
        return _segmented_ring(op, s, n, a, link.bandwidth, segment_bytes, in_flight)
    if algorithm == "ring":
        return _ring(op, s, n, a, link.bandwidth)
    if algorithm == "double_binary_tree":
        return double_binary_tree(s, n, link)
    if algorithm == "pipelined_ring":
        return pipelined_ring(s, n, link)
    if algorithm == "hierarchical":
        return _hierarchical(op, s, n, link)
    if algorithm == "pairwise":
        return pairwise_all_to_all(s, n, link)
    if algorithm == "parameter_server":
        return _parameter_server(op, s, n, _server_links(link, n))
    levels = link.level_links(n) if grouped else [link] * math.ceil(math.log2(n))
    return _tree(op, s, n, levels, doubling=algorithm == "recursive_doubling")


def _server_links(link, n: int) -> list:
    """The server's link to each of its n-1 workers: NVLink to those on its node, one NIC to the rest."""
    if not (isinstance(link, GroupLink) and link.spans_nodes):
        return [link] * (n - 1)
    local = min(link.per_node, n) - 1
    return [link.intra] * local + [link.rail()] * (n - 1 - local)


def _hierarchical(op: str, s: float, n: int, link) -> float:
    """Reduce-scatter inside each node, then per_node rings across nodes (one per rail, each holding
    1/per_node of the buffer), then all-gather inside each node. On one node it is the plain ring."""
    if not (isinstance(link, GroupLink) and link.spans_nodes):
        a = link.ring_latency(n - 1) / (n - 1) if isinstance(link, GroupLink) else link.latency
        return _ring(op, s, n, a, link.bandwidth)
    m, nodes, intra, rail = link.per_node, link.nodes, link.intra, link.rail()
    inside = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}[op]
    inside_time = 0.0 if m == 1 else _ring("reduce_scatter", s, m, intra.latency, intra.bandwidth)
    return inside * inside_time + _ring(op, s / m, nodes, rail.latency, rail.bandwidth)


def rabenseifner_all_reduce(nbytes: float, world_size: int, link,
                            seconds_per_reduced_byte: float = 0.0) -> float:
    """Rabenseifner's all-reduce on a power-of-two ``world_size``, message by message: a reduce-scatter by
    recursive halving, then an all-gather by recursive doubling. ``seconds_per_reduced_byte`` (gamma)
    prices the additions of the halving rounds; 0 leaves them out, as the other forms here do."""
    # Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in MPICH",
    # IJHPCA 19(1), https://doi.org/10.1177/1094342005051521: for a power of two p it costs
    # 2 log2(p) alpha + 2 (p-1)/p n beta + (p-1)/p n gamma (MPICH's allreduce.c states the same sum).
    _check("all_reduce", nbytes, world_size)
    check_link(link)
    n = world_size
    if n & (n - 1):
        raise ValueError(f"world_size must be a power of two for Rabenseifner's all-reduce, got {n}: MPICH "
                         "first folds the extra ranks into their neighbours, at an extra round's cost")
    seconds_per_reduced_byte = amount("seconds_per_reduced_byte", seconds_per_reduced_byte)
    total, share = 0.0, float(nbytes)
    for _ in range(n.bit_length() - 1):     # log2(n) rounds; each swaps half of what the pair still shares
        share /= 2
        halving = link.latency + share / link.bandwidth + share * seconds_per_reduced_byte
        doubling = link.latency + share / link.bandwidth   # the all-gather mirrors it, with no addition
        total += halving + doubling
    return total


def algorithm_bandwidth(op: str, nbytes: float, seconds: float) -> float:
    """algbw = size / time in bytes/s, as nccl-tests prints it."""
    _check(op, nbytes, 1)
    try:
        seconds = amount("seconds", seconds, positive=True)
    except ValueError:
        raise ValueError(f"seconds must be > 0 to compute a bandwidth (a finite time), "
                         f"got {seconds!r}") from None
    return nbytes / seconds


def bus_bandwidth(op: str, nbytes: float, seconds: float, world_size: int) -> float:
    """busbw = algbw x the op's factor (2(n-1)/n for all_reduce, (n-1)/n for all_gather, ...)."""
    _check(op, nbytes, world_size)
    return algorithm_bandwidth(op, nbytes, seconds) * _BUS_FACTORS[op](world_size)


def bus_factor(op: str, world_size: int) -> float:
    """The factor busbw / algbw of nccl-tests for ``op`` on ``world_size`` ranks."""
    _check(op, 0, world_size)
    return _BUS_FACTORS[op](world_size)
