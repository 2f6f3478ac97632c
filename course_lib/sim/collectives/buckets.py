"""What DDP's gradient buckets cost: the latency share of one bucket's collective, and the time the buckets
of one backward keep the network busy after it ends, as a function of the bucket size.

The bucket model is Stanford CS336's (spring 2025, assignment 2, section 2.3.3, ddp_bucketed_benchmarking
(b)): n_b buckets each pay a per-call overhead o and move their bytes at the all-reduce's algorithm
bandwidth w; played here as a pipeline, so it also holds when the backward is faster or slower than that.
"""

from __future__ import annotations

import math

from ..checks import amount
from .cost import collective_time


def latency_seconds(op: str, world_size: int, link, algorithm: str = "ring") -> float:
    """The part of ``collective_time`` no byte pays: the time of an empty buffer, its hops' latencies,
    each hop on its own link (a GroupLink's NVLink and network hops)."""
    return collective_time(op, 0, world_size, link, algorithm)


def latency_share(op: str, nbytes: float, world_size: int, link, algorithm: str = "ring") -> float:
    """The share of one collective's time (``collective_time``) that is latency, between 0 and 1."""
    total = collective_time(op, nbytes, world_size, link, algorithm)
    return 0.0 if total == 0 else latency_seconds(op, world_size, link, algorithm) / total


def all_reduce_terms(world_size: int, link, algorithm: str = "ring", probe_bytes: float = 1e9) -> tuple:
    """(o, w) of one all-reduce, t(S) = o + S / w: the per-call seconds and the algorithm bandwidth of
    the bytes term (exact for the closed forms, which are linear in S)."""
    per_call = latency_seconds("all_reduce", world_size, link, algorithm)
    moving = collective_time("all_reduce", probe_bytes, world_size, link, algorithm) - per_call
    return per_call, (math.inf if moving <= 0 else probe_bytes / moving)


def buckets_after_backward(buckets, per_call: float, bandwidth: float, backward_seconds: float) -> float:
    """Seconds the network is still busy after the backward ends, for buckets of the given bytes (in the
    order they fill): gradients become ready evenly through the backward, a bucket goes out once full
    and after the one before it, and takes per_call + its bytes / bandwidth."""
    sizes = [amount("bucket bytes", b, unit="bytes") for b in buckets]
    total = sum(sizes)
    if not sizes or total == 0:
        return 0.0
    backward = amount("backward_seconds", backward_seconds, unit="seconds")
    per_call = amount("per_call", per_call, unit="seconds")
    bandwidth = amount("bandwidth", bandwidth, positive=True, finite=False, unit="bytes/s")
    filled, busy_until = 0.0, 0.0
    for size in sizes:
        filled += size
        ready = backward * filled / total
        busy_until = max(busy_until, ready) + per_call + size / bandwidth
    return busy_until - backward


def bucketed_overhead(gradient_bytes: float, bucket_bytes: float, per_call: float, bandwidth: float,
                      backward_seconds: float | None = None) -> float:
    """``buckets_after_backward`` for ``gradient_bytes`` cut into buckets of ``bucket_bytes`` (the last
    one smaller). Without ``backward_seconds``, CS336's assumption: computing a bucket's gradients takes
    as long as sending its bytes (backward = gradient_bytes / bandwidth); then the result is exactly
    n_b * per_call + (gradient_bytes / n_b) / bandwidth for equal buckets."""
    total = amount("gradient_bytes", gradient_bytes, unit="bytes")
    size = amount("bucket_bytes", bucket_bytes, positive=True, unit="bytes")
    count = max(1, math.ceil(total / size))
    buckets = [size] * (count - 1) + [total - size * (count - 1)]
    backward = total / bandwidth if backward_seconds is None else backward_seconds
    return buckets_after_backward(buckets, per_call, bandwidth, backward)


def optimal_bucket_bytes(gradient_bytes: float, per_call: float, bandwidth: float) -> float:
    """The bucket size minimising n_b o + s / (n_b w) (CS336's model): n_b = sqrt(s / (w o)), so a bucket
    of sqrt(s w o) bytes, where a bucket's per-call cost equals its share of the exposed transfer."""
    s = amount("gradient_bytes", gradient_bytes, positive=True, unit="bytes")
    o = amount("per_call", per_call, positive=True, unit="seconds")
    w = amount("bandwidth", bandwidth, positive=True, unit="bytes/s")
    return min(s, math.sqrt(s * w * o))
