"""Event-level collectives: every transfer of a ring, a binomial tree or a parameter server on the timeline.

Their makespan equals ``collective_time`` in closed form; the chapter-02 drawings read the ``meta``
of each event: phase, step, chunk, src, dst, nbytes.
"""

from __future__ import annotations

from ..checks import whole
from ..timeline import Timeline
from .cost import _check, check_link

RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")
SERVER_OPS = ("all_reduce", "reduce", "broadcast")


def _check_request(builder: str, op: str, world_size: int, nbytes: float, link, algorithm: str,
                   drawn_ops: tuple, hint: str = "") -> None:
    """The checks every ``*_timeline`` shares: a known op its algorithm runs and draws, a link."""
    _check(op, nbytes, world_size, algorithm)
    check_link(link)
    if op not in drawn_ops:
        raise ValueError(f"{builder} draws {', '.join(drawn_ops)}{hint}")


def _rank_of(name: str, value, world_size: int) -> int:
    """``value`` as a rank of 0..world_size-1 (the server or the root)."""
    value = whole(name, value, 0)
    if not 0 <= value < world_size:
        raise ValueError(f"{name} must be a rank in 0..{world_size - 1}, got {value}")
    return value


def _ring_phase(timeline, clock, arrival, phase, first_chunk, steps, chunk_bytes, link, step0):
    """``steps`` ring rounds; ``first_chunk(r)`` is what rank r sends in the first one."""
    n = len(clock)
    seconds = link.transfer_time(chunk_bytes)
    for k in range(steps):
        new_arrival = [0.0] * n
        for r in range(n):
            start = max(clock[r], arrival[r])
            end = start + seconds
            clock[r] = end
            dst = (r + 1) % n
            new_arrival[dst] = end
            chunk = (first_chunk(r) - k) % n
            timeline.add(r, start, end, "comm", f"{phase} {step0 + k}: chunk {chunk} -> {dst}",
                         {"phase": phase, "step": step0 + k, "chunk": chunk, "src": r, "dst": dst,
                          "nbytes": chunk_bytes})
        arrival[:] = new_arrival


def ring_timeline(op: str, world_size: int, nbytes: float, link) -> Timeline:
    """Every chunk transfer of a ring ``op`` (all_reduce, reduce_scatter, all_gather) on ``world_size`` ranks.

    Chapter 02's convention: after the n-1 reduce-scatter rounds rank r owns the sum of chunk r, and the
    all-gather starts from it; each event's ``meta["chunk"]`` says which chunk it carried.
    """
    _check_request("ring_timeline", op, world_size, nbytes, link, "ring", RING_OPS,
                   f"; for {op!r} use collective_time")
    n = world_size
    timeline = Timeline([f"rank {r}" for r in range(n)], title=f"ring {op}, {n} ranks, {nbytes:g} bytes")
    clock, arrival = [0.0] * n, [0.0] * n
    chunk_bytes = nbytes / n
    step = 0
    if op in ("all_reduce", "reduce_scatter"):
        _ring_phase(timeline, clock, arrival, "reduce-scatter", lambda r: r - 1, n - 1, chunk_bytes, link,
                    step)
        step = n - 1
    if op in ("all_reduce", "all_gather"):
        _ring_phase(timeline, clock, arrival, "all-gather", lambda r: r, n - 1, chunk_bytes, link, step)
    return timeline


def parameter_server_timeline(op: str, world_size: int, nbytes: float, link, server: int = 0) -> Timeline:
    """Every message through one server rank: workers send to it one at a time, then it sends back."""
    _check_request("parameter_server_timeline", op, world_size, nbytes, link, "parameter_server", SERVER_OPS)
    server = _rank_of("server", server, world_size)
    n = world_size
    timeline = Timeline([f"rank {r}" for r in range(n)],
                        title=f"parameter server {op}, {n} ranks, {nbytes:g} bytes")
    seconds = link.transfer_time(nbytes)
    workers = [r for r in range(n) if r != server]
    now = 0.0
    phases = {"all_reduce": ("reduce", "broadcast"), "reduce": ("reduce",), "broadcast": ("broadcast",)}[op]
    for phase in phases:
        for step, worker in enumerate(workers):
            src, dst = (worker, server) if phase == "reduce" else (server, worker)
            meta = {"phase": phase, "step": step, "chunk": 0, "src": src, "dst": dst, "nbytes": nbytes}
            timeline.add(src, now, now + seconds, "comm", f"{phase}: {src} -> {dst}", meta)
            if phase == "reduce":  # the server's side of the same transfer, to show its link is busy
                timeline.add(server, now, now + seconds, "comm", f"recv from {src}", meta)
            now += seconds
    return timeline


TREE_OPS = ("all_reduce", "reduce", "broadcast")


def tree_timeline(op: str, world_size: int, nbytes: float, link, root: int = 0) -> Timeline:
    """A binomial tree: ceil(log2 n) levels of whole messages (reduce up to ``root``, broadcast down)."""
    _check_request("tree_timeline", op, world_size, nbytes, link, "tree", TREE_OPS)
    root = _rank_of("root", root, world_size)
    n = world_size
    timeline = Timeline([f"rank {r}" for r in range(n)], title=f"tree {op}, {n} ranks, {nbytes:g} bytes")
    seconds = link.transfer_time(nbytes)
    levels = (n - 1).bit_length()
    clock = [0.0] * n
    phases = {"all_reduce": ("reduce", "broadcast"), "reduce": ("reduce",), "broadcast": ("broadcast",)}[op]
    step = 0
    for phase in phases:
        order = range(levels - 1, -1, -1) if phase == "reduce" else range(levels)
        for level in order:
            distance = 1 << level
            for low in range(0, n, 2 * distance):
                high = low + distance
                if high >= n:
                    continue
                src, dst = (high, low) if phase == "reduce" else (low, high)
                src_rank, dst_rank = (src + root) % n, (dst + root) % n
                start = max(clock[src_rank], clock[dst_rank])
                end = start + seconds
                clock[src_rank] = clock[dst_rank] = end
                meta = {"phase": phase, "step": step, "chunk": 0, "src": src_rank, "dst": dst_rank,
                        "nbytes": nbytes}
                label = f"{phase}: {src_rank} -> {dst_rank}"
                timeline.add(src_rank, start, end, "comm", label, meta)
            step += 1
    return timeline


def collective_timeline(op: str, world_size: int, nbytes: float, link, algorithm: str = "ring") -> Timeline:
    """Every transfer of ``op`` with ``algorithm`` (ring, tree or parameter_server) on the timeline."""
    builders = {"ring": ring_timeline, "tree": tree_timeline, "parameter_server": parameter_server_timeline}
    if algorithm not in builders:
        raise ValueError(f"collective_timeline draws algorithms {', '.join(builders)}, got {algorithm!r}")
    return builders[algorithm](op, world_size, nbytes, link)
