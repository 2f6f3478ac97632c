"""Reading an autograded notebook for what an instructor must review, and tidying what students see.

It finds dead or stuck kernels, cell timeouts, a machine too busy and truncated output; shortens a
deadlock (RanksHungError) to its message, without the timeout traceback, in the cells where the isolated
re-check itself saw the ranks hang (an error name in the notebook is the student's to choose); and writes
the isolated re-check's verdict under each test cell it failed, so the feedback explains a score the
notebook alone would not.
"""

from __future__ import annotations

import re

from nbformat.notebooknode import NotebookNode

from course_lib.grading.sandbox.execute import (
    CELL_TIMEOUT,
    KERNEL_DIED,
    KERNEL_SILENT,
    KERNEL_STUCK,
    MACHINE_BUSY,
    OUTPUT_TRUNCATED,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
HANG_NAMES = ("RanksHungError",)
ISOLATED_FAILED = "IsolatedCheckFailed"


def _grade_id(cell) -> str | None:
    return (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")


def execution_notes(notebook) -> list[str]:
    """Review reasons found in the outputs of an executed notebook."""
    notes = []
    truncated_marker = OUTPUT_TRUNCATED.split("{")[0]
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            name = output.get("ename")
            label = _grade_id(cell) or f"cell {index + 1}"
            if name == KERNEL_DIED and "while running this cell" in output.get("evalue", ""):
                notes.append(f"the kernel died in {label}; what did not run scores 0")
            elif name == CELL_TIMEOUT:
                notes.append(f"{label} ran past the per-cell time limit and was interrupted")
            elif name == KERNEL_STUCK and "did not run" not in output.get("evalue", ""):
                notes.append(f"{label} ran past its time limit and the kernel did not stop when interrupted; "
                             "what did not run scores 0")
            elif name == KERNEL_SILENT and "did not run" not in output.get("evalue", ""):
                notes.append(f"{label}: the kernel answered but then stopped reporting back while the "
                             "machine gave it time; what did not run scores 0")
            elif name == MACHINE_BUSY and "did not run" not in output.get("evalue", ""):
                notes.append(f"{label}: the grading machine was too busy ({output.get('evalue', '')})")
            elif output.get("output_type") == "stream" and truncated_marker in output.get("text", ""):
                notes.append(f"{label} printed too much; its output was truncated")
    return notes


def hang_notes(verdicts: dict) -> list[str]:
    """A note per registered cell whose isolated re-check found the ranks hung: the judge's own launcher
    measured it (judge.Verdict.hung), so a student's exception named RanksHungError writes none."""
    return [f"{grade_id}: the ranks deadlocked (the isolated re-check stopped them at their timeout)"
            for grade_id, verdict in sorted(verdicts.items()) if getattr(verdict, "hung", False)]


def shorten_deadlocks(notebook, hung_cells: set[str]) -> None:
    """A deadlock shows as its own message (where each rank is blocked), not a page of traceback, under
    the cells the isolated re-check saw hang."""
    for cell in notebook.cells:
        if _grade_id(cell) not in hung_cells:
            continue
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error" and output.get("ename") in HANG_NAMES:
                message = ANSI.sub("", output.get("evalue", ""))
                output["traceback"] = [f"{output['ename']}: deadlock detected", *message.splitlines()]


def add_isolated_verdicts(notebook, failures: dict[str, str]) -> None:
    """Under each test cell whose isolated re-check failed, say so and why (the score follows it)."""
    for cell in notebook.cells:
        message = failures.get(_grade_id(cell))
        if message is None or cell.cell_type != "code":
            continue
        text = ("The grader re-ran this test outside your notebook, on fresh inputs, "
                f"and it failed there:\n{ANSI.sub('', message)}")
        cell.setdefault("outputs", []).append(NotebookNode(
            output_type="error", ename=ISOLATED_FAILED, evalue=text.splitlines()[0],
            traceback=[f"{ISOLATED_FAILED}: {line}" if i == 0 else line
                       for i, line in enumerate(text.splitlines())]))
