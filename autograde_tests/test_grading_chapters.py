"""Every chapter through the whole grading pipeline: the reference solution earns full marks and needs no
review, the release left unanswered earns 0 without stopping the run, and each wrong answer sent through
nbgrader earns exactly the points per test cell its expected_scores.json gives it.

One row of support/chapter_classes.CHAPTERS per exercise; its grading run is the session fixture the row
names (conftest.py).
"""

from __future__ import annotations

import csv
import json
from datetime import datetime

import nbformat
import pytest

from autograde_tests.conftest import GRADING_RUN_TIMEOUT_S
from autograde_tests.support.chapter_classes import CHAPTERS, LEFT_IN_TMP, Chapter, max_points
from course_lib.grading.autograder import cell_verdicts

# Each test asks for its chapter's grading run by name (request.getfixturevalue), so conftest's hook cannot
# see it: whichever test first pays for a run gets the run's time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(GRADING_RUN_TIMEOUT_S)]

CASES = [pytest.param(chapter, suffix, id=f"{chapter.fixtures or chapter.assignment}-{suffix}")
         for chapter in CHAPTERS for suffix in chapter.expected()]


def test_every_chapter_has_graded_cells():
    for chapter in CHAPTERS:
        assert sum(chapter.expected()["solution"].values()) > 0, chapter.assignment


@pytest.mark.parametrize("chapter, suffix", CASES)
def test_submission_earns_exactly_its_expected_points(request, chapter: Chapter, suffix: str):
    graded = request.getfixturevalue(chapter.run)
    result = graded.results[(chapter.assignment, f"{chapter.prefix}_{suffix}")]
    expected = chapter.expected()[suffix]
    got = {cell: result.cells.get(cell) for cell in expected}
    assert got == expected, f"{chapter.assignment}/{suffix}: {result.notes}"
    if suffix == "solution":
        assert not result.needs_review, result.notes


ASSIGNMENTS = sorted({(chapter.assignment, chapter.prefix, chapter.run) for chapter in CHAPTERS})


@pytest.mark.parametrize("assignment, prefix, run", ASSIGNMENTS, ids=[a for a, _, _ in ASSIGNMENTS])
def test_the_reference_runs_every_cell_and_every_worked_answer(request, assignment: str, prefix: str,
                                                                run: str):
    """The graded reference is the course's run of each graded chapter top to bottom (CHAPTERS.md: the
    solution executes headless), worked answers shown (chapter_classes.with_worked_answers_shown): no cell
    may raise, every Problem's worked answer prints its answer, and the lesson leaves no course folder in
    the temporary folder (the student's own /tmp in the sandbox). Each cell ran within the grading run's
    limit for it; the time of the whole is printed (benchmarks/bench_notebooks.py holds the budget)."""
    graded = request.getfixturevalue(run)
    student = f"{prefix}_solution"
    notebook = nbformat.read(graded.root / "grading" / "autograded" / student / assignment
                             / f"{assignment}.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    errors = [(index, output.get("ename"), output.get("evalue", "")[:300]) for index, cell in enumerate(code)
              for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    assert not errors, f"{assignment}'s reference raised in code cells (index, error, message): {errors}"
    answers = [cell for cell in code if cell.source.lstrip().startswith("%%worked_answer")]
    unprinted = [cell.source[:80] for cell in answers
                 if not any(output.get("output_type") == "stream" for output in cell.get("outputs", []))]
    assert not unprinted, f"worked answers that printed nothing: {unprinted}"
    left = "".join(output.get("text", "") for output in code[-1].get("outputs", [])
                   if output.get("name") == "stdout")
    assert left.strip() == f"{LEFT_IN_TMP} []", \
        f"{assignment}: {left.strip()}: a student runs a chapter many times: write under a TemporaryDirectory"
    print(f"{assignment}: {len(code)} code cells, {len(answers)} worked answers, "
          f"{_executed_seconds(code):.0f} s of cells in the grading run")


def _executed_seconds(cells) -> float:
    """The seconds the cells ran, from the timestamps nbclient records in each cell's metadata."""
    seconds = 0.0
    for cell in cells:
        times = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            begun, ended = (datetime.fromisoformat(times[key].replace("Z", "+00:00"))
                            for key in ("iopub.execute_input", "shell.execute_reply"))
            seconds += (ended - begun).total_seconds()
    return seconds


def _test_cells(notebook: dict) -> dict[str, dict]:
    return {cell["metadata"]["nbgrader"]["grade_id"]: cell for cell in notebook["cells"]
            if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade")
            and not cell["metadata"]["nbgrader"].get("solution")}


@pytest.mark.parametrize("chapter, suffix", CASES)
def test_no_point_is_lost_without_its_reason(request, chapter: Chapter, suffix: str):
    """Every cell below full marks has its reason beside it in the feedback, and in the instructor's notes
    (review_notes.json, grades.csv); a full-marks cell whose stderr held warnings says they cost nothing."""
    graded = request.getfixturevalue(chapter.run)
    student = f"{chapter.prefix}_{suffix}"
    result = graded.results[(chapter.assignment, student)]
    maximum = max_points(chapter.assignment)
    below = {cell for cell, points in result.cells.items() if points < maximum.get(cell, points)}
    assert set(result.lost) == below, result.lost
    folder = graded.root / "grading"
    notebook = nbformat.read(folder / "autograded" / student / chapter.assignment
                             / f"{chapter.assignment}.ipynb", as_version=4)
    feedback = (folder / "feedback" / student / chapter.assignment / f"{chapter.assignment}.html").read_text()
    for grade_id, cell in _test_cells(notebook).items():
        said = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
        if grade_id in below:
            points = result.lost[grade_id].split(":")[0]
            assert f"[{cell_verdicts.SCORE_NOTE}] This test cell scores {points}" in said, (grade_id, said)
        elif cell_verdicts.warnings_text(cell):
            assert "are warnings" in said, grade_id
    assert feedback.count(f"[{cell_verdicts.SCORE_NOTE}]") == len(below)
    notes = json.loads((folder / "review_notes.json").read_text())[f"{chapter.assignment}/{student}"]
    assert notes["lost_points"] == result.lost
    with (folder / "grades.csv").open() as handle:
        row = next(r for r in csv.DictReader(handle)
                   if (r["assignment"], r["student_id"]) == (chapter.assignment, student))
    assert all(f"{cell} {result.lost[cell]}" in row["lost_points"] for cell in below)
    if suffix.removeprefix(chapter.student_prefix) in chapter.table().get("warns", ()):
        # a right answer that makes torch or Python warn: full marks, the warnings shown, nothing to review
        assert result.score == result.max_score and not result.needs_review, (result.lost, result.notes)
        assert "deprecated" in feedback or "Full backward hook" in feedback
