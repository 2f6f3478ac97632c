"""One student's outcome scored: per test cell the lower of the notebook's and the isolated judge's score,
merged into the class gradebook, and the autograded notebooks kept with what the instructor must review.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_lib.grading.autograder import (
    cell_verdicts,
    class_files,
    gradebook_merge,
    report,
    review,
    submissions,
)
from course_lib.grading.sandbox.failures import nbgrader_error


@dataclass
class Outcome:
    """What grading one submission gave: the autograded notebooks and the judge's verdicts."""

    submission: submissions.Submission
    run_dir: Path
    ok: bool
    log: str
    seconds: float
    notebooks: dict[str, nbformat.NotebookNode]
    verdicts: dict[str, dict]   # notebook -> {grade_id: Verdict}
    regraded: str = ""          # why a first attempt was set aside and the submission graded again


NO_VERDICT = "no isolated re-check: nbgrader left no autograded notebook for the judge"


def unjudged(release, assignment: str, registry: dict) -> dict:
    """The verdicts of a notebook nbgrader left no autograded copy of: each registered cell fails."""
    from course_lib.grading.autograder.judge import Verdict
    from course_lib.notebook_cells import marks

    ids = [marks(cell).get("grade_id") for cell in release.cells]
    return {grade_id: Verdict(False, NO_VERDICT) for grade_id in ids if (assignment, grade_id) in registry}


def attempt_notes(outcome: Outcome) -> list[str]:
    """What the instructor must know about how the submission was graded: a first attempt set aside
    (and why), and nbgrader's own error when it could not grade the submission at all."""
    notes = []
    if outcome.regraded:
        notes.append(f"graded twice: the first attempt failed for a reason outside the student's code "
                     f"({outcome.regraded}); this is the second attempt's grade")
    if not outcome.ok and not outcome.notebooks:
        notes.append(f"nbgrader could not grade this submission: {nbgrader_error(outcome.log)}")
    return notes


def _merged_note(outcome: Outcome, merged) -> list[str]:
    """Where no autograded notebook came back: what was merged all the same (the cells the judge does
    not re-check keep nbgrader's own score), so the note never says 0 while the gradebook says more."""
    missing = sorted(set(outcome.verdicts) - set(outcome.notebooks))
    if not missing:
        return []
    kept = [f"{c.cell} {c.points:g}/{c.max_points:g}" for c in merged.cells
            if c.notebook in missing and c.points]
    return [f"no autograded {', '.join(missing)}: its registered cells score 0 (no isolated re-check); "
            f"{'kept from nbgrader: ' + ', '.join(kept) if kept else 'nothing of it scores'}; "
            f"merged {merged.score:g}/{merged.max_score:g}"]


def finish(run, setup, outcome: Outcome) -> report.StudentResult:
    """In the parent: combine scores, merge into the gradebook, keep the autograded notebooks."""
    student, assignment = outcome.submission.student, setup.assignment
    notes = list(outcome.submission.notes) + attempt_notes(outcome)
    scores = gradebook_merge.read_autograded_scores(f"sqlite:///{outcome.run_dir / 'db' / 'gradebook.db'}",
                                                    assignment, student)
    review_cells = set()
    missing = set(outcome.verdicts) - set(outcome.notebooks)   # no notebook came back: no verdict, 0
    for name in missing:
        for grade_id in outcome.verdicts[name]:
            scores[(name, grade_id)] = (0.0, (scores.get((name, grade_id)) or (0, False))[1])
    for name, notebook in outcome.notebooks.items():
        notes += review.execution_notes(notebook)
        # the check's verdict, not nbgrader's stderr rule, scores a test cell (a warning costs nothing)
        cell_verdicts.rescore(notebook, name, scores)
        verdicts = outcome.verdicts.get(name, {})
        in_notebook = {gid: (s or (0,))[0] or 0.0 for (nb, gid), s in scores.items() if nb == name}
        for grade_id, note in cell_verdicts.disagreements(notebook, name, in_notebook, verdicts).items():
            review_cells.add((name, grade_id))
            notes.append(note)
        failed = {gid: v.message for gid, v in outcome.verdicts.get(name, {}).items() if not v.passed}
        disputed = {gid: msg for gid, msg in failed.items() if (scores.get((name, gid)) or (0,))[0]}
        for grade_id in failed:
            scores[(name, grade_id)] = (0.0, (scores.get((name, grade_id)) or (0, False))[1])
        for grade_id in disputed:
            review_cells.add((name, grade_id))
            notes.append(f"{grade_id} passed in the notebook but failed the isolated re-check: scored 0")
        review.shorten_deadlocks(notebook)
        review.add_isolated_verdicts(notebook, disputed)
    merged = gradebook_merge.merge_student(run.db_url, assignment, student, scores, review_cells,
                                           review_all=bool(notes or missing))
    notes += _merged_note(outcome, merged)
    lost = lost_points(outcome, merged)
    keep_autograded(run, setup, outcome)
    return report.StudentResult(student, assignment, merged.score, merged.max_score, notes, outcome.seconds,
                                {c.cell: c.points for c in merged.cells}, lost)


def lost_points(outcome: Outcome, merged: gradebook_merge.MergedScores) -> dict[str, str]:
    """grade_id -> why each cell scored below full ("0/3: <reason>"), written beside the cell too; a test cell
    whose stderr lines did not cost it is told they are warnings."""
    lost = {}
    for name, notebook in outcome.notebooks.items():
        points = {c.cell: c.points for c in merged.cells if c.notebook == name}
        found = cell_verdicts.reasons(notebook, name, points, outcome.verdicts.get(name, {}))
        warned = {cell_verdicts.marks(cell).get("grade_id") for cell in notebook.cells
                  if cell_verdicts.is_test_cell(cell) and cell_verdicts.warnings_text(cell)}
        cell_verdicts.annotate(notebook, found, warned - set(found))
        lost.update(found)
    for cell in merged.cells:
        if cell.points < cell.max_points and cell.cell not in lost:
            graded = cell.notebook in outcome.notebooks
            why = "no automatic score for it" if graded else "its notebook was not graded"
            why += " (see the review notes)"
            lost[cell.cell] = f"{cell.points:g}/{cell.max_points:g}: {why}"
    return lost


def keep_autograded(run, setup, outcome: Outcome) -> None:
    """Replace grading/autograded/<student>/<assignment>/ in one rename."""
    fresh = outcome.run_dir / "autograded" / outcome.submission.student / setup.assignment
    if fresh.is_dir():
        for name, notebook in outcome.notebooks.items():
            nbformat.write(notebook, fresh / f"{name}.ipynb")
    class_files.replace_tree(fresh, run.grading_dir / "autograded" / outcome.submission.student
                             / setup.assignment)
