"""Chapter 03 uses the student's own chapter-02 ring when it works, and torch's all_reduce otherwise.

``own_ring_all_reduce()`` reads the exercise cells of the student's chapter-02 notebook, runs the visible
ring checks on them quietly, and returns the ring only if they pass: later lessons never run a broken ring.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import torch.distributed as dist

from course_lib.grading.attempt.student_function import STUDENT_PRELUDE
from course_lib.grading.checks.ch02_ring.visible import check_ring_all_reduce
from course_lib.notebook_cells import sources_by_id

CHAPTER_02 = Path("..") / "02_collectives" / "02_collectives.ipynb"
RING_CELLS = ("ring_reduce_scatter", "ring_all_gather", "ring_all_reduce")


def own_ring_all_reduce(notebook=CHAPTER_02):
    """(all_reduce function, sentence saying which one it is): the student's ring, or dist.all_reduce."""
    path = Path(notebook)
    try:
        namespace: dict = {"__name__": "chapter_02"}
        cells = sources_by_id(path, RING_CELLS, answers_only=True)
        exec(compile(STUDENT_PRELUDE + "\n\n".join(cells), str(path), "exec"), namespace)
        ring = namespace["ring_all_reduce"]
        with contextlib.redirect_stdout(io.StringIO()):
            check_ring_all_reduce(ring)
    except Exception as error:  # noqa: BLE001 - any reason at all means: do not use this ring
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        return dist.all_reduce, f"torch's dist.all_reduce (your chapter-02 ring is not usable yet: {reason})"
    return ring, f"your own ring_all_reduce from {path}"
