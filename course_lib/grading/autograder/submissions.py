"""Finding and vetting submissions before nbgrader sees them: folders, zip files, broken notebooks.

A submission is read from grading/submitted/<student>/<assignment>/ (or extracted from a zip first).
Invalid JSON, a renamed or missing notebook, another assignment's notebook and tampered locked cells
become review notes here, so one broken notebook never stops the class.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_lib.grading.student_text import plain_name, quoted, readable, readable_tree

# nbgrader's zip-collect convention: a named regexp with student_id (and optionally assignment_id)
# groups, applied to each archive's file name.
DEFAULT_ZIP_PATTERN = (r"^(?P<student_id>[A-Za-z0-9.-]+(?:_[A-Za-z0-9.-]+)*?)"
                       r"(?:__(?P<assignment_id>\w+))?\.zip$")
MAX_UNZIPPED_BYTES = 200 * 1024**2
MAX_FILE_BYTES = 50 * 1024**2
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# nbgrader reads a submission's time from this file: in a zip it is the student's, never taken as such
TIMESTAMP = "timestamp.txt"
GRADERS_OWN = {TIMESTAMP, "submission_secret.txt"}   # never taken from a student's zip
MAX_NAME_CHARS = 120


@dataclass
class AssignmentShape:
    """What a submission of one assignment should look like (from its release notebooks)."""

    name: str
    release_notebooks: dict[str, nbformat.NotebookNode]   # notebook name (no .ipynb) -> release

    def grade_ids(self, notebook: str) -> set[str]:
        return set(_cells_by_id(self.release_notebooks[notebook]))


@dataclass
class Submission:
    student: str
    assignment: str
    files: dict[str, bytes] = field(default_factory=dict)    # what nbgrader will grade
    notes: list[str] = field(default_factory=list)           # for the instructor's review
    zero_notebooks: list[str] = field(default_factory=list)  # notebooks that score 0 (missing/invalid)
    refused: str = ""   # why it is not graded at all (its id, a zip or folder the grader cannot read): 0
    fingerprint: str = ""   # what was read, for graded_record ("" : not recorded, graded again next run)


def _cells_by_id(notebook) -> dict[str, nbformat.NotebookNode]:
    cells = {}
    for cell in notebook.get("cells", []):
        grade_id = (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")
        if grade_id:
            cells[grade_id] = cell
    return cells


def student_id_problem(student: str) -> str:
    """Why a folder or zip name cannot be a student id ("" when it can); the name is quoted safely."""
    if STUDENT_ID.match(student):
        return ""
    return (f"student id {quoted(student, MAX_NAME_CHARS)} is not usable as a folder name: use letters, "
            "digits, '.', '_' or '-' (at most 64 characters); this submission was not graded and scores 0")


def check_student_id(student: str) -> str:
    problem = student_id_problem(student)
    if problem:
        raise ValueError(problem)
    return student


def read_notebook(content: bytes) -> tuple[nbformat.NotebookNode | None, str]:
    try:
        notebook = nbformat.reads(content.decode("utf-8"), as_version=4)
        if not isinstance(notebook.get("cells"), list):
            return None, "it has no list of cells"
        # JSON may hold a lone surrogate ("\\ud800"): made writable here, or writing it back stops vet()
        return readable_tree(notebook), ""
    except Exception as error:  # any parse or schema failure means "not a notebook"
        first = str(error).splitlines()[0] if str(error) else ""
        return None, readable(f"{type(error).__name__}: {first}", 200)


def tampered_locked_cells(submitted, release) -> list[str]:
    """Notes for locked cells (instructor code, tests) deleted or edited in the submission."""
    notes = []
    submitted_cells = _cells_by_id(submitted)
    for grade_id, cell in _cells_by_id(release).items():
        if not cell.metadata.get("nbgrader", {}).get("locked"):
            continue
        if grade_id not in submitted_cells:
            notes.append(f"locked cell {grade_id!r} was deleted")
        elif submitted_cells[grade_id].source.strip() != cell.source.strip():
            notes.append(f"locked cell {grade_id!r} was edited (graded with the original)")
    return notes


def vet(student: str, assignment: AssignmentShape, files: dict[str, bytes],
        others: dict[str, AssignmentShape]) -> Submission:
    """Keep what nbgrader can grade and note everything an instructor should know."""
    submission = Submission(student, assignment.name)
    expected = set(assignment.release_notebooks)
    candidates: dict[str, nbformat.NotebookNode] = {}
    for name, content in sorted(files.items()):
        if not plain_name(name):   # bytes that are not UTF-8 (or control characters) in a file name
            submission.notes.append(f"a file named {quoted(name, MAX_NAME_CHARS)} was left out: its name is "
                                    "not plain UTF-8 text")
            continue
        if not name.endswith(".ipynb"):
            if len(content) <= MAX_FILE_BYTES:
                submission.files[name] = content
            continue
        notebook, problem = read_notebook(content)
        if notebook is None:
            submission.notes.append(f"{name} is not a valid notebook ({problem})")
            continue
        candidates[name[: -len(".ipynb")]] = notebook
    unmatched = {name: nb for name, nb in candidates.items() if name not in expected}
    for name in sorted(expected):
        notebook = candidates.get(name)
        if notebook is None:
            notebook = _adopt_renamed(name, assignment, unmatched, submission)
        if notebook is None:
            submission.zero_notebooks.append(name)
            submission.notes.append(f"{name}.ipynb is missing: it scores 0")
            continue
        if not _cells_by_id(notebook).keys() & assignment.grade_ids(name):
            submission.zero_notebooks.append(name)
            submission.notes.append(f"{name}.ipynb is not this assignment's notebook"
                                    f"{_which_assignment(notebook, others)}: it scores 0")
            continue
        submission.notes += tampered_locked_cells(notebook, assignment.release_notebooks[name])
        submission.files[f"{name}.ipynb"] = nbformat.writes(notebook).encode()
    for name, notebook in unmatched.items():
        submission.notes.append(f"extra notebook {name}.ipynb ignored{_which_assignment(notebook, others)}")
    return submission


def read_and_vet(submitted: Path, student: str, assignment: AssignmentShape,
                 others: dict[str, AssignmentShape]) -> Submission:
    """submitted/<student>/<assignment>/ read and vetted; a folder name that is no usable id, or files the
    grader cannot read, refuse this student alone (`Submission.refused`: it scores 0 with the reason)."""
    problem = student_id_problem(student)
    if not problem:
        try:
            return vet(student, assignment, read_folder(submitted / student / assignment.name), others)
        except Exception as error:  # noqa: BLE001 - what stops reading one submission is that student's
            problem = (f"the grader could not read this submission ({type(error).__name__}: "
                       f"{readable(error, 300)}); it was not graded and scores 0")
    name = readable(student, MAX_NAME_CHARS)
    return Submission(name, assignment.name, notes=[problem], refused=problem)


def _adopt_renamed(name, assignment, unmatched, submission):
    """A notebook under another name whose graded cells are this one's: grade it, and say so."""
    ids = assignment.grade_ids(name)
    best = max(unmatched, key=lambda other: len(_cells_by_id(unmatched[other]).keys() & ids), default=None)
    if best is None or not _cells_by_id(unmatched[best]).keys() & ids:
        return None
    submission.notes.append(f"{best}.ipynb was renamed: graded as {name}.ipynb")
    return unmatched.pop(best)


def _which_assignment(notebook, others: dict[str, AssignmentShape]) -> str:
    ids = set(_cells_by_id(notebook))
    for other in others.values():
        if any(ids & other.grade_ids(nb) for nb in other.release_notebooks):
            return f" (it looks like {other.name})"
    return ""


def read_folder(folder: Path) -> dict[str, bytes]:
    """The files of one submission folder (top level; checkpoints and hidden files skipped)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if not p.is_symlink() and p.is_file() and not p.name.startswith(".")
            and p.stat().st_size <= MAX_FILE_BYTES}


def extract_zip(archive: Path) -> dict[str, bytes]:
    """The files inside a zip, flattened to their base names; refuses zip bombs and odd paths."""
    files: dict[str, bytes] = {}
    total = 0
    with zipfile.ZipFile(archive) as bundle:
        for info in bundle.infolist():
            base = Path(info.filename).name
            if info.is_dir() or not base or base.startswith(".") or "__MACOSX" in info.filename \
                    or base in GRADERS_OWN:   # the grader writes its own (class_files.unpack_zips)
                continue
            total += info.file_size
            if info.file_size > MAX_FILE_BYTES or total > MAX_UNZIPPED_BYTES:
                raise ValueError(f"{archive.name} unpacks to more than {MAX_UNZIPPED_BYTES >> 20} MiB")
            files[base] = bundle.read(info)
    return files


def collect_zips(folder: Path, pattern: str, default_assignment: str | None) -> dict[tuple[str, str], Path]:
    """(student, assignment) -> archive, for every zip in folder whose name matches the pattern."""
    regexp = re.compile(pattern)
    found: dict[tuple[str, str], Path] = {}
    for archive in sorted(folder.glob("*.zip")):
        match = regexp.match(archive.name)
        if not match:
            raise ValueError(f"{archive.name} does not match the zip file-name pattern {pattern!r}; "
                             "rename it to <student_id>__<assignment>.zip (or <student_id>.zip with "
                             "--assignment)")
        groups = match.groupdict()
        assignment = groups.get("assignment_id") or default_assignment
        if not assignment:
            raise ValueError(f"{archive.name} names no assignment: pass --assignment or name it "
                             "<student_id>__<assignment>.zip")
        found[(groups["student_id"], assignment)] = archive   # its id is checked, alone, on unpacking
    return found
