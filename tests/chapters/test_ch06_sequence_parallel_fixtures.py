"""Chapter 06's block and sequence-parallel part: its hidden checks on the reference solution and on each
known-wrong submission in autograde_tests/fixtures/sequence_parallel/ (checked here directly, not through
nbgrader), each fixture's cells graded over the solution's others, after the lesson's own import lines.
"""

import functools
import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources
from course_lib.notebook_cells import lesson_imports

ch06_sp = instructor_checks("ch06_sequence_parallel")

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "autograde_tests" / "fixtures" / "sequence_parallel"
SOLUTION = ROOT / "solutions" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
PRELUDE = lesson_imports(RELEASE)
TABLE = json.loads((FOLDER / "expected_scores.json").read_text())
SHORTCUT = "uses_parallelize_module"


@functools.cache
def _lesson_imported() -> bool:
    exec(compile(PRELUDE, "<lesson imports, once in the parent>", "exec"), {})
    return True


def _solution() -> list[str]:
    return list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    _lesson_imported()
    points, messages = {}, {}
    for grade_id, (check, names) in ch06_sp.ROWS.items():
        try:
            check(*(StudentFunction(name, sources=sources, prelude=PRELUDE) for name in names))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch06_sp.POINTS[grade_id]
    return points, messages


def test_the_table_matches_the_notebook_and_the_folder():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert TABLE["max_points"] == TABLE["solution"] == ch06_sp.POINTS
    assert ch06_sp.POINTS == {g: graded[g] for g in ch06_sp.POINTS}
    assert sorted(p.stem for p in FOLDER.glob("*.py")) == sorted(TABLE["fixtures"]) == sorted(TABLE["why"])
    full = sum(ch06_sp.POINTS.values())
    assert sum(sum(p.values()) < full for name, p in TABLE["fixtures"].items() if name != SHORTCUT) >= 4
    assert TABLE["why"][SHORTCUT].startswith("shortcut") and TABLE["graded_through_nbgrader"] == []
    text = " ".join(" ".join(c.source for c in cells).split())
    assert "**Grading** (4 points): the values (2) and the traffic (2)" in text
    assert "**Grading** (5 points): the values (3:" in text and "the traffic (2: forward and backward" in text


def test_the_prose_no_longer_dictates_the_blocks_splits():
    """Review ch06 #7: the block is graded on its property; no cell before it says which layer splits how."""
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    before = " ".join(c.source for c in cells[:ids.index("parallelize_block")] if c.cell_type == "markdown")
    for dictated in ("q, k, v and up column-parallel", "splits q, k, v by columns", "out` by rows"):
        assert dictated not in before


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(_solution())
    assert points == TABLE["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(TABLE["fixtures"]))
def test_each_wrong_submission_loses_exactly_its_points(fixture):
    source = (FOLDER / f"{fixture}.py").read_text()
    points, messages = earned_points([*_solution(), source])
    assert points == TABLE["fixtures"][fixture], (
        f"{fixture} ({TABLE['why'][fixture]}) earned {points}; failures:\n" + "\n\n".join(messages.values()))
    assert all("hidden test seed" in m for m in messages.values()), messages
    if fixture == SHORTCUT:
        assert all("torch.distributed.tensor" in m and "refuses" in m for m in messages.values())
    if fixture == "forgets_down_bias_sync":
        assert "down.bias.grad" in messages["test_sequence_parallel_mlp"]
        # the traffic's failure gives the bytes, not which parameters carry them: that is the exercise
        traffic = messages["test_sequence_parallel_traffic"]
        assert "3 x dim elements" in traffic
        assert "norm's weight" not in traffic and "down's bias" not in traffic
    if fixture == "all_reduce_then_slice":
        assert "all_reduce of" in messages["test_sequence_parallel_traffic"]
    if fixture == "block_mlp_only":
        assert "is not split" in messages["test_parallelize_block"]
