"""notebooks/ is exactly nbgrader's release of solutions/, and carries no solution, hidden test or output."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from tools.release import RELEASE_DIR, SOURCE_DIR, assignment_names, generate_release

FIX = "run `make release` to regenerate notebooks/ from solutions/ (never edit notebooks/ by hand)"
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
COURSE_KERNEL = "distributed-course"


def load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        pytest.fail(f"{path} is not valid notebook JSON ({error}): {FIX}")


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return text if isinstance(text, str) else "".join(text)


def files_under(folder: Path) -> dict[str, Path]:
    return {str(p.relative_to(folder)): p for p in sorted(folder.rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts}


def released_notebooks() -> list[Path]:
    return sorted(RELEASE_DIR.glob("*/*.ipynb"))


def all_notebooks() -> list[Path]:
    return sorted(SOURCE_DIR.glob("*/*.ipynb")) + released_notebooks()


@pytest.mark.slow  # runs nbgrader generate_assignment on every chapter
def test_notebooks_folder_is_exactly_a_fresh_release():
    with tempfile.TemporaryDirectory(prefix="course-release-check-") as scratch:
        fresh_dir = Path(scratch) / "notebooks"
        generate_release(fresh_dir)
        fresh, committed = files_under(fresh_dir), files_under(RELEASE_DIR)
        assert sorted(committed) == sorted(fresh), (
            f"notebooks/ holds {sorted(committed)} but a release makes {sorted(fresh)}: {FIX}")
        for name, fresh_path in fresh.items():
            if fresh_path.suffix == ".ipynb":
                same = load(committed[name]) == load(fresh_path)
            else:
                same = committed[name].read_bytes() == fresh_path.read_bytes()
            assert same, f"notebooks/{name} differs from what nbgrader makes of solutions/: {FIX}"


@pytest.mark.parametrize("path", released_notebooks(), ids=lambda p: p.parent.name)
def test_release_has_no_solution_or_hidden_test(path):
    text = "\n".join(source(cell) for cell in load(path)["cells"])
    for marker in MARKERS:
        assert marker not in text, f"{path} contains the marker {marker!r}: {FIX}"
    assert "autograde_tests" not in text, f"{path} mentions the instructor-only autograde_tests: {FIX}"
    source_cells = {cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"): source(cell)
                    for cell in load(SOURCE_DIR / path.parent.name / path.name)["cells"]}
    for cell in load(path)["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id is None or not cell["metadata"]["nbgrader"].get("solution"):
            continue
        assert re.search(r"YOUR (CODE|ANSWER) HERE", source(cell)), (
            f"{path}, answer cell {grade_id!r} has no 'YOUR CODE HERE' stub, so its solution is showing: "
            f"put the answer between ### BEGIN SOLUTION and ### END SOLUTION in solutions/, then {FIX}")
        for region in SOLUTION_REGION.findall(source_cells.get(grade_id, "")):
            leaked = [line.strip() for line in region.splitlines()
                      if len(line.strip()) > 12 and not line.strip().startswith("#")
                      and line.strip() in source(cell)]
            assert not leaked, f"{path}, cell {grade_id!r} shows solution lines {leaked[:3]}: {FIX}"


@pytest.mark.parametrize("path", all_notebooks(), ids=lambda p: f"{p.parts[-3]}/{p.parent.name}")
def test_notebook_is_stored_clean_with_the_course_kernel(path):
    notebook = load(path)
    dirty = [cell.get("id", i) for i, cell in enumerate(notebook["cells"])
             if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))]
    assert not dirty, f"{path} is stored with outputs in cells {dirty}: clear them (Kernel > Restart & Clear)"
    kernel = notebook.get("metadata", {}).get("kernelspec", {}).get("name")
    assert kernel == COURSE_KERNEL, f"{path} uses kernel {kernel!r}; the course kernel is {COURSE_KERNEL!r}"


def test_every_chapter_is_released():
    assert assignment_names() == sorted(p.name for p in RELEASE_DIR.iterdir() if p.is_dir()), FIX
