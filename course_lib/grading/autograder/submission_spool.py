"""A submission read once, within a stated size, and kept on disk until its student's turn (issue 53).

The grading parent read every submitted file into memory when the run started and held all of them until
the run ended (a 45 MB cell: the parent at 829 MB). Now a submission over MAX_SUBMISSION_BYTES (or of
more than MAX_SUBMISSION_FILES files) is refused before a byte of it is read, with its reason (that
student scores 0; the class goes on), and the vetted files of the others are written to the run's spool
folder (the grader's alone), from which the worker copies them into the student's private course: the
parent holds one submission at a time, while vetting it.
"""

from __future__ import annotations

import os
from pathlib import Path

from course_lib.grading.autograder import submissions

MAX_SUBMISSION_BYTES = 20 * 1024**2   # docs/grading.md states it; the course's notebooks are under 0.2 MB
MAX_SUBMISSION_FILES = 1000           # as many as `nbgrader collect` copies (exchange_copy)
TOO_BIG = ("this submission's files come to {size}, over the grader's limit of {limit}: it was not graded "
           "and scores 0 (submit the notebook with its outputs cleared and without data files)")


def submission_size(folder: Path) -> tuple[int, int]:
    """(files, bytes) reading this folder would take (its top-level files, hidden files and links left
    out, as submissions.read_folder takes them), from their sizes alone; the count stops past the limit."""
    files = total = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
                files, total = files + 1, total + entry.stat(follow_symlinks=False).st_size
                if files > MAX_SUBMISSION_FILES:
                    break
    return files, total


def too_big(folder: Path) -> str:
    """Why this submission folder is over the grader's limits ("" when it is not, or cannot be read)."""
    try:
        files, size = submission_size(folder)
    except OSError:
        return ""   # read_and_vet says what it could not read
    if files > MAX_SUBMISSION_FILES:
        return TOO_BIG.format(size=f"more than {MAX_SUBMISSION_FILES} files", limit=f"{MAX_SUBMISSION_FILES}")
    if size > MAX_SUBMISSION_BYTES:
        return TOO_BIG.format(size=f"{size / 2**20:.1f} MiB", limit=f"{MAX_SUBMISSION_BYTES >> 20} MiB")
    return ""


def read_submission(submitted: Path, student: str, shape: submissions.AssignmentShape,
                    others: dict[str, submissions.AssignmentShape], spool: Path) -> submissions.Submission:
    """submitted/<student>/<assignment>/ vetted (submissions.read_and_vet), refused unread when over
    MAX_SUBMISSION_BYTES or MAX_SUBMISSION_FILES, its files then kept under ``spool``, not in memory."""
    if submissions.STUDENT_ID.match(student):   # any other name is refused by read_and_vet, with why
        why = too_big(submitted / student / shape.name)
        if why:
            return submissions.Submission(student, shape.name, notes=[why], refused=why)
    submission = submissions.read_and_vet(submitted, student, shape, others)
    if not submission.refused:
        submission.files = spool_files(submission.files, spool / shape.name / submission.student)
    return submission


def spool_files(files: dict[str, bytes], folder: Path) -> dict[str, Path]:
    """Each file written under folder (made 0700: the grader's alone); name -> its path."""
    for level in (folder.parent.parent, folder.parent):   # spool/<assignment>/<student>: each 0700
        level.mkdir(mode=0o700, exist_ok=True)
    folder.mkdir(mode=0o700)
    kept = {}
    for name, content in files.items():   # vetted names: top-level file names, no separators
        kept[name] = folder / name
        kept[name].write_bytes(content)
    return kept
