"""The class's files a grading run writes besides the gradebook: autograded notebooks, unpacked zips,
grades.csv and the review notes kept across runs. Shared by `make grade` and its Slurm array merge.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from course_lib.grading.autograder import gradebook_merge, report, submissions


def replace_tree(fresh: Path, target: Path) -> None:
    """Replace the folder target by a copy of fresh in one rename (nothing when fresh is missing)."""
    if not fresh.is_dir():
        shutil.rmtree(target, ignore_errors=True)
        return
    staging = target.parent / f".{target.name}.incoming"
    shutil.rmtree(staging, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(fresh, staging, symlinks=True)
    old = target.parent / f".{target.name}.old"
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def put_venv_on_path() -> None:
    """nbgrader's Gradebook runs the `alembic` command: it must be found next to this Python."""
    venv_bin = str(Path(sys.executable).parent)
    if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")


def unpack_zips(grading_dir: Path, folder: Path, pattern: str, assignment: str | None) -> None:
    for (student, name), archive in submissions.collect_zips(folder, pattern, assignment).items():
        target = grading_dir / "submitted" / student / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for file_name, content in submissions.extract_zip(archive).items():
            (target / file_name).write_bytes(content)
        # the submission time is when the archive reached the grader (its file's time), never a
        # timestamp.txt the student put in it (extract_zip leaves that out): lateness is not the student's
        received = datetime.fromtimestamp(archive.stat().st_mtime, UTC)
        (target / submissions.TIMESTAMP).write_text(received.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))


def write_outputs(grading_dir: Path, db_url: str, assignments: list[str],
                  results: list[report.StudentResult]) -> None:
    """grades.csv for every graded submission in the gradebook; review notes kept across runs.

    review_notes.json: "<assignment>/<student>" -> {"notes": what to review, "lost_points": {grade_id:
    "0/3: <reason>"} for each cell below full marks} (a plain list, as older runs wrote, is its notes)."""
    notes_file = grading_dir / "review_notes.json"
    known = json.loads(notes_file.read_text()) if notes_file.exists() else {}
    known = {key: value if isinstance(value, dict) else {"notes": value, "lost_points": {}}
             for key, value in known.items()}
    for result in results:
        known[f"{result.assignment}/{result.student}"] = {"notes": result.notes, "lost_points": result.lost}
    partial = notes_file.with_suffix(".partial")
    partial.write_text(json.dumps(known, indent=1, sort_keys=True))
    partial.replace(notes_file)
    notes = {tuple(key.split("/", 1)): value["notes"] for key, value in known.items()}
    lost = {tuple(key.split("/", 1)): value.get("lost_points", {}) for key, value in known.items()}
    rows = gradebook_merge.export_rows(db_url, assignments)
    report.write_grades_csv(grading_dir / "grades.csv", rows, notes, lost)
