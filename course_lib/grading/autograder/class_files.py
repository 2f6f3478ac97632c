"""The class's files a grading run writes besides the gradebook: autograded notebooks, unpacked zips,
grades.csv and the review notes kept across runs. Shared by `make grade` and its Slurm array merge.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path

from course_lib.grading.autograder import gradebook_merge, json_files, report, submissions, zip_times
from course_lib.grading.student_text import readable, readable_tree


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


REFUSED_ZIPS = "refused_zips.json"   # "<student>/<assignment>" -> why its zip was not unpacked
ZIP_NAMES = "zip_names.json"         # "<assignment>/<student>" -> the zip's name (lms_feedback names by it)
SECRET = "submission_secret.txt"     # nbgrader release_feedback hashes each student's feedback with it


def unpack_zips(grading_dir: Path, folder: Path, pattern: str, assignment: str | None,
                late_tag: str | None = None) -> dict:
    """Each matching zip into grading/submitted/<student>/<assignment>/; (student, assignment) -> why, for
    each zip refused alone (an unusable id, a broken archive, one over the size limit), also kept in
    grading/refused_zips.json for the grading run to score 0 with its reason. ``late_tag``: the course's
    ``lms_late_tag`` (zip_times)."""
    refused, zip_names = {}, json_files.read_object(grading_dir / ZIP_NAMES)
    for (student, name), archive in submissions.collect_zips(folder, pattern, assignment).items():
        problem = submissions.student_id_problem(student)
        if problem:
            refused[(readable(student, submissions.MAX_NAME_CHARS), name)] = problem
            continue
        target = grading_dir / "submitted" / student / name
        try:
            files = submissions.extract_zip(archive)
        except Exception as error:  # noqa: BLE001 - BadZipFile, too big, unreadable: this student's alone
            why = f"{type(error).__name__}: {readable(error, 300)}"
            refused[(student, name)] = (f"{readable(archive.name)} could not be unpacked ({why}); this "
                                        "submission was not graded and scores 0")
            shutil.rmtree(target, ignore_errors=True)   # the zip is the submission: an older one is not it
            continue
        secret = _kept_secret(target)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for file_name, content in files.items():
            (target / file_name).write_bytes(content)
        # the submission time is when the archive reached the grader (its file's time, or the LMS's late
        # tag), never a timestamp.txt the student put in it (extract_zip leaves that out)
        received = zip_times.received(archive, grading_dir, name, student, late_tag)
        (target / submissions.TIMESTAMP).write_text(received.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
        # as `nbgrader submit` makes one, so that `nbgrader release_feedback` takes zip students too
        (target / SECRET).write_text(secret)
        zip_names[f"{name}/{student}"] = readable(archive.name)
    for (student, name), why in refused.items():
        print(report.printable(f"{name}/{student}: not graded: {why}", sys.stderr), file=sys.stderr)
    grading_dir.mkdir(parents=True, exist_ok=True)
    json_files.write_atomically(grading_dir / REFUSED_ZIPS,
                                {f"{who}/{name}": why for (who, name), why in refused.items()})
    json_files.write_atomically(grading_dir / ZIP_NAMES, zip_names)
    return refused


def _kept_secret(target: Path) -> str:
    """The secret an earlier unpacking gave this submission (unpacking the same zip again changes nothing
    that graded_record fingerprints), or a new one."""
    try:
        old = (target / SECRET).read_text()
    except (OSError, UnicodeDecodeError):
        old = ""
    return old if len(old) == 128 and all(c in "0123456789abcdef" for c in old) else secrets.token_hex(64)


def refused_zips(grading_dir: Path) -> dict[tuple[str, str], str]:
    """(student, assignment) -> why, for the zips the last unpacking refused."""
    path = grading_dir / REFUSED_ZIPS
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return {}
    return {tuple(key.split("/", 1)): readable(why) for key, why in known.items() if "/" in key}


def zip_names(grading_dir: Path) -> dict[tuple[str, str], str]:
    """(assignment, student) -> the name of the zip each submission last came in."""
    known = json_files.read_object(grading_dir / ZIP_NAMES)
    return {tuple(key.split("/", 1)): name for key, name in known.items()
            if "/" in key and isinstance(name, str)}


def note_missing_feedback(grading_dir: Path, assignment: str, results: list[report.StudentResult]) -> None:
    """A graded submission (its autograded notebook kept) without feedback says so in its notes: nbgrader
    generate_feedback failed on it, and grades.csv and the others' feedback are written all the same."""
    for result in results:
        graded = grading_dir / "autograded" / result.student / assignment
        if result.assignment == assignment and graded.is_dir() \
                and not (grading_dir / "feedback" / result.student / assignment).is_dir():
            result.notes.append("no feedback was generated for this submission (nbgrader generate_feedback "
                                "failed on it; see the grading run's output)")


def write_outputs(grading_dir: Path, db_url: str, assignments: list[str],
                  results: list[report.StudentResult]) -> None:
    """grades.csv for every graded submission in the gradebook; review notes kept across runs.

    review_notes.json: "<assignment>/<student>" -> {"notes": what to review, "lost_points": {grade_id:
    "0/3: <reason>"} for each cell below full marks} (a plain list, as older runs wrote, is its notes)."""
    notes_file = grading_dir / "review_notes.json"
    try:
        known = json.loads(notes_file.read_text()) if notes_file.exists() else {}
    except ValueError:   # a damaged file (a run stopped while an older version wrote it) is started again
        known = {}
    # readable: a note an older run kept with a lone surrogate (a file name) would stop every later run
    known = {readable(key): readable_tree(value if isinstance(value, dict) else {"notes": value,
                                                                                 "lost_points": {}})
             for key, value in known.items()}
    for result in results:
        known[f"{result.assignment}/{result.student}"] = readable_tree({"notes": result.notes,
                                                                        "lost_points": result.lost})
    json_files.write_atomically(notes_file, known)
    notes = {tuple(key.split("/", 1)): value.get("notes", []) for key, value in known.items()}
    lost = {tuple(key.split("/", 1)): value.get("lost_points", {}) for key, value in known.items()}
    rows = gradebook_merge.export_rows(db_url, assignments)
    listed = {(row["assignment"], row["student_id"]) for row in rows}
    rows += [{"assignment": r.assignment, "student_id": r.student, "timestamp": "", "raw_score": 0.0,
              "score": 0.0, "max_score": r.max_score, "needs_manual_grade": True}
             for r in results if (r.assignment, r.student) not in listed]   # refused: not in the gradebook
    report.write_grades_csv(grading_dir / "grades.csv", rows, notes, lost)
