"""Copying one student's autograde result from its private gradebook into the course's gradebook.

Only the grading parent writes the real gradebook, one student at a time, and the scores of a student
in one transaction. An interrupted run leaves every student either merged or, for the one being merged
(nbgrader commits a new student or submission row itself), present with no scores yet; a re-run merges
again from scratch and converges to the same grades. A score an instructor gave by hand (formgrader)
is kept while the cell's automatic score stays the same, so re-running ``make grade`` never undoes a
review; when the automatic score changes (a new submission), the hand score is dropped and the cell is
flagged for review again.

Lateness: the submission's time (``timestamp.txt``, which the grader itself wrote: the exchange's
``TrustedCollect`` or the zip's arrival) reaches the private gradebook through ``nbgrader autograde``
and is carried into the class gradebook's submission row here. The late penalty is then applied there,
after the final scores are known, by nbgrader's own ``AssignLatePenalties`` configured by the course's
nbgrader_config.py (``late_penalties.py``), so ``nbgrader export``, grades.csv and the feedback show both.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime

from nbgrader.api import Gradebook, MissingEntry

from . import extensions
from .late_penalties import assign_late_penalties


@dataclass
class CellScore:
    notebook: str
    cell: str
    points: float
    max_points: float
    needs_review: bool = False


@dataclass
class MergedScores:
    cells: list[CellScore] = field(default_factory=list)
    late_penalty: float = 0.0   # what the course's LateSubmissionPlugin took off (nbgrader's rule)

    @property
    def raw_score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def score(self) -> float:
        """The points the student gets: the cells' less the late penalty, never below 0 (as nbgrader's
        export and feedback count them)."""
        return max(0.0, self.raw_score - self.late_penalty)

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.cells)


class AutogradedScores(dict):
    """(notebook, grade cell) -> (auto_score or None, needs_manual_grade), and ``timestamp``: when the
    submission was received (naive UTC, as nbgrader keeps it), None when it came with no time."""

    timestamp: datetime | None = None


def read_autograded_scores(db_url: str, assignment: str, student: str) -> AutogradedScores:
    """A private gradebook's scores of one submission, with the time nbgrader recorded for it."""
    scores = AutogradedScores()
    try:
        with Gradebook(db_url) as gb:
            submission = gb.find_submission(assignment, student)
            scores.timestamp = submission.timestamp
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    key = (notebook.name, grade.cell.name)
                    scores[key] = (grade.auto_score, bool(grade.needs_manual_grade))
    except MissingEntry:
        pass
    return scores


def merge_student(db_url: str, assignment: str, student: str, scores: dict[tuple[str, str], tuple],
                  review_cells: set[tuple[str, str]], review_all: bool,
                  timestamp: datetime | None = None) -> MergedScores:
    """Write the final scores (a cell nbgrader did not score gets 0), the review flags, the submission's
    time (``timestamp``, else the one ``read_autograded_scores`` found) and the late penalty."""
    merged = MergedScores()
    received = timestamp or getattr(scores, "timestamp", None)
    if received is not None and received.tzinfo is not None:   # the gradebook keeps naive UTC times
        received = received.astimezone(UTC).replace(tzinfo=None)
    with Gradebook(db_url) as gb:
        gb.update_or_create_student(student)
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            with warnings.catch_warnings():  # nbgrader's own autoflush warning, harmless here
                warnings.simplefilter("ignore")
                submission = gb.add_submission(assignment, student)
        submission.timestamp = received   # the graded files' time; none when they came without one
        extensions.apply(submission, db_url)   # granted with make extend, before or after this submission
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                key = (notebook.name, grade.cell.name)
                auto_score, manual = scores.get(key, (0.0, False))
                review = review_all or key in review_cells
                new_auto = None if auto_score is None else min(float(auto_score), grade.max_score)
                hand_score = grade.manual_score
                reviewed = hand_score is not None and grade.auto_score == new_auto
                grade.auto_score = new_auto
                if not reviewed:
                    grade.manual_score = None
                grade.needs_manual_grade = not reviewed and (manual or review or hand_score is not None)
                points = hand_score if reviewed else new_auto
                merged.cells.append(CellScore(notebook.name, grade.cell.name, float(points or 0),
                                              float(grade.max_score), grade.needs_manual_grade))
        gb.db.commit()
    merged.late_penalty = assign_late_penalties(db_url, assignment, student)
    return merged


def export_rows(db_url: str, assignments: list[str]) -> list[dict]:
    """One row per (student, assignment) with nbgrader's export columns, for grades.csv: the due date
    (an extension included), the submission's time, the raw score, the late penalty and the score."""
    rows = []
    with Gradebook(db_url) as gb:
        for assignment in assignments:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                continue
            for student in gb.students:
                try:
                    submission = gb.find_submission(assignment, student.id)
                except MissingEntry:
                    continue
                penalty = submission.late_submission_penalty or 0.0
                rows.append({"assignment": assignment, "student_id": student.id,
                             "duedate": submission.duedate or "", "timestamp": submission.timestamp or "",
                             "raw_score": submission.score, "late_submission_penalty": penalty,
                             "score": max(0.0, submission.score - penalty),
                             "max_score": submission.max_score,
                             "needs_manual_grade": submission.needs_manual_grade})
    return rows
