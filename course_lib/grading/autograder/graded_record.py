"""Which submissions are graded already, so that `make grade` grades only the new and the changed ones.

A class of 150 took 12 minutes (chapter 01) to 30 (chapter 02) to grade on a 2-core machine, every run,
even when one student had resubmitted. grading/graded.json keeps, per "<assignment>/<student>", the
fingerprint of what was graded: the submission's files (names and bytes, timestamp.txt included, so a
resubmission through the exchange or a new zip always differs) and the grading key (the assignment's
source with its hidden tests, the course's hidden checks and their registry, the cell limit), so that an
instructor's fix to a test grades the class again. A submission is kept as graded when its fingerprint is
unchanged and its grades are still in the gradebook with its autograded notebooks; `make grade
REGRADE=1` (``--regrade``) grades everyone again. A fingerprint is recorded only once its grades are
merged, so a run stopped half-way goes on where it stopped.

Kept submissions are not graded, but their late penalties are assigned again (a due date or an
extension given since counts at the next run), and grades.csv lists them as before.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from course_lib.grading.autograder import extensions, json_files, submission_spool
from course_lib.grading.autograder.late_penalties import assign_late_penalties
from course_lib.grading.settings import CourseSettings

RECORD = "graded.json"


def _hash_tree(digest, folder: Path) -> None:
    """Every regular file under folder, by its path relative to it and its bytes, in a stable order."""
    if folder.is_file():
        digest.update(folder.read_bytes())
        return
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and ".ipynb_checkpoints" not in p.parts):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")


def grading_key(source_dir: Path, course: CourseSettings, assignment: str) -> str:
    """What grading one submission of ``assignment`` depends on besides the submission itself."""
    digest = hashlib.sha256()
    for folder in (source_dir, *course.hidden_checks, *([course.registry] if course.registry else [])):
        digest.update(str(folder).encode() + b"\0")
        if folder.exists():
            _hash_tree(digest, folder)
    digest.update(f"cell timeout {course.cell_timeout_for(assignment)}".encode())
    return digest.hexdigest()


def fingerprint(folder: Path, key: str) -> str:
    """The submission folder's top-level files (as the grader reads them) under the grading key; "" for a
    folder over the grader's limits or unreadable (refused, cheaply, every run: never kept)."""
    if submission_spool.too_big(folder):
        return ""
    digest = hashlib.sha256(key.encode())
    try:
        with os.scandir(folder) as entries:
            files = [e for e in entries if not e.name.startswith(".") and e.is_file(follow_symlinks=False)]
            for entry in sorted(files, key=lambda e: e.name):
                digest.update(os.fsencode(entry.name) + b"\0")
                digest.update(Path(entry.path).read_bytes() + b"\0")
    except OSError:
        return ""
    return digest.hexdigest()


def _read(grading_dir: Path) -> dict[str, str]:
    """The record ({} when there is none yet, or it is damaged: everyone is graded again)."""
    return {k: v for k, v in json_files.read_object(grading_dir / RECORD).items() if isinstance(v, str)}


def mark_graded(grading_dir: Path, assignment: str, student: str, print_: str) -> None:
    """Record that this submission's grades are merged (atomically: a stopped run loses nothing)."""
    if not print_:
        return
    known = _read(grading_dir)
    known[f"{assignment}/{student}"] = print_
    json_files.write_atomically(grading_dir / RECORD, known)


def _still_graded(grading_dir: Path, db_url: str, assignment: str) -> set[str]:
    """The students whose submission of ``assignment`` is in the gradebook with its autograded notebooks."""
    try:
        with Gradebook(db_url) as gb:
            in_gradebook = {s.student.id for s in gb.assignment_submissions(assignment)}
    except MissingEntry:
        return set()
    return {s for s in in_gradebook if (grading_dir / "autograded" / s / assignment).is_dir()}


def unchanged(grading_dir: Path, db_url: str, assignment: str, prints: dict[str, str]) -> list[str]:
    """The students (of ``prints``: student -> this run's fingerprint) whose submission was graded as it
    is now, with its grades still there."""
    known = _read(grading_dir)
    same = [s for s, p in prints.items() if p and known.get(f"{assignment}/{s}") == p]
    if not same or not (grading_dir / "gradebook.db").exists():
        return []
    kept = _still_graded(grading_dir, db_url, assignment)
    return [s for s in same if s in kept]


def refresh_penalties(db_url: str, assignment: str, students: list[str]) -> list[str]:
    """Assign the kept submissions' extensions (make extend) and late penalties again; the students whose
    penalty changed."""
    changed = []
    for student in students:
        with Gradebook(db_url) as gb:
            submission = gb.find_submission(assignment, student)
            before = submission.late_submission_penalty or 0.0
            extensions.apply(submission, db_url)
            gb.db.commit()
        if assign_late_penalties(db_url, assignment, student) != before:
            changed.append(student)
    return changed
