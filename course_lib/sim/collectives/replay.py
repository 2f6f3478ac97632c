"""Replaying the traffic a real run recorded on a simulated cluster of any size.

``traffic_pattern`` reads who sent how many bytes to whom, step by step; a pattern checked to be a ring
scales to any world size (``scaled_ring``), and ``replay_pattern`` plays a pattern on a ``Cluster``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import amount, whole
from ..timeline import Timeline

SENDS, RECEIVES = frozenset({"send", "isend"}), frozenset({"recv", "irecv"})


class StepPattern:
    """Who sends how many bytes to whom at each step, on ``world_size`` ranks, for a ``buffer_bytes`` buffer.

    ``step(k)`` lists the messages of step k as ``(src, dst, nbytes)``. A step's messages start together;
    a rank starts its step-k messages once everything sent to it at step k-1 has arrived.
    """

    world_size: int
    buffer_bytes: float
    num_steps: int

    def step(self, k: int) -> list[tuple[int, int, float]]:
        raise NotImplementedError

    def ring_problems(self) -> list[str]:
        """Why this is not a ring (empty when it is one): see ``check_ring``."""
        return []

    def check_ring(self) -> str:
        """Raise ValueError unless every one of 2(N-1) steps has each rank r send exactly one message of
        S/N bytes, to (r + 1) mod N, and receive only from (r - 1) mod N; else say so in a sentence."""
        problems = self.ring_problems()
        if problems:
            shown = "\n".join(f"- {p}" for p in problems[:6])
            more = f"\n(and {len(problems) - 6} more)" if len(problems) > 6 else ""
            raise ValueError(f"this traffic is not a ring all-reduce's:\n{shown}{more}")
        n = self.world_size
        return (f"a ring on {n} ranks: {self.num_steps} = 2(N-1) steps; at every step each rank sends one "
                f"message of {self.buffer_bytes / n:g} bytes = S/N to its right neighbour (r + 1) mod {n}, "
                f"and receives one from its left neighbour")

    def scaled_ring(self, world_size: int) -> RingPattern:
        """The same ring rule on ``world_size`` ranks: 2(n-1) steps of S/n bytes to the right neighbour.

        An extrapolation, allowed only once this pattern passed ``check_ring`` on at least 3 ranks (on 2,
        the right neighbour is also the left one and a ring looks like any other algorithm).
        """
        if self.world_size < 3:
            raise ValueError(f"a pattern recorded on {self.world_size} rank(s) cannot show a ring (left and "
                             "right neighbours differ only from 3 ranks on): record it on 3 or more")
        self.check_ring()
        return RingPattern(world_size, self.buffer_bytes)

    def describe(self, max_steps: int = 8) -> str:
        """One line per step: ``src->dst nbytes`` for each message (the first ``max_steps`` steps)."""
        lines = [f"{self.world_size} ranks, {self.num_steps} steps, buffer S = {self.buffer_bytes:g} bytes"]
        for k in range(min(self.num_steps, max_steps)):
            messages = ", ".join(f"{src}->{dst} {nbytes:g} B" for src, dst, nbytes in self.step(k))
            lines.append(f"  step {k}: {messages or 'nothing sent'}")
        if self.num_steps > max_steps:
            lines.append(f"  ... and {self.num_steps - max_steps} more steps")
        return "\n".join(lines)


class RecordedPattern(StepPattern):
    """A pattern read from traffic logs: a rank's k-th send belongs to step k."""

    def __init__(self, world_size: int, buffer_bytes: float, sends, receives, others, element_bytes=0):
        self.world_size, self.buffer_bytes = world_size, float(buffer_bytes)
        self.element_bytes = element_bytes  # a message may differ from S/N by less than this
        self.sends = sends          # sends[rank] = [(dst, nbytes), ...] in the order they were made
        self.receives = receives    # receives[rank] = [src or None, ...]
        self.others = others        # others[rank] = names of any other calls (collectives)
        self.num_steps = max((len(s) for s in sends), default=0)

    def step(self, k: int) -> list[tuple[int, int, float]]:
        return [(rank, mine[k][0], mine[k][1]) for rank, mine in enumerate(self.sends) if k < len(mine)]

    def ring_problems(self) -> list[str]:
        n, problems = self.world_size, []
        steps, chunk = 2 * (n - 1), self.buffer_bytes / n
        for rank in range(n):
            right, left = (rank + 1) % n, (rank - 1) % n
            if self.others[rank]:
                problems.append(f"rank {rank} called {', '.join(sorted(set(self.others[rank])))}")
            if len(self.sends[rank]) != steps:
                problems.append(f"rank {rank} sent {len(self.sends[rank])} messages, a ring sends "
                                f"2(N-1) = {steps}")
            wrong = sorted({dst for dst, _ in self.sends[rank] if dst != right})
            if wrong:
                problems.append(f"rank {rank} sent to {wrong}, a ring sends only to the right "
                                f"neighbour {right}")
            sizes = sorted({nbytes for _, nbytes in self.sends[rank]
                            if nbytes != chunk and abs(nbytes - chunk) >= self.element_bytes})
            if sizes:
                problems.append(f"rank {rank} sent messages of {sizes} bytes, a ring sends S/N = {chunk:g}")
            received = self.receives[rank]
            if len(received) != steps or any(src not in (None, left) for src in received):
                sources = sorted({src for src in received if src is not None})
                problems.append(f"rank {rank} received {len(received)} messages from {sources}, a ring "
                                f"receives {steps}, all from the left neighbour {left}")
        return problems


class RingPattern(StepPattern):
    """The ring rule on any number of ranks, computed step by step (never stored: 1024 ranks are cheap)."""

    def __init__(self, world_size: int, buffer_bytes: float):
        self.world_size = whole("world_size", world_size)
        self.buffer_bytes = amount("buffer_bytes", buffer_bytes, unit="bytes")
        self.num_steps = 2 * (world_size - 1)
        n, chunk = world_size, self.buffer_bytes / world_size
        self._messages = tuple((rank, (rank + 1) % n, chunk) for rank in range(n))

    def step(self, k: int) -> tuple[tuple[int, int, float], ...]:
        """Every step alike: each rank r sends S/N bytes to (r + 1) mod N (the same tuple each time)."""
        if not 0 <= k < self.num_steps:
            raise IndexError(f"step {k} is outside 0..{self.num_steps - 1}")
        return self._messages


def traffic_pattern(logs, buffer_bytes: float, element_bytes: float = 0) -> RecordedPattern:
    """The step pattern of what each rank recorded (``record_traffic`` logs, one per rank, in rank order).

    ``buffer_bytes`` is the size S of the buffer the recorded call worked on; with ``element_bytes``, a
    ring's chunks may differ from S/N by less than one element (``torch.tensor_split`` when N does not
    divide the length). Each log needs ``.rank`` and ``.events`` whose items have ``.op``, ``.peer``
    and ``.nbytes``.
    """
    logs = list(logs)
    if [log.rank for log in logs] != list(range(len(logs))):
        raise ValueError(f"expected one log per rank in rank order 0..{len(logs) - 1}, got ranks "
                         f"{[log.rank for log in logs]}")
    amount("buffer_bytes", buffer_bytes, positive=True, unit="bytes (the recorded buffer's size)")
    sends, receives, others = [], [], []
    for log in logs:
        sends.append([(e.peer, e.nbytes) for e in log.events if e.op in SENDS])
        receives.append([e.peer for e in log.events if e.op in RECEIVES])
        others.append([e.op for e in log.events if e.op not in SENDS | RECEIVES])
    return RecordedPattern(len(logs), buffer_bytes, sends, receives, others, element_bytes)


@dataclass
class Replay:
    """A pattern played on a cluster: the drawn ranks' ``timeline`` and every rank's ``finish`` time."""

    timeline: Timeline
    finish: list[float]
    num_steps: int

    @property
    def makespan(self) -> float:
        """When the last rank finished: the time of the whole collective."""
        return max(self.finish, default=0.0)


def replay_pattern(pattern: StepPattern, cluster, buffer_bytes: float | None = None, ranks=None,
                   title: str | None = None) -> Replay:
    """Play ``pattern`` on ``cluster`` (same world size) on the virtual clock; every rank is simulated.

    Each message takes ``cluster.link_between(src, dst).transfer_time(nbytes)``; a rank's messages of
    one step leave one after the other, and its step k starts when its step k-1 messages have left and
    everything sent to it at step k-1 has arrived. ``buffer_bytes`` rescales every message (default: the
    pattern's own S). Only ``ranks`` (default: all) get a lane of the timeline: sends, receives, waits.
    """
    n = pattern.world_size
    if cluster.world_size != n:
        raise ValueError(f"the pattern has {n} ranks but the cluster {cluster.world_size}: scale a ring "
                         f"first with pattern.scaled_ring({cluster.world_size})")
    if buffer_bytes is not None:
        amount("buffer_bytes", buffer_bytes, unit="bytes")
    if buffer_bytes is not None and pattern.buffer_bytes == 0:
        raise ValueError("a pattern of an empty buffer cannot be rescaled to another size")
    scale = 1.0 if buffer_bytes is None else buffer_bytes / pattern.buffer_bytes
    shown = list(range(n)) if ranks is None else list(ranks)
    if any(not 0 <= r < n for r in shown) or len(set(shown)) != len(shown):
        raise ValueError(f"ranks must be distinct ranks of 0..{n - 1}, got {shown}")
    lane_of = {rank: lane for lane, rank in enumerate(shown)}
    size = buffer_bytes if buffer_bytes is not None else pattern.buffer_bytes
    timeline = Timeline([f"rank {r}" for r in shown],
                        title=title or f"replayed traffic, {n} ranks, {size:g} bytes")
    clock, ready, sent_until = [0.0] * n, [0.0] * n, [0.0] * n  # sent_until: of the drawn ranks
    messages, seconds, drawn = None, [], []
    for k in range(pattern.num_steps):
        step = pattern.step(k)
        if step is not messages:  # a RingPattern hands out the same step every time: price it once
            messages = step
            seconds = [cluster.link_between(src, dst).transfer_time(nbytes * scale)
                       for src, dst, nbytes in messages]
            drawn = [i for i, (src, dst, _) in enumerate(messages) if src in lane_of or dst in lane_of]
        starts = [0.0] * len(messages)
        arrived = ready[:]
        for i, (src, dst, _) in enumerate(messages):
            start = clock[src] if clock[src] > ready[src] else ready[src]
            end = clock[src] = start + seconds[i]
            starts[i] = start
            if end > arrived[dst]:
                arrived[dst] = end
        for i in drawn:
            src, dst, nbytes = messages[i]
            start, end = starts[i], starts[i] + seconds[i]
            meta = {"step": k, "src": src, "dst": dst, "nbytes": nbytes * scale}
            if src in lane_of:
                if start > sent_until[src]:
                    timeline.add(lane_of[src], sent_until[src], start, "idle",
                                 f"waiting for step {k - 1}'s data")
                sent_until[src] = end
                timeline.add(lane_of[src], start, end, "comm", f"send -> {dst}, step {k}", meta)
            if dst in lane_of:
                timeline.add(lane_of[dst], start, end, "comm", f"recv <- {src}, step {k}", meta)
        ready = arrived
    timeline.sort_lanes(key=lambda event: (event.kind != "idle", event.start))  # waits first: drawn beneath
    finish = [max(c, r) for c, r in zip(clock, ready, strict=True)]
    return Replay(timeline, finish, pattern.num_steps)
