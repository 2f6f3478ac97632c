"""The isolated judge covers every graded test cell, and instructor-only code never reaches a release."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from course_lib.grading.attempt.hidden_checks import resolve_check
from course_lib.grading.autograder.judge import load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings

CHECKS = load_registry(read_settings(CODE_ROOT).registry)

REPO = Path(__file__).resolve().parents[1]


def _graded_test_cells():
    for path in sorted((REPO / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader") or {}
            if meta.get("grade") and not meta.get("solution") and cell.cell_type == "code":
                yield path.parent.name, meta["grade_id"]


@pytest.mark.parametrize("assignment, grade_id", list(_graded_test_cells()))
def test_every_graded_test_cell_is_rechecked_in_isolation(assignment, grade_id):
    assert (assignment, grade_id) in CHECKS, (
        f"{assignment}/{grade_id} has no entry in instructor/registry.py: without one its score comes "
        "only from the student's own kernel, which the student's code can tamper with")


def test_every_registry_entry_names_a_graded_test_cell():
    graded = set(_graded_test_cells())
    stale = sorted(key for key in CHECKS if key not in graded)
    assert not stale, (f"instructor/registry.py lists {stale}, which are not graded test cells in "
                       "solutions/: remove those entries, or restore the cells")


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_every_registered_check_exists(key):
    assert callable(resolve_check(CHECKS[key].check))


def _release_files():
    return sorted(p for p in (REPO / "notebooks").rglob("*") if p.is_file())


def test_releases_carry_no_instructor_only_code():
    """Hidden tests load instructor/ checks; a release must contain neither that code nor those files."""
    assert _release_files(), "notebooks/ is empty: run make release"
    instructor_files = {p.name for folder in ("instructor", "autograde_tests")
                        for p in (REPO / folder).rglob("*.py")}
    for path in _release_files():
        assert path.name not in instructor_files or path.suffix != ".py", f"{path} is instructor-only code"
        if path.suffix == ".ipynb":
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            for name in ("autograde_tests", "instructor_checks", "instructor/"):
                assert name not in text, f"{path} mentions {name} (a hidden test leaked)"
            assert "BEGIN HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text, path


def test_chapter_sources_carry_no_instructor_only_files():
    """nbgrader copies every file of solutions/<chapter>/ into the release: none may be a check."""
    for path in (REPO / "solutions").rglob("*"):
        assert not {"autograde_tests", "instructor"} & set(path.parts), path
        assert not path.name.startswith(("ch0", "ch1", "registry")), path
