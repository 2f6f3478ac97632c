"""The Timeline every simulation returns: one lane per rank, each a list of ``Span(start, end, kind, label,
meta)`` records.

Kinds are ``compute``, ``comm`` and ``idle``; lanes of symmetric ranks may share one event list.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator
from numbers import Integral
from typing import NamedTuple

from .vocabulary import EVENT_KINDS


def _finite(x) -> bool:
    try:
        return not isinstance(x, bool) and math.isfinite(x)
    except TypeError:   # a string or None: not a time
        return False


class Span(NamedTuple):
    """One event of a lane: seconds on the virtual clock, its kind (EVENT_KINDS), a label, optional detail."""

    start: float
    end: float
    kind: str
    label: str
    meta: dict | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


def span(start: float, end: float, kind: str, label: str, meta: dict | None = None) -> Span:
    """A Span, built at tuple speed (the simulator makes millions: NamedTuple's __new__ costs 5x more)."""
    return _new_span(Span, (start, end, kind, label, meta))


_new_span = tuple.__new__


def _as_spans(lanes) -> list[list[Span]]:
    """The lanes with every event a Span: lists of Spans kept as they are (shared lists stay shared), a
    list of plain (start, end, kind, label[, meta]) tuples converted once."""
    converted: dict[int, list] = {}
    result = []
    for lane in lanes:
        if lane and not isinstance(lane[0], Span):
            if id(lane) not in converted:
                converted[id(lane)] = [Span(*event) for event in lane]
            lane = converted[id(lane)]
        result.append(lane)
    return result


@contextlib.contextmanager
def making_spans():
    """Pause the cyclic garbage collector while millions of Spans are made (one big step's lowering).

    Spans hold no references back, so reference counting frees them; but unlike plain tuples, tuple
    subclasses stay tracked by the collector, whose passes over them doubled a 64-stage step's time.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Event(NamedTuple):
    """One event as ``Timeline.events()`` yields it: a Span with the lane it is on."""

    lane: int
    start: float
    end: float
    kind: str
    label: str
    meta: dict | None = None


class Timeline:
    """Events per lane (a lane is one rank or one pipeline stage) on a virtual clock in seconds.

    Build one with ``Timeline(["rank 0", "rank 1"])`` and ``add(lane, start, end, kind, label)``.
    ``makespan`` is the last end; ``bubble_fraction`` the share of lane-time with no compute.
    Read ``lanes`` freely but write through ``add``: several lanes may hold the very same list.
    """

    def __init__(self, lane_names, lanes=None, title: str = "", lane_groups=None):
        self.lane_names = list(lane_names)
        # ``lanes`` may hold one list several times (ranks of a pipeline stage share their events, which
        # is what keeps a step of thousands of ranks fast). ``_own[i]`` is the list lane i may append to
        # in place: only lists this timeline made for lane i alone; any other is copied on first add.
        if lanes is None:
            self.lanes: list[list[Span]] = [[] for _ in self.lane_names]
            self._own: list = list(self.lanes)
        else:
            self.lanes = _as_spans(lanes)   # our own outer list: copying a lane must not change the caller's
            self._own = [None] * len(self.lanes)
        if len(self.lanes) != len(self.lane_names):
            raise ValueError(f"{len(self.lane_names)} lane names but {len(self.lanes)} lanes")
        self.title = title
        # Optional label per lane saying which group it belongs to (e.g. "stage 2"); viz groups by it.
        self.lane_groups = list(lane_groups) if lane_groups is not None else None
        # What simulate_pipeline played, set through ``attach_pipeline``; None on other timelines.
        self.schedule = None
        self.peak_activations: list | None = None

    # -- building ------------------------------------------------------------------------------
    def add(self, lane: int, start: float, end: float, kind: str, label: str, meta: dict | None = None):
        """Append one event to ``lane`` only (never to lanes sharing its list); ``end >= start``."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"event kind must be one of {EVENT_KINDS}, got {kind!r}")
        if not (_finite(start) and _finite(end)):
            raise ValueError(f"event {label!r}: start and end must be finite seconds, got {start!r}, {end!r}")
        if end < start:
            raise ValueError(f"event {label!r} ends ({end}) before it starts ({start})")
        lanes = self.lanes
        # A negative index would silently pick a lane from the end: refuse it like one past the end.
        if isinstance(lane, bool) or not isinstance(lane, Integral) or not 0 <= lane < len(lanes):
            raise ValueError(f"lane must be a lane index in 0..{len(lanes) - 1}, got {lane!r}")
        event = span(start, end, kind, label, meta)
        events = lanes[lane]
        if len(self._own) < len(lanes):     # lanes appended to ``.lanes`` by hand are not ours
            self._own.extend([None] * (len(lanes) - len(self._own)))
        if self._own[lane] is not events:
            # Copy on write: the list may be shared with other ranks (or be the caller's); the copy is
            # this lane's alone from now on, so later adds append in place.
            events = list(events)
            lanes[lane] = self._own[lane] = events
        events.append(event)

    def attach_pipeline(self, schedule, peak_activations) -> None:
        """Record the pipeline schedule this timeline plays and each stage's peak held activations."""
        self.schedule = schedule
        self.peak_activations = list(peak_activations)

    def sort_lanes(self, key) -> None:
        """Sort every distinct event list once by ``key(span)`` (the order viz draws them in)."""
        for events, _ in self._unique_lanes():
            events.sort(key=key)

    # -- reading -------------------------------------------------------------------------------
    def _unique_lanes(self):
        """(lane list, how many lanes share it) for each distinct list: shared lanes are counted once."""
        seen: dict[int, list] = {}
        for lane in self.lanes:
            entry = seen.get(id(lane))
            if entry is None:
                seen[id(lane)] = [lane, 1]
            else:
                entry[1] += 1
        return seen.values()

    @property
    def num_events(self) -> int:
        return sum(len(lane) for lane in self.lanes)

    @property
    def makespan(self) -> float:
        ends = [max(e.end for e in lane) for lane, _ in self._unique_lanes() if lane]
        return max(ends, default=0.0)

    def busy_time(self, kind: str = "compute") -> float:
        """Total seconds of ``kind`` events summed over all lanes."""
        return sum(count * sum(e.end - e.start for e in lane if e.kind == kind)
                   for lane, count in self._unique_lanes())

    @property
    def bubble_fraction(self) -> float:
        """Idle / total device-time: 1 - compute time / (lanes x makespan)."""
        total = len(self.lanes) * self.makespan
        return 0.0 if total == 0 else 1.0 - self.busy_time("compute") / total

    def events(self, lane: int | None = None) -> Iterator[Event]:
        """Every event as an ``Event`` named tuple, lane by lane (or of one lane)."""
        indices = range(len(self.lanes)) if lane is None else (lane,)
        for i in indices:
            for e in self.lanes[i]:
                yield Event(i, *e)

    def __repr__(self) -> str:
        return (f"Timeline({self.title or 'untitled'}: {len(self.lanes)} lanes, {self.num_events} events, "
                f"makespan {self.makespan:.6g} s)")

    # -- export --------------------------------------------------------------------------------
    def to_perfetto(self, lanes=None) -> dict:
        """The Chrome/Perfetto trace (as torch.profiler writes it): open in ui.perfetto.dev.

        ``lanes``: None for all, a list of lane indices, or "distinct" for one lane per group of
        identical ranks (what to export from a step of thousands of simulated GPUs)."""
        from .trace import timeline_to_trace
        return timeline_to_trace(self, lanes)

    def save_perfetto(self, path, lanes=None) -> str:
        """Write the trace JSON to ``path`` (all lanes, or the indices in ``lanes``) and return the path."""
        from .trace import save_trace
        return save_trace(self, path, lanes)


def stack_timelines(named: dict, title: str = "") -> Timeline:
    """One Timeline holding each named timeline's lanes one under the other ("measured: rank 0", ...),
    every one on its own clock from 0: a real run and a simulated one drawn on one axis, saved as one
    Perfetto trace."""
    if not named or not all(isinstance(t, Timeline) for t in named.values()):
        raise ValueError("stack_timelines takes {name: Timeline}, at least one, e.g. "
                         "{'measured': traffic_timeline(logs), 'simulated': report.timeline}")
    names, lanes, groups = [], [], []
    for name, timeline in named.items():
        names += [f"{name}: {lane}" for lane in timeline.lane_names]
        lanes += [list(lane) for lane in timeline.lanes]
        groups += [name] * len(timeline.lanes)
    return Timeline(names, lanes, title=title or " | ".join(named), lane_groups=groups)
