"""Execute a notebook headless, as a student's "Run All" would, with a per-cell and a total time limit.

Used by the tests for every solution notebook and by the release checks; never imported by notebooks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

from course_lib.viz.worked_answer import SHOW_ANSWERS_ENV

COURSE_KERNEL = "distributed-course"


class NotebookFailed(AssertionError):
    """A notebook did not run top to bottom; the message names the cell and what went wrong."""


def execute_notebook(path: Path, cell_timeout: float = 120, total_timeout: float = 180,
                     kernel_name: str = COURSE_KERNEL) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell of ``path`` in its own folder; return the executed notebook and the seconds it took."""
    path = Path(path)
    notebook = nbformat.read(path, as_version=4)
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = NotebookClient(notebook, timeout=cell_timeout, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(path.parent)}})
    started = time.perf_counter()
    # the course's own runs check the Problems' worked answers, so they run at once, not on a button press
    answers_before = os.environ.get(SHOW_ANSWERS_ENV)
    os.environ[SHOW_ANSWERS_ENV] = "1"
    try:
        client.execute()
    except CellTimeoutError as error:
        raise NotebookFailed(f"{path.name}: a cell ran longer than {cell_timeout} s\n{error}") from None
    except CellExecutionError as error:
        raise NotebookFailed(f"{path.name}: a cell raised an error\n{error}") from None
    finally:
        if answers_before is None:
            os.environ.pop(SHOW_ANSWERS_ENV, None)
        else:
            os.environ[SHOW_ANSWERS_ENV] = answers_before
    elapsed = time.perf_counter() - started
    if elapsed > total_timeout:
        raise NotebookFailed(f"{path.name} took {elapsed:.0f} s, over its budget of {total_timeout:.0f} s: "
                             "make the slow cells smaller (fewer steps, smaller tensors)")
    return notebook, elapsed


def code_outputs_text(notebook: nbformat.NotebookNode) -> str:
    """Everything the code cells printed, as one string (handy for asserting on a lesson's numbers)."""
    pieces = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                pieces.append(output.get("text", ""))
            elif "data" in output and "text/plain" in output["data"]:
                pieces.append(output["data"]["text/plain"])
    return "\n".join(pieces)
