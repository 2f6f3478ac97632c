"""One student's outcome scored: per test cell the lower of the notebook's and the isolated judge's score,
merged into the class gradebook, and the autograded notebooks kept with what the instructor must review.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_lib.grading.autograder import (
    cell_verdicts,
    class_files,
    course_paths,
    gradebook_merge,
    report,
    review,
    submissions,
)
from course_lib.grading.sandbox.failures import nbgrader_error
from course_lib.grading.settings import CODE_ROOT
from course_lib.grading.student_text import readable


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


def max_points(shape: submissions.AssignmentShape) -> float:
    """The assignment's points, from its release notebooks' graded cells."""
    return sum(float((cell.get("metadata", {}).get("nbgrader") or {}).get("points", 0) or 0)
               for notebook in shape.release_notebooks.values() for cell in notebook.get("cells", [])
               if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade"))


def refused_result(shape: submissions.AssignmentShape,
                   submission: submissions.Submission) -> report.StudentResult:
    """A submission the grader did not take (its id, a broken or oversized zip): 0, with the reason."""
    notes = list(dict.fromkeys([*submission.notes, submission.refused]))
    return report.StudentResult(submission.student, shape.name, 0.0, max_points(shape), notes, refused=True)


def failed_result(run, assignment: str, shape, submission: submissions.Submission,
                  error: BaseException) -> report.StudentResult:
    """The grader itself failed on this submission: it scores 0 and is flagged with the error, in the
    gradebook too where it can be written, so that the class goes on."""
    reason = (f"the grader failed on this submission ({type(error).__name__}: {readable(error, 300)}): it "
              "scores 0; grade it again or by hand")
    score, maximum = 0.0, max_points(shape)
    try:
        merged = gradebook_merge.merge_student(run.db_url, assignment, submission.student, {}, set(),
                                               review_all=True)
        score, maximum = merged.score, merged.max_score or maximum
    except Exception as merge_error:  # noqa: BLE001 - the failure is reported either way
        reason += f"; its zeros could not be written to the gradebook either ({type(merge_error).__name__})"
    return report.StudentResult(submission.student, assignment, score, maximum, [*submission.notes, reason],
                                grader_failed=True)


def finish_or_fail(run, setup, shape, submission: submissions.Submission, future) -> report.StudentResult:
    """One student's graded outcome (``future``'s) finished; an error of the grader on this submission (its
    autograde, its judge, its merge) is this student's alone: scored 0, flagged with the error, the student
    named in the run's output, and the class goes on."""
    outcome = None
    try:
        outcome = future.result()
        return finish(run, setup, outcome)
    except Exception as error:  # noqa: BLE001 - Ctrl-C (BaseException) still stops the run
        run.say(f"{setup.assignment}/{submission.student}: the grader failed on this submission: "
                f"{type(error).__name__}: {readable(error, 300)}")
        return failed_result(run, setup.assignment, shape, submission, error)
    finally:
        if outcome is not None:
            shutil.rmtree(outcome.run_dir, ignore_errors=True)


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
        # A kernel whose hidden checks were judged apart (sandbox/kernel.py) ran no hidden check: its pass
        # is no verdict to dispute, and the judge's failure is the cell's reason (shown below), not a flag.
        judged_apart = getattr(getattr(setup, "policy", None), "judged_apart", False)
        for grade_id in () if judged_apart else disputed:
            review_cells.add((name, grade_id))
            notes.append(f"{grade_id} passed in the notebook but failed the isolated re-check: scored 0")
        if judged_apart:
            cell_verdicts.show_judge_stderr(notebook, verdicts)
        notes += review.hang_notes(verdicts)
        review.shorten_deadlocks(notebook, {gid for gid, verdict in verdicts.items() if verdict.hung})
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
        pairs = course_paths.replacements(getattr(setup, "code_root", None) or CODE_ROOT, outcome.run_dir,
                                          outcome.submission.student, setup.assignment)
        for name, notebook in outcome.notebooks.items():
            course_paths.make_relative(notebook, pairs)   # the feedback names no folder of the grader's
            nbformat.write(notebook, fresh / f"{name}.ipynb")
    class_files.replace_tree(fresh, run.grading_dir / "autograded" / outcome.submission.student
                             / setup.assignment)
