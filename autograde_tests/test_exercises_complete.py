"""Every graded exercise is complete: its folder of checks holds the fixed files, its hidden checks give a
row per part, its fixtures hold four plausible mistakes and a shortcut, and its points are written once.

Adding an exercise is copying a folder and filling its record (CONTRIBUTING.md, "Adding a graded exercise").
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading.autograder.judge import load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings

REPO = Path(__file__).resolve().parents[1]
CHECKS_FOLDER = REPO / "course_lib" / "grading" / "checks"
FIXTURES = REPO / "autograde_tests" / "fixtures"
REGISTRY = load_registry(read_settings(CODE_ROOT).registry)
EXERCISES = {exercise.name: exercise for exercise in REGISTRY.exercises()}
WRONG_FIXTURES_AT_LEAST = 4
# Where points may stand besides the exercise's record: the notebook (nbgrader reads them there; a test
# below holds them equal) and the fixture tables (expected_scores.json, data each fixture is held to).
SCANNED = ("course_lib", "instructor", "tests", "autograde_tests", "tools")


def _table(exercise) -> dict:
    path = FIXTURES / exercise.fixtures / "expected_scores.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _is_shortcut(why: str) -> bool:
    """A shortcut, as its expected_scores.json "why" says: course_lib or torch's own implementation, refused
    (RefusedCodeError), or a collective that does the exercise's work (ForbiddenCallError)."""
    return any(word in why.lower() for word in ("shortcut", "refused", "forbiddencallerror"))


def test_every_exercise_folder_is_a_registered_exercise():
    folders = {path.name for path in CHECKS_FOLDER.glob("ch*") if path.is_dir()}
    assert folders == set(EXERCISES), (
        f"folders without a registered exercise: {sorted(folders - set(EXERCISES))}; registered exercises "
        f"without a folder: {sorted(set(EXERCISES) - folders)} (instructor/registry.py's EXERCISES)")


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_folder_holds_the_fixed_files(name):
    exercise = EXERCISES[name]
    missing = [file for file in exercise.files if not (CHECKS_FOLDER / name / file).is_file()]
    assert not missing, f"course_lib/grading/checks/{name}/ lacks {missing} (it must hold {exercise.files})"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_part_has_a_registry_row_and_the_notebooks_points(name):
    exercise = EXERCISES[name]
    rows = {grade_id for assignment, grade_id in REGISTRY if assignment == exercise.chapter}
    assert set(exercise.points) <= rows, f"{name}: parts with no registry row: {set(exercise.points) - rows}"
    source = REPO / "solutions" / exercise.chapter / f"{exercise.chapter}.ipynb"
    notebook = nbformat.read(source, as_version=4)
    marks = [cell.metadata.get("nbgrader") or {} for cell in notebook.cells]
    in_notebook = {m["grade_id"]: m["points"] for m in marks if m.get("grade_id") in exercise.points}
    assert in_notebook == dict(exercise.points), f"{name}: the notebook's points differ from the exercise's"


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_fixtures_hold_four_mistakes_and_a_shortcut(name):
    exercise, table = EXERCISES[name], _table(EXERCISES[name])
    assert table, f"{name}: no autograde_tests/fixtures/{exercise.fixtures}/expected_scores.json"
    assert {g: table["max_points"][g] for g in exercise.points} == dict(exercise.points), name
    losing = [fixture for fixture, scores in table["fixtures"].items() if fixture != "unanswered"
              and any(scores[g] < points for g, points in exercise.points.items())]
    shortcuts = [f for f in losing if _is_shortcut(table["why"][f])]
    wrong = [f for f in losing if f not in shortcuts]
    assert len(wrong) >= WRONG_FIXTURES_AT_LEAST, (
        f"{name}: {len(wrong)} plausible wrong fixtures lose points in its parts ({wrong}); add "
        f"{WRONG_FIXTURES_AT_LEAST - len(wrong)} more to autograde_tests/fixtures/{exercise.fixtures}/")
    assert shortcuts, (f"{name}: no shortcut fixture (one reaching course_lib or what the exercise refuses) "
                       f"in autograde_tests/fixtures/{exercise.fixtures}/")


def _point_tables(tree: ast.AST, points: dict):
    """Line numbers of dict literals in ``tree`` that give two or more parts exactly their points."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            same = [k.value for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value in points
                    and isinstance(v, ast.Constant) and v.value == points[k.value]]
            if len(same) >= 2:
                yield node.lineno


def test_each_exercises_points_are_written_once():
    """An exercise's points stand in its hidden-check module only; every other table reads them from there."""
    twice = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for name, exercise in EXERCISES.items():
                if path != REPO / "instructor" / "checks" / f"{name}.py":
                    twice += [f"{path.relative_to(REPO)}:{line} ({name})"
                              for line in _point_tables(tree, dict(exercise.points))]
    assert not twice, f"points written again outside instructor/checks/<exercise>.py: {twice}"
