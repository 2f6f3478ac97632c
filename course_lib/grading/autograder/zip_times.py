"""When a zip submission was received, as the course trusts it.

By default the zip file's own time, where `make grade` unpacks it (an LMS's download keeps each file's
submission time). An LMS that marks late files in their names (Canvas: ``_LATE`` after the student's
name) can be trusted instead, with ``c.CourseGrading.lms_late_tag = "_LATE"`` in nbgrader_config.py: its
verdict wins where the file's time disagrees with the course's due date (the student's extension
included): a tagged zip is late (at least a second after the due date), an untagged one on time (at the
due date at the latest). Where the file's time agrees, it stands, so a penalty per day late still counts
the days.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.grading.autograder import extensions


def due_date(grading_dir: Path, assignment: str, student: str) -> datetime | None:
    """The student's due date (UTC), their extension included; None where the assignment has none."""
    database = grading_dir / "gradebook.db"
    if not database.exists():
        return None
    try:
        with Gradebook(f"sqlite:///{database}") as gb:
            due = gb.find_assignment(assignment).duedate
    except MissingEntry:
        return None
    if due is None:
        return None
    minutes = extensions.granted(grading_dir).get(f"{assignment}/{student}", 0)
    return due.replace(tzinfo=UTC) + timedelta(minutes=minutes)


def received(archive: Path, grading_dir: Path, assignment: str, student: str,
             late_tag: str | None = None) -> datetime:
    """The submission's time: the zip file's, or as the LMS's late tag has it (module docstring)."""
    file_time = datetime.fromtimestamp(archive.stat().st_mtime, UTC)
    due = due_date(grading_dir, assignment, student) if late_tag else None
    if due is None:
        return file_time
    if late_tag in archive.name:
        return max(file_time, due + timedelta(seconds=1))
    return min(file_time, due)
