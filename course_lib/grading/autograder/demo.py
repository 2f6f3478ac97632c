"""`make grade-demo`: a generated class graded end to end, so an instructor sees the whole flow.

Students: full marks (the instructor's answers), partial (all but the last answer), empty (the
release as handed out), broken (not even valid JSON), and for chapter 02 with --students 5 or more a
ring that sends the wrong way (right values, wrong traffic). The
demo course lives in grading/demo/ and reuses the course's solutions/.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from course_lib.grading.autograder import fixtures
from course_lib.grading.settings import read_settings

PREFERRED = ("02_collectives", "01_mlp_by_hand", "00_orientation")


def demo_assignment(course_root: Path) -> str:
    for name in PREFERRED:
        if (course_root / "solutions" / name / f"{name}.ipynb").exists():
            return name
    raise SystemExit("no chapter with a graded exercise in solutions/ to build a demo class from")


def release_notebook(course_root: Path, assignment: str) -> nbformat.NotebookNode:
    path = course_root / "notebooks" / assignment / f"{assignment}.ipynb"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make release` first")
    return nbformat.read(path, as_version=4)


def class_answers(course_root: Path, assignment: str, size: int = 4) -> dict[str, dict[str, str] | None]:
    """student -> {grade_id: source} (None: a broken file); `size` students cycling through the kinds."""
    source = nbformat.read(course_root / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    full = fixtures.solution_sources(source)
    ids = list(full)
    kinds: dict[str, dict[str, str] | None] = {
        "full_marks": full,
        "partial": {gid: full[gid] for gid in ids[:-1]} if len(ids) > 1 else {ids[0]: "def _(): pass"},
        "empty": {},
        "broken": None,
    }
    wrong = read_settings(course_root).demo_fixtures.get(assignment)   # a plausible mistake, if any
    if wrong is not None and wrong.exists() and size > len(kinds):
        answers = fixtures.load_py_fixture(wrong)
        kinds[wrong.stem] = {**full, **{k: v for k, v in answers.items() if k in full}}
    names = list(kinds)
    return {f"{names[i % len(names)]}{'' if i < len(names) else f'_{i // len(names) + 1}'}":
            kinds[names[i % len(names)]] for i in range(max(size, 1))}


def write_class(course_root: Path, demo_root: Path, assignment: str, size: int = 4) -> list[str]:
    """Fresh demo course at demo_root: solutions linked, one submission folder per student."""
    if demo_root.exists():
        shutil.rmtree(demo_root)
    demo_root.mkdir(parents=True)
    (demo_root / "solutions").symlink_to(course_root / "solutions", target_is_directory=True)
    release = release_notebook(course_root, assignment)
    students = []
    for student, answers in class_answers(course_root, assignment, size).items():
        folder = demo_root / "grading" / "submitted" / student / assignment
        if answers is None:
            folder.mkdir(parents=True)
            text = nbformat.writes(release)
            (folder / f"{assignment}.ipynb").write_text(text[: len(text) // 2])
        else:
            fixtures.write_submission(folder, assignment, fixtures.make_submission(release, answers))
        students.append(student)
    return students
