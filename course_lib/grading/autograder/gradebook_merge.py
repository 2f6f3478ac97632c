"""Copying one student's autograde result from its private gradebook into the course's gradebook.

Only the grading parent writes the real gradebook, one student at a time, and the scores of a student
in one transaction. An interrupted run leaves every student either merged or, for the one being merged
(nbgrader commits a new student or submission row itself), present with no scores yet; a re-run merges
again from scratch and converges to the same grades. A score an instructor gave by hand (formgrader)
is kept while the cell's automatic score stays the same, so re-running ``make grade`` never undoes a
review; when the automatic score changes (a new submission), the hand score is dropped and the cell is
flagged for review again.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from nbgrader.api import Gradebook, MissingEntry


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

    @property
    def score(self) -> float:
        return sum(c.points for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.max_points for c in self.cells)


def read_autograded_scores(db_url: str, assignment: str, student: str) -> dict[tuple[str, str], tuple]:
    """(notebook, grade cell) -> (auto_score or None, needs_manual_grade) from a private gradebook."""
    scores: dict[tuple[str, str], tuple] = {}
    try:
        with Gradebook(db_url) as gb:
            submission = gb.find_submission(assignment, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    key = (notebook.name, grade.cell.name)
                    scores[key] = (grade.auto_score, bool(grade.needs_manual_grade))
    except MissingEntry:
        pass
    return scores


def merge_student(db_url: str, assignment: str, student: str, scores: dict[tuple[str, str], tuple],
                  review_cells: set[tuple[str, str]], review_all: bool) -> MergedScores:
    """Write the final scores (a cell nbgrader did not score gets 0) and the review flags."""
    merged = MergedScores()
    with Gradebook(db_url) as gb:
        gb.update_or_create_student(student)
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            with warnings.catch_warnings():  # nbgrader's own autoflush warning, harmless here
                warnings.simplefilter("ignore")
                submission = gb.add_submission(assignment, student)
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
    return merged


def export_rows(db_url: str, assignments: list[str]) -> list[dict]:
    """One row per (student, assignment) with nbgrader's export columns, for grades.csv."""
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
                rows.append({"assignment": assignment, "student_id": student.id,
                             "timestamp": submission.timestamp or "",
                             "raw_score": submission.score, "score": submission.score,
                             "max_score": submission.max_score,
                             "needs_manual_grade": submission.needs_manual_grade})
    return rows
