"""Export a Timeline to the Chrome trace event JSON that torch.profiler writes and Perfetto opens.

Each lane becomes a process ("rank N") with two threads, compute and comm; times are microseconds.
"""

from __future__ import annotations

import json
import os


def _lane_indices(timeline, lanes) -> tuple[list, dict]:
    """Which lanes to export, and how many ranks each one stands for when ``lanes == "distinct"``."""
    if lanes is None:
        return list(range(len(timeline.lanes))), {}
    if lanes == "distinct":   # one lane per distinct event list: ranks that share theirs are alike
        first: dict = {}
        for i, lane in enumerate(timeline.lanes):
            first.setdefault(id(lane), [i, 0])[1] += 1
        return [i for i, _ in first.values()], {i: n for i, n in first.values() if n > 1}
    return list(lanes), {}


def timeline_to_trace(timeline, lanes=None) -> dict:
    """``lanes``: None (all), a list of lane indices, or "distinct" (one lane per distinct event list)."""
    indices, shared = _lane_indices(timeline, lanes)
    events = []
    for pid in indices:
        name = timeline.lane_names[pid]
        if pid in shared:
            name += f" (and {shared[pid] - 1} identical ranks)"
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        for tid, stream in enumerate(("compute", "comm")):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": stream}})
        for e in timeline.lanes[pid]:
            event = {"name": e.label, "cat": e.kind, "ph": "X", "pid": pid,
                     "tid": 1 if e.kind == "comm" else 0, "ts": e.start * 1e6, "dur": (e.end - e.start) * 1e6}
            if e.meta:
                event["args"] = e.meta
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "course_lib.sim", "title": timeline.title}}


def save_trace(timeline, path, lanes=None) -> str:
    path = os.fspath(path)
    with open(path, "w") as f:
        json.dump(timeline_to_trace(timeline, lanes), f, default=str)
    return path
