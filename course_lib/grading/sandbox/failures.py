"""Why an autograde attempt failed: nbgrader's own error, read from its log, and whether the grading
machine (a kernel that could not start, a machine too busy) rather than the student's code was at fault.

nbgrader ends a failed run with "Please see the above traceback": the traceback is in the log the
worker keeps, and `nbgrader_error` returns its last lines, so the report says what actually happened.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from course_lib.grading.sandbox.execute import MACHINE_BUSY

# nbgrader's own words around the error, which say nothing about it.
_GENERIC = ("There was an error processing assignment", "Please see the", "Did you mean:")
# Errors of the machine, not of the notebook: the kernel did not start or answer, its ports were taken,
# nbclient gave up waiting for it. Anything else nbgrader fails on is the submission's or the grader's.
MACHINE_ERRORS = ("Kernel didn't respond", "Kernel died before replying to kernel_info",
                  "did not answer kernel_info", "ZMQError", "Address already in use",
                  "Timeout waiting for IOPub output", "Timeout waiting for kernel_info reply")
NOTEBOOK_LIMIT = "(the whole notebook's time limit)"
MAX_ERROR_CHARS = 400
TRACEBACK_LINE = "| ERROR] Traceback (most recent call last):"


def _traceback_exception(block: list[str]) -> list[str]:
    """The exception lines at the end of a traceback (after its last frame and that frame's source)."""
    lines = textwrap.dedent("\n".join(block)).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    rest = lines[frames[-1] + 1:] if frames else lines
    while rest and (not rest[0].strip() or rest[0].startswith(" ")):
        rest = rest[1:]  # the frame's source line and its ^^^ markers
    return [line.strip() for line in rest if line.strip()]


def nbgrader_error(log: str) -> str:
    """The error that stopped nbgrader, in a line or three: the last traceback's exception, else its
    first specific ERROR line, else the log's last line."""
    lines = log.strip().splitlines()
    if not lines:
        return "nbgrader printed nothing"
    if NOTEBOOK_LIMIT in lines[0]:
        return lines[0]
    starts = [i for i, line in enumerate(lines) if line.endswith(TRACEBACK_LINE)]
    if starts:
        block = []
        for line in lines[starts[-1] + 1:]:
            if line.startswith("["):
                break
            block.append(line)
        exception = _traceback_exception(block)
        if exception:
            return " ".join(exception[:3])[:MAX_ERROR_CHARS]
    errors = [line.split("| ERROR]", 1)[1].strip() for line in lines if "| ERROR]" in line]
    specific = [error for error in errors if not error.startswith(_GENERIC)]
    return (specific or errors or lines[-1:])[0][:MAX_ERROR_CHARS]


def busy_machine() -> bool:
    """More processes wanted a core than there are cores, over the last minute."""
    return os.getloadavg()[0] > (os.cpu_count() or 1)


def _busy_cells(folder: Path) -> list[str]:
    found = []
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        try:
            cells = json.loads(path.read_text())["cells"]
        except (OSError, ValueError, KeyError):
            continue
        for index, cell in enumerate(cells):
            for output in cell.get("outputs", []):
                if output.get("ename") == MACHINE_BUSY:
                    found.append(f"{path.stem} cell {index + 1}: {output.get('evalue', '')}")
    return found


def _said_busy(log: str) -> bool:
    """Whether the grader itself (SandboxedExecute, in nbgrader's log) found the machine too busy."""
    return any(f": {MACHINE_BUSY}: " in line or f"({MACHINE_BUSY})" in line
               for line in log.splitlines() if line.startswith("[") and "| " in line.split("]")[0])


def machine_fault(ok: bool, log: str, autograded: Path) -> str | None:
    """Why this attempt failed for a reason outside the student's code (None: it did not), in a line."""
    if not ok:
        error = nbgrader_error(log)
        if any(marker in error for marker in MACHINE_ERRORS):
            return f"nbgrader could not run the notebook: {error}"
        if NOTEBOOK_LIMIT in error and busy_machine():
            return f"{error}, on a machine with more work than cores"
        return None
    # only the grader's own word counts (its log: the kernel's output no longer reaches it, kernel.py)
    busy = _busy_cells(autograded) if _said_busy(log) else []
    return f"the grading machine was too busy: {busy[0][:MAX_ERROR_CHARS]}" if busy else None
