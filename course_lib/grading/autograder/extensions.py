"""A student's extension of an assignment's due date: `make extend ASSIGNMENT=a STUDENT=s DAYS=2`.

nbgrader keeps an extension on the student's submission row (``SubmittedAssignment.extension``), which
does not exist before the first submission is graded, and ``make grade`` makes that row afresh for a new
student. So the course keeps the extensions it grants in grading/extensions.json ("<assignment>/<student>"
-> minutes), and `make grade` writes each onto its submission before the late penalty is assigned: the
merge of a graded one (gradebook_merge) and the penalties of the unchanged ones (graded_record), whose
feedback is then written again. So the gradebook is written by grading runs alone.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.grading.autograder import json_files
from course_lib.grading.autograder.late_penalties import course_config_file
from course_lib.grading.autograder.submissions import check_student_id

EXTENSIONS = "extensions.json"


def granted(grading_dir: Path) -> dict[str, int]:
    """"<assignment>/<student>" -> minutes, as granted so far (none when the file is missing)."""
    try:
        known = json.loads((grading_dir / EXTENSIONS).read_text())
    except FileNotFoundError:
        return {}
    except ValueError as error:
        raise ValueError(f"{grading_dir / EXTENSIONS} is not valid JSON ({error}): fix it by hand, or delete "
                         "it and grant the extensions again with make extend") from error
    return {key: int(minutes) for key, minutes in known.items()}


def apply(submission, db_url: str) -> None:
    """Write the course's extension onto a gradebook submission row (uncommitted). Once the course has
    granted any, its file rules (an extension taken back is removed from the row too); a gradebook
    without the file keeps its rows' own."""
    config = course_config_file(db_url)   # <course>/nbgrader_config.py for <course>/grading/gradebook.db
    folder = config.parent / "grading" if config is not None else None
    if folder is None or not (folder / EXTENSIONS).exists():
        return
    minutes = granted(folder).get(f"{submission.assignment.name}/{submission.student.id}")
    submission.extension = timedelta(minutes=minutes) if minutes else None


def grant(grading_dir: Path, assignment: str, student: str, days: float = 0, hours: float = 0) -> str:
    """Give ``student`` ``days`` and ``hours`` more on ``assignment`` (0 and 0: take the extension back;
    a new grant replaces the old one, as in nbgrader). Returns what was done, for the instructor."""
    check_student_id(student)
    if days < 0 or hours < 0:
        raise ValueError(f"an extension is a length of time, not {days} days and {hours} hours: give "
                         "DAYS and HOURS of 0 or more (both 0 takes the extension back)")
    duedate = _due_date(grading_dir, assignment)
    minutes = round(days * 24 * 60 + hours * 60)
    known = granted(grading_dir)
    if minutes:
        known[f"{assignment}/{student}"] = minutes
    else:
        known.pop(f"{assignment}/{student}", None)
    json_files.write_atomically(grading_dir / EXTENSIONS, known)
    new_due = duedate + timedelta(minutes=minutes)
    said = (f"{student} has {_length(minutes)} more on {assignment}: due {new_due} UTC"
            if minutes else f"{student}'s extension on {assignment} is taken back: due {duedate} UTC")
    return said + " (from the next make grade on: its grades, feedback and grades.csv)"


def _length(minutes: int) -> str:
    """2 days, 1 day 6 hours, 90 minutes: as an instructor would say it."""
    days, rest = divmod(minutes, 24 * 60)
    hours, rest = divmod(rest, 60)
    return " ".join(f"{n} {unit}{'s' if n != 1 else ''}"
                    for n, unit in ((days, "day"), (hours, "hour"), (rest, "minute")) if n)


def _due_date(grading_dir: Path, assignment: str):
    """The assignment's due date (naive UTC, as the gradebook keeps it); an error saying how to set one."""
    how = (f"give it one first: nbgrader db assignment add {assignment} --duedate='2026-03-01 17:00:00 "
           "Europe/Berlin' (docs/instructors.md, 'Due dates and late submissions')")
    if not (grading_dir / "gradebook.db").exists():
        raise ValueError(f"there is no class gradebook yet ({grading_dir / 'gradebook.db'}), so {assignment} "
                         f"has no due date to extend: {how}")
    try:
        with Gradebook(f"sqlite:///{grading_dir / 'gradebook.db'}") as gb:
            duedate = gb.find_assignment(assignment).duedate
    except MissingEntry:
        duedate = None
    if duedate is None:
        raise ValueError(f"{assignment} has no due date in the class gradebook, so there is nothing to "
                         f"extend: {how}")
    return duedate
