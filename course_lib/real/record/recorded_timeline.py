"""Turning the traffic a real run recorded into the simulator's Timeline, to draw it beside a simulation.

Times become seconds since the first recorded call of any rank, so real and simulated runs share an axis.
"""

from __future__ import annotations

from collections.abc import Iterable

from course_lib.sim import Timeline

from .traffic_log import TrafficEvent, TrafficLog


def _flatten(records) -> list[TrafficEvent]:
    events: list[TrafficEvent] = []
    for record in records:
        if isinstance(record, TrafficLog):
            events += record.events
        elif isinstance(record, TrafficEvent):
            events.append(record)
        elif isinstance(record, Iterable):
            events += _flatten(record)
        else:
            raise TypeError(f"expected TrafficLog or TrafficEvent records (what record_traffic gives), "
                            f"got {type(record).__name__}")
    return events


def _logs(records) -> list[TrafficLog]:
    if isinstance(records, TrafficLog):
        return [records]
    if isinstance(records, TrafficEvent) or not isinstance(records, Iterable):
        return []
    return [log for record in records for log in _logs(record)]


def traffic_timeline(records, world_size: int | None = None, title: str = "measured run",
                     since: float | None = None) -> Timeline:
    """A Timeline with one lane per rank, one ``comm`` event per recorded call and one ``compute``
    event per ``log.span(...)`` block.

    ``records`` is what the ranks returned: a list of ``TrafficLog`` (``run_ranks`` results), or of
    lists of ``TrafficEvent``. Labels read ``send->1``, ``recv<-0`` or the collective's name; each
    event's meta holds ``op``, ``peer`` and ``nbytes``. ``since`` (a time on the records' clock, e.g. the
    start of the last step's first span) keeps only what started then or later.
    """
    events = _flatten(records)
    spans = [(log.rank, *span) for log in _logs(records) for span in log.spans]
    if since is not None:
        events = [e for e in events if e.start >= since]
        spans = [span for span in spans if span[2] >= since]
    named = [e.rank for e in events] + [span[0] for span in spans]
    ranks = world_size if world_size is not None else 1 + max(named, default=-1)
    if any(rank >= ranks for rank in named):
        raise ValueError(f"a record names rank {max(named)} but world_size={ranks}")
    timeline = Timeline([f"rank {rank}" for rank in range(ranks)], title=title)
    origin = min([e.start for e in events] + [start for _, _, start, _ in spans], default=0.0)
    for rank, label, start, end in spans:
        timeline.add(rank, start - origin, max(end, start) - origin, "compute", label)
    for event in sorted(events, key=lambda e: (e.rank, e.start)):
        arrow = {"send": "->", "isend": "->", "recv": "<-", "irecv": "<-"}.get(event.op)
        label = f"{event.op}{arrow}{event.peer}" if arrow and event.peer is not None else event.op
        timeline.add(event.rank, event.start - origin, max(event.end, event.start) - origin, "comm", label,
                     {"op": event.op, "peer": event.peer, "nbytes": event.nbytes})
    return timeline
