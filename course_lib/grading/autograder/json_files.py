"""The small JSON files a grading run keeps in grading/ (review notes, refused zips, zip names, what was
graded, extensions): read as an object, written whole in one rename so that a stopped run leaves the old
file or the new one, never half of one."""

from __future__ import annotations

import json
from pathlib import Path


def read_object(path: Path) -> dict:
    """The JSON object at path ({} when missing or damaged: a run stopped while an older version wrote it)."""
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def write_atomically(path: Path, value) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(value, indent=1, sort_keys=True))
    partial.replace(path)
