"""A graded cell's score from its check's verdict, and the reason for every point it lost.

nbgrader scores a test cell 0 when any output is an error, a ``stderr`` stream included, so a correct
answer on which torch, numpy or Python warns (on a rank, in a forked child, in the kernel) lost the cell.
Here the cell is scored as its check decided: an error output costs it, a warning on stderr does not (it
stays shown, labelled as a warning). A cell whose output the grader truncated keeps nbgrader's score:
its error may be among what was dropped. Every cell below full marks gets its reason, beside the cell
in the feedback and in the instructor's notes.
"""

from __future__ import annotations

import copy

from nbformat.notebooknode import NotebookNode
from nbgrader.utils import determine_grade

from course_lib.grading.autograder.review import ANSI
from course_lib.grading.sandbox.execute import (
    CELL_TIMEOUT,
    KERNEL_DIED,
    KERNEL_SILENT,
    KERNEL_STUCK,
    MACHINE_BUSY,
    OUTPUT_TRUNCATED,
)
from course_lib.grading.student_text import quoted
from course_lib.notebook_cells import marks

TRUNCATED = OUTPUT_TRUNCATED.split("{")[0]
ISOLATED_FAILED = "IsolatedCheckFailed"   # review.add_isolated_verdicts' note, not the notebook's error
SCORE_NOTE = "GradedCellScore"   # the name of the note written under a cell that lost points
WARNINGS_NOTE = ("The lines this cell printed on stderr above are warnings (from torch, numpy, Python or "
                 "your code, on a rank or in the notebook), not errors: they cost no points. This cell's "
                 "score comes from its check, which passed.")
_WHY = {CELL_TIMEOUT: "ran past its time limit and was interrupted",
        KERNEL_DIED: "the kernel died (a crash, os._exit or the memory limit)",
        KERNEL_STUCK: "the kernel did not stop when interrupted",
        KERNEL_SILENT: "the kernel stopped reporting back (the notebook's code kept it from answering)",
        MACHINE_BUSY: "the grading machine was too busy"}


def is_test_cell(cell) -> bool:
    """A graded code cell that is not an answer: its score comes from its outputs (its check)."""
    meta = marks(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _stderr(output) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stderr"


def warnings_text(cell) -> str:
    """What the cell printed on stderr (the grader's truncation note left out)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if _stderr(o) and TRUNCATED not in o.get("text", ""))


def _first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in ANSI.sub("", text or "").splitlines() if line.strip()]
    line = lines[0] if lines else ""
    if line.endswith(":") and len(lines) > 1:   # "...: where each rank is blocked:" says it on the next line
        line = f"{line} {lines[1]}"
    return line if len(line) <= limit else line[:limit - 3] + "..."


def check_score(cell) -> float | None:
    """The cell's points as its check decided: nbgrader's rule without its stderr clause. None where
    the grader cannot tell (its output was truncated: an error may be among what was dropped)."""
    if any(_stderr(o) and TRUNCATED in o.get("text", "") for o in cell.get("outputs", [])):
        return None
    plain = copy.deepcopy(cell)
    plain["outputs"] = [o for o in cell.get("outputs", []) if not _stderr(o)]
    return determine_grade(plain)[0]


def notebook_error(cell) -> str:
    """The first error the cell shows, in a line: what its check (or the machine) said."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error" and output.get("ename") != ISOLATED_FAILED:
            name = output.get("ename", "error")
            value = _first_line(output.get("evalue", ""))
            why = _WHY.get(name)
            return f"{name}: {why}" + (f" ({value})" if value else "") if why else f"{name}: {value}"
    return ""


def rescore(notebook, name: str, scores: dict) -> list[str]:
    """Scores of ``notebook``'s test cells that nbgrader zeroed for a stderr stream alone, set to what their
    check decided (in place, in ``scores``: (notebook, grade_id) -> (points, needs_manual)); returns their
    grade_ids."""
    rescored = []
    for cell in notebook.cells:
        grade_id = marks(cell).get("grade_id")
        if not is_test_cell(cell) or (name, grade_id) not in scores or not warnings_text(cell):
            continue
        points, manual = scores[(name, grade_id)]
        decided = check_score(cell)
        if points is not None and decided is not None and decided > points:
            scores[(name, grade_id)] = (decided, manual)
            rescored.append(grade_id)
    return rescored


def reasons(notebook, name: str, points: dict[str, float], verdicts: dict) -> dict[str, str]:
    """grade_id -> why each test cell of ``notebook`` scored below full: "0/3: <reason>".

    ``points``: the cell's final points; ``verdicts``: the isolated judge's, by grade_id.
    """
    found = {}
    for cell in notebook.cells:
        grade_id = marks(cell).get("grade_id")
        if not is_test_cell(cell) or grade_id not in points:
            continue
        maximum = float(marks(cell).get("points", 0))
        got = points[grade_id]
        if got >= maximum:
            continue
        verdict = verdicts.get(grade_id)
        judged = verdict is not None and not verdict.passed
        error = notebook_error(cell)
        if judged and error:
            why = f"{error}; the isolated re-check failed too: {_first_line(verdict.message)}"
        elif judged:
            why = f"the isolated re-check failed: {_first_line(verdict.message)}"
        elif error:
            why = error
        elif check_score(cell) is None:
            why = "the grader truncated its output (it printed too much), so its check's verdict is lost"
        elif not cell.get("outputs") and cell.get("execution_count") is None:
            why = "the cell did not run"
        elif (check_score(cell) or 0) >= maximum:   # e.g. no verdict from the isolated re-check
            why = "it passed in the notebook, but the grader could not confirm it (see the review notes)"
        else:
            why = f"its check gave {got:g} of {maximum:g} points"
        found[grade_id] = f"{got:g}/{maximum:g}: {why}"
    return found


def disagreements(notebook, name: str, notebook_points: dict[str, float], verdicts: dict) -> dict[str, str]:
    """grade_id -> a note for each registered cell that failed in the notebook but passed the isolated
    re-check (the other way round, scoring.finish's "disputed", is noted there)."""
    found = {}
    for cell in notebook.cells:
        grade_id = marks(cell).get("grade_id")
        verdict = verdicts.get(grade_id)
        if not is_test_cell(cell) or verdict is None or not verdict.passed or grade_id not in notebook_points:
            continue
        maximum = float(marks(cell).get("points", 0))
        if notebook_points[grade_id] < maximum:
            # what the notebook showed is the student's kernel's to write: quoted as such in the grader's note
            why = quoted(notebook_error(cell), 300) if notebook_error(cell) else "no error shown"
            found[grade_id] = (f"{grade_id} failed in the notebook ({why}) but passed the isolated re-check: "
                               f"scored {notebook_points[grade_id]:g}/{maximum:g} (the lower of the two)")
    return found


def annotate(notebook, lost: dict[str, str], full_with_warnings: set[str]) -> None:
    """Beside each test cell: why it lost points, or that its stderr lines are warnings that cost none."""
    for cell in notebook.cells:
        grade_id = marks(cell).get("grade_id")
        if not is_test_cell(cell):
            continue
        if grade_id in lost:
            got, _, why = lost[grade_id].partition(": ")
            text = f"This test cell scores {got} points: {why}"
            cell.setdefault("outputs", []).append(NotebookNode(
                output_type="stream", name="stdout", text=f"\n[{SCORE_NOTE}] {text}\n"))
        elif grade_id in full_with_warnings:
            cell.setdefault("outputs", []).append(NotebookNode(
                output_type="stream", name="stdout", text=f"\n[warnings] {WARNINGS_NOTE}\n"))


JUDGE_STDERR = "[the isolated re-check of this cell printed on stderr]\n"


def show_judge_stderr(notebook, verdicts: dict) -> None:
    """Under each test cell the judge passed, what its run printed on stderr (a kernel whose hidden checks
    are judged apart ran none, so a right answer's warnings appear only there): shown as stderr, so that
    `annotate` tells the student they are warnings that cost nothing."""
    for cell in notebook.cells:
        verdict = verdicts.get(marks(cell).get("grade_id"))
        if is_test_cell(cell) and verdict is not None and verdict.passed and verdict.stderr.strip():
            cell.setdefault("outputs", []).append(NotebookNode(
                output_type="stream", name="stderr",
                text=JUDGE_STDERR + verdict.stderr.replace(TRUNCATED, "«output cut»")))
