"""Closed-form cost of every collective under the alpha-beta model, and NCCL's bandwidth figures.

Conventions follow the NCCL performance tests: ``nbytes`` is the per-rank buffer for all_reduce,
broadcast, reduce and all_to_all, the full (gathered) buffer for all_gather/gather, the full input for
reduce_scatter/scatter. One message of m bytes costs alpha + m / bandwidth (Hockney's model).
"""

from __future__ import annotations

import math

from .checks import amount, whole

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter", "gather",
       "all_to_all")
ALGORITHMS = ("ring", "tree", "recursive_doubling", "parameter_server")

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


def _tree(op: str, s: float, n: int, a: float, bw: float, doubling: bool) -> float:
    levels = math.ceil(math.log2(n))
    whole = levels * (a + s / bw)              # binomial tree moving the whole message per level
    halving = levels * a + (n - 1) / n * s / bw  # data halves at every level (scatter/gather style)
    if op in ("broadcast", "reduce"):
        return whole
    if op in ("scatter", "gather"):
        return halving
    if op == "all_to_all":                     # Bruck: log n rounds, half the buffer each
        return levels * (a + s / (2 * bw))
    if doubling:                               # recursive doubling / halving (Thakur et al. 2005)
        return whole if op == "all_reduce" else halving
    if op == "all_reduce":                     # reduce to the root, broadcast back
        return 2 * whole
    return whole + halving                     # reduce_scatter = reduce+scatter, all_gather = gather+bcast


def _parameter_server(op: str, s: float, n: int, a: float, bw: float) -> float:
    whole = (n - 1) * (a + s / bw)             # n-1 full messages through the server's link, one by one
    part = (n - 1) * (a + s / (n * bw))        # n-1 messages of one rank's share
    if op in ("broadcast", "reduce"):
        return whole
    if op == "all_reduce":
        return 2 * whole
    if op in ("scatter", "gather"):
        return part
    if op in ("all_gather", "reduce_scatter"):
        return whole + part
    return 2 * (n - 1) * (a + (n - 1) * s / (n * bw))  # all_to_all relayed by the server


SEGMENTED_OPS = ("all_reduce", "reduce_scatter", "all_gather")


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


def collective_time(op: str, nbytes: float, world_size: int, link, algorithm: str = "ring",
                    segment_bytes: float | None = None, in_flight: int = 1) -> float:
    """Seconds one collective takes on ``world_size`` ranks joined by ``link`` (a Link), in closed form.

    ring: 2(n-1)(a + S/(nB)) for all_reduce, (n-1)(a + S/(nB)) for reduce_scatter/all_gather;
    tree: binomial tree, ceil(log2 n) levels; recursive_doubling: log2 n rounds (exact for powers of 2);
    parameter_server: every message through one rank, one at a time.

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
    if segment_bytes is not None:
        if algorithm != "ring" or op not in SEGMENTED_OPS:
            raise ValueError(f"segment_bytes applies to the ring's {', '.join(SEGMENTED_OPS)}; got "
                             f"op={op!r}, algorithm={algorithm!r}: leave segment_bytes=None for this one")
        segment_bytes = amount("segment_bytes", segment_bytes, positive=True)
    in_flight = whole("in_flight", in_flight, hint=": the number of segments a rank keeps travelling at once")
    if in_flight > 1 and segment_bytes is None:
        raise ValueError(f"in_flight={in_flight} needs segment_bytes: only a ring cut into segments has "
                         f"several in flight; pass segment_bytes=... or leave in_flight=1")
    n = world_size
    if n == 1:
        return 0.0
    a, bw = link.latency, link.bandwidth
    if algorithm == "ring" and segment_bytes is not None:
        return _segmented_ring(op, nbytes, n, a, bw, segment_bytes, in_flight)
    if algorithm == "ring":
        return _ring(op, nbytes, n, a, bw)
    if algorithm == "parameter_server":
        return _parameter_server(op, nbytes, n, a, bw)
    return _tree(op, nbytes, n, a, bw, doubling=algorithm == "recursive_doubling")


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
