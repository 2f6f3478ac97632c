"""Feedback back through the LMS the class handed in on: per assignment and LMS, one zip of the feedback
of every student whose submission came as that LMS's download, each file named as the LMS's bulk upload
expects. `make export` writes them to grading/exports/feedback/ beside the grades.

A student's file name keeps the front of the name their zip had in the download (class_files.ZIP_NAMES),
which is what each LMS matches a file to its student by:

- Canvas, Submissions > "Upload Submissions" (re-upload the download, feedback attached as a comment):
  the first two numbers between underscores are the student's user id and their submitted file's id
  (canvas-lms, ``Assignment#infer_comment_context_from_filename``); Canvas shows the file under the name
  of the student's upload. ``<name>[_LATE]_<user id>_<file id>_`` is kept.
- Moodle, "Upload multiple feedback files in a zip": ``<full name>_<participant id>_assignsubmission_file_``
  then the file's own name (moodle, mod/assign/feedback/file/importziplib.php, which splits the name at
  its first four underscores).

Students who came through the exchange fetch their feedback there (`nbgrader release_feedback`); a zip
named otherwise (`<student>__<assignment>.zip`) is listed as left out, with the way to hand it back.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from course_lib.grading.autograder import class_files

LMS_PREFIXES = {
    "canvas": re.compile(r"^[^_]+(?:_LATE)?_\d+_\d+_"),
    "moodle": re.compile(r"^[^_]+_\d+_assignsubmission_file_"),
}


def _lms_prefix(zip_name: str) -> tuple[str, str] | None:
    """(lms, the front of the name it matches students by) for a zip from an LMS's download, else None."""
    for lms, pattern in LMS_PREFIXES.items():
        if match := pattern.match(zip_name):
            return lms, match.group(0)
    return None


def write_bundles(grading_dir: Path) -> tuple[dict[str, Path], list[str]]:
    """grading/exports/feedback/<lms>-<assignment>.zip for each LMS and assignment with feedback to give
    back; ({"canvas-02_collectives": path}, what was left out and why)."""
    bundles: dict[str, list[tuple[str, Path]]] = {}
    left_out = []
    for (assignment, student), zip_name in sorted(class_files.zip_names(grading_dir).items()):
        found = _lms_prefix(zip_name)
        pages = sorted((grading_dir / "feedback" / student / assignment).glob("*.html"))
        if found is None:
            left_out.append(f"{assignment}/{student}: {zip_name} is not named as Canvas's or Moodle's "
                            "download names a submission: hand its feedback back from "
                            f"grading/feedback/{student}/{assignment}/")
        elif not pages:
            left_out.append(f"{assignment}/{student}: no feedback yet (make grade writes it)")
        else:
            lms, prefix = found
            bundles.setdefault(f"{lms}-{assignment}", []).extend(
                (f"{prefix}{page.stem}_feedback.html", page) for page in pages)
    folder = grading_dir / "exports" / "feedback"
    written = {}
    for name, pages in sorted(bundles.items()):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = folder / f".{name}.zip.partial"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
            for member, page in pages:
                bundle.write(page, member)
        written[name] = partial.replace(folder / f"{name}.zip")
    return written, left_out
