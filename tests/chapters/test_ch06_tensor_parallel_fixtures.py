"""Chapter 06's hidden checks on the reference solution and on each known-wrong submission (no nbgrader).

Every fixture in autograde_tests/fixtures/tensor_parallel/ must earn exactly the points its
expected_scores.json gives, test cell by test cell; the solution notebook's own cells earn full marks.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources

ch06 = instructor_checks("ch06_tensor_parallel")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "tensor_parallel"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
PAIR = ("ColumnParallelLinear", "RowParallelLinear")

# Test cell -> (the names it grades, the hidden check it calls), as in the notebook.
TEST_CELLS = {
    "test_shard_columns": (("shard_columns",), ch06.check_shard_columns_hidden),
    "test_shard_rows": (("shard_rows",), ch06.check_shard_rows_hidden),
    "test_column_parallel_linear": (("ColumnParallelLinear",), ch06.check_column_parallel_linear_hidden),
    "test_row_parallel_linear": (("RowParallelLinear",), ch06.check_row_parallel_linear_hidden),
    "test_tensor_parallel_mlp": (PAIR, ch06.check_tensor_parallel_mlp_hidden),
    "test_tensor_parallel_mlp_traffic": (PAIR, ch06.check_tensor_parallel_mlp_traffic_hidden),
    "test_tensor_parallel_block": (PAIR, ch06.check_tensor_parallel_block_hidden),
}


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, (names, check) in TEST_CELLS.items():
        try:
            check(*(StudentFunction(name, sources=sources) for name in names))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch06.POINTS[grade_id]
    return points, messages


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def test_points_table_matches_the_notebook_and_the_fixture_table():
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in _cells() if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == ch06.POINTS == EXPECTED["max_points"]
    assert set(TEST_CELLS) == set(graded)
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])


def test_the_grading_paragraph_states_the_notebooks_points():
    text = " ".join(" ".join(cell.source for cell in _cells()).split())
    assert f"({sum(ch06.POINTS.values())} points)" in text
    stated = {"test_shard_columns": "shard functions are graded on their own ({} + ",
              "test_column_parallel_linear": "({} for column,", "test_row_parallel_linear": "{} for row,",
              "test_tensor_parallel_mlp": "then the MLP ({}:",
              "test_tensor_parallel_mlp_traffic": "its traffic ({}:",
              "test_tensor_parallel_block": "a transformer block ({}:"}
    for grade_id, phrase in stated.items():
        assert phrase.format(ch06.POINTS[grade_id]) in text, (grade_id, phrase)


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(sources)
    assert points == EXPECTED["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_wrong_submission_loses_exactly_its_points(fixture):
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()])
    assert points == EXPECTED["fixtures"][fixture], (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert message.strip() and "hidden test seed" in message, (grade_id, message)
    if fixture == "row_bias_every_rank":
        assert "output differs" in messages["test_row_parallel_linear"]
    if fixture == "missing_backward_all_reduce":
        assert "no collective at all" in messages["test_tensor_parallel_mlp_traffic"]
    if fixture == "no_value_error":
        assert "must raise ValueError" in messages["test_shard_columns"]
