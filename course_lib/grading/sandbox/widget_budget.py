"""The widget state a notebook's kernel sends (ipywidgets' comm messages), kept under the output cap;
the size the output caps count (`output_size`).

nbclient keeps every widget's state (the ``state`` of each comm_open and comm_msg, its binary buffers
base64-encoded) for the notebook's metadata, in the grading process. None of it passed through the
per-cell output cap: 30 widgets of 10 MB took `nbgrader autograde` from 326 MB to 1.3 GB and wrote a
300 MB autograded notebook (issue 53). `WidgetBudget` counts what the grader keeps, per widget and key,
so a state that replaces an older one gives its bytes back (a progress bar's updates cost nothing more),
and refuses a message that would take the whole notebook's widget state past the limit.
"""

from __future__ import annotations

import json


def output_size(output) -> int:
    """About the bytes an output keeps (or a message's content, given its output_type): a stream's text,
    else its data and traceback."""
    if output.get("output_type") == "stream":
        return len(output.get("text", ""))
    data = output.get("data", {}) or {}
    return sum(len(str(value)) for value in data.values()) + len("".join(output.get("traceback", [])))


def state_size(value) -> int:
    """About the bytes a widget's state value takes in the notebook's JSON."""
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, default=str))


def _buffer_keys(paths, buffers) -> list[tuple[tuple, int]] | None:
    """(key, base64 bytes) per buffer, as nbclient stores them; None for paths nbclient would fail on."""
    if not isinstance(paths, list) or not isinstance(buffers, list):
        return None
    keys = []
    for path, buffer in zip(paths, buffers, strict=False):
        if not isinstance(path, list) or not all(isinstance(part, (str, int)) for part in path):
            return None
        keys.append((("buffer", *path), (len(buffer) + 2) // 3 * 4))
    return keys


class WidgetBudget:
    """Bytes of widget state the grader keeps for one notebook, at most ``limit``."""

    def __init__(self, limit: int):
        self.limit = limit
        self.total = 0
        self.kept: dict[str, dict] = {}   # comm id -> {state key or buffer path: bytes kept}

    def admit(self, msg: dict) -> bool:
        """Whether nbclient may keep this comm message: False for one that would take the notebook's widget
        state past the limit, or that nbclient could not store (it would stop the whole notebook)."""
        content = msg.get("content")
        data = content.get("data") if isinstance(content, dict) else None
        if not isinstance(data, dict) or "state" not in data:
            return True   # a custom message or a close: nbclient keeps no state for it
        state, comm_id = data["state"], content.get("comm_id")
        if not isinstance(state, dict) or not isinstance(comm_id, str):
            return False
        try:
            # each key's name counts too ("name": value): a million long keys of empty values is no free state
            sizes = {key: len(str(key)) + 4 + state_size(value) for key, value in state.items()}
        except (TypeError, ValueError, RecursionError):   # a structure too deep to write: not kept
            return False
        if data.get("buffer_paths"):
            buffers = _buffer_keys(data["buffer_paths"], msg.get("buffers") or [])
            if buffers is None:
                return False
            sizes.update(buffers)
        kept = self.kept.setdefault(comm_id, {})
        grown = sum(sizes.values()) - sum(kept.get(key, 0) for key in sizes)
        if self.total + grown > self.limit:
            return False
        kept.update(sizes)
        self.total += grown
        return True
