"""Turning the traffic a real run recorded into the simulator's Timeline, to draw it beside a simulation.

Times become seconds since the first recorded call of any rank, so real and simulated runs share an axis.
"""

from __future__ import annotations

from collections.abc import Iterable

from course_lib.sim import Timeline

from .traffic import TrafficEvent, TrafficLog


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


def traffic_timeline(records, world_size: int | None = None, title: str = "measured run") -> Timeline:
    """A Timeline with one lane per rank and one ``comm`` event per recorded call.

    ``records`` is what the ranks returned: a list of ``TrafficLog`` (``run_ranks`` results), or of
    lists of ``TrafficEvent``. Labels read ``send->1``, ``recv<-0`` or the collective's name; each
    event's meta holds ``op``, ``peer`` and ``nbytes``.
    """
    events = _flatten(records)
    ranks = world_size if world_size is not None else 1 + max((e.rank for e in events), default=-1)
    if any(e.rank >= ranks for e in events):
        raise ValueError(f"a record names rank {max(e.rank for e in events)} but world_size={ranks}")
    timeline = Timeline([f"rank {rank}" for rank in range(ranks)], title=title)
    origin = min((e.start for e in events), default=0.0)
    for event in sorted(events, key=lambda e: (e.rank, e.start)):
        arrow = {"send": "->", "isend": "->", "recv": "<-", "irecv": "<-"}.get(event.op)
        label = f"{event.op}{arrow}{event.peer}" if arrow and event.peer is not None else event.op
        timeline.add(event.rank, event.start - origin, max(event.end, event.start) - origin, "comm", label,
                     {"op": event.op, "peer": event.peer, "nbytes": event.nbytes})
    return timeline
