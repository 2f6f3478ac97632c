"""Export a Timeline to the Chrome trace event JSON that torch.profiler writes and Perfetto opens.

Each lane becomes a process ("rank N") with two threads, compute and comm; times are microseconds.
"""

from __future__ import annotations

import json
import os


def timeline_to_trace(timeline, lanes=None) -> dict:
    indices = range(len(timeline.lanes)) if lanes is None else list(lanes)
    events = []
    for pid in indices:
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": timeline.lane_names[pid]}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        for tid, stream in enumerate(("compute", "comm")):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"name": stream}})
        for e in timeline.lanes[pid]:
            event = {"name": e[3], "cat": e[2], "ph": "X", "pid": pid, "tid": 1 if e[2] == "comm" else 0,
                     "ts": e[0] * 1e6, "dur": (e[1] - e[0]) * 1e6}
            if len(e) > 4 and e[4]:
                event["args"] = e[4]
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": "course_lib.sim", "title": timeline.title}}


def save_trace(timeline, path, lanes=None) -> str:
    path = os.fspath(path)
    with open(path, "w") as f:
        json.dump(timeline_to_trace(timeline, lanes), f, default=str)
    return path
