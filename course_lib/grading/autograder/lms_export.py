"""The class's grades in the import formats of Canvas and Moodle: one row per student of the class
gradebook (the roster's and everyone graded), one column per assignment, the score after the late penalty
(grades.csv's `score`).

Canvas, Grades > Import (Instructure's Canvas Instructor Guide, "How do I import grades in the Gradebook?";
the columns as https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/
import-csv-file-carmen-grades lists them): `Student` ("Last, First"), `ID` (Canvas's own user id: the
roster's `lms_user_id`), `SIS User ID`, `SIS Login ID` (the course's student id), `Section`, then one column
per assignment, named as in Canvas (a name Canvas does not know makes a new assignment); Canvas's own export
puts a "Points Possible" row second, which its import reads back.

Moodle, Grades > Import > CSV file (grade/import/csv in https://github.com/moodle/moodle): any columns; the
teacher maps one to the user ("ID number" to the user's idnumber, or "Email address" to the email) and each
grade column to a grade item.

A student with no submission of an assignment gets an empty cell, not 0: whether a missing submission
scores 0 is the instructor's call, made in the LMS. The files go to grading/exports/ (grading/ is mode
0700, ignored by git, and hidden from every sandbox), never to the top of the checkout.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

from course_lib.grading.autograder.gradebook_merge import export_rows

CANVAS_FIRST = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
MOODLE_FIRST = ("ID number", "Email address", "First name", "Last name")
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection"): a name
# from the roster is written with a leading apostrophe instead. Student ids cannot start so
# (submissions.STUDENT_ID).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Student:
    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""


@dataclass(frozen=True)
class ClassGrades:
    """What the exports hold: the students, the assignments with their points, and each score."""

    students: list[Student]
    points: dict[str, float]                    # assignment -> points possible
    scores: dict[tuple[str, str], float]        # (student id, assignment) -> score after the penalty


def read_class(db_url: str) -> ClassGrades:
    """The class gradebook's students, assignments and final scores."""
    with Gradebook(db_url) as gb:
        students = [Student(s.id, s.first_name or "", s.last_name or "", s.email or "", s.lms_user_id or "")
                    for s in gb.students]
        points = {a.name: float(a.max_score) for a in sorted(gb.assignments, key=lambda a: a.name)}
    scores = {(row["student_id"], row["assignment"]): float(row["score"])
              for row in export_rows(db_url, list(points))}
    return ClassGrades(sorted(students, key=lambda s: (s.last_name, s.first_name, s.id)), points, scores)


def _text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _score(grades: ClassGrades, student: Student, assignment: str) -> str:
    score = grades.scores.get((student.id, assignment))
    return "" if score is None else f"{score:g}"


def canvas_rows(grades: ClassGrades) -> list[list[str]]:
    """Canvas's Gradebook import: header, Points Possible, then a student a row."""
    assignments = list(grades.points)
    rows = [[*CANVAS_FIRST, *assignments],
            ["    Points Possible", "", "", "", "", *(f"{grades.points[a]:g}" for a in assignments)]]
    for student in grades.students:
        name = ", ".join(part for part in (student.last_name, student.first_name) if part) or student.id
        rows.append([_text(name), student.lms_user_id, "", student.id, "",
                     *(_score(grades, student, a) for a in assignments)])
    return rows


def moodle_rows(grades: ClassGrades) -> list[list[str]]:
    """Moodle's CSV grade import: header, then a student a row."""
    assignments = list(grades.points)
    rows = [[*MOODLE_FIRST, *assignments]]
    for student in grades.students:
        rows.append([student.id, _text(student.email), _text(student.first_name), _text(student.last_name),
                     *(_score(grades, student, a) for a in assignments)])
    return rows


def write_exports(grading_dir: Path) -> dict[str, Path]:
    """grading/exports/canvas.csv and moodle.csv from grading/gradebook.db; {format: path}."""
    database = grading_dir / "gradebook.db"
    if not database.exists():
        raise FileNotFoundError(f"no class gradebook at {database}: run `make grade` first")
    grades = read_class(f"sqlite:///{database}")
    folder = grading_dir / "exports"
    folder.mkdir(mode=0o700, exist_ok=True)
    written = {}
    for name, rows in (("canvas", canvas_rows(grades)), ("moodle", moodle_rows(grades))):
        path = folder / f"{name}.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
        written[name] = path
    return written
