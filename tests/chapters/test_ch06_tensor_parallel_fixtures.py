"""Chapter 06's hidden checks on the reference solution and on each known-wrong submission (no nbgrader).

Every fixture in autograde_tests/fixtures/tensor_parallel/ (the layers) and .../vocab_parallel/ (the
vocabulary-parallel loss) must earn exactly the points its expected_scores.json gives, test cell by test
cell, run after the lesson's own import lines as the judge runs it; the solution notebook's own cells earn
full marks. A shortcut's feedback names what was refused.
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

ch06 = instructor_checks("ch06_tensor_parallel")
ch06_vocab = instructor_checks("ch06_vocab_loss")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures"
SOLUTION = ROOT / "solutions" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "06_tensor_parallel" / "06_tensor_parallel.ipynb"
PRELUDE = lesson_imports(RELEASE)


@functools.cache
def _lesson_imported() -> bool:
    """The lesson's imports, once in this process, so that every forked child inherits them."""
    exec(compile(PRELUDE, "<lesson imports, once in the parent>", "exec"), {})
    return True
PAIR = ("ColumnParallelLinear", "RowParallelLinear")
LOSS = ("vocab_parallel_cross_entropy",)

# Test cell -> (the names it grades, the hidden check it calls), as in the notebook, per fixture folder.
TEST_CELLS = {
    "tensor_parallel": {
        "test_shard_columns": (("shard_columns",), ch06.check_shard_columns_hidden),
        "test_shard_rows": (("shard_rows",), ch06.check_shard_rows_hidden),
        "test_column_parallel_linear": (("ColumnParallelLinear",), ch06.check_column_parallel_linear_hidden),
        "test_row_parallel_linear": (("RowParallelLinear",), ch06.check_row_parallel_linear_hidden),
        "test_tensor_parallel_mlp": (PAIR, ch06.check_tensor_parallel_mlp_hidden),
        "test_tensor_parallel_mlp_traffic": (PAIR, ch06.check_tensor_parallel_mlp_traffic_hidden),
    },
    "vocab_parallel": {
        "test_vocab_parallel_loss_values": (LOSS, ch06_vocab.check_vocab_parallel_loss_values_hidden),
        "test_vocab_parallel_loss_gradients": (LOSS, ch06_vocab.check_vocab_parallel_loss_gradients_hidden),
        "test_vocab_parallel_loss_traffic": (LOSS, ch06_vocab.check_vocab_parallel_loss_traffic_hidden),
    },
}
POINTS = {**ch06.POINTS, **ch06_vocab.POINTS}
NOTEBOOK_POINTS = {**POINTS, **instructor_checks("ch06_sequence_parallel").POINTS}   # and the block, SP
CASES = [(folder, name) for folder in TEST_CELLS
         for name in json.loads((FIXTURES / folder / "expected_scores.json").read_text())["fixtures"]]
REFUSED = {"trains_through_parallelize_module": "from torch.distributed.tensor, which this exercise refuses",
           "uses_loss_parallel": "torch.distributed.tensor"}


def expected(folder: str) -> dict:
    return json.loads((FIXTURES / folder / "expected_scores.json").read_text())


def earned_points(folder: str, sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell of ``folder``'s part, and the failure message of each failing cell."""
    _lesson_imported()
    points, messages = {}, {}
    for grade_id, (names, check) in TEST_CELLS[folder].items():
        try:
            check(*(StudentFunction(name, sources=sources, prelude=PRELUDE) for name in names))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = POINTS[grade_id]
    return points, messages


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def test_points_tables_match_the_notebook_and_the_fixture_tables():
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in _cells() if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == NOTEBOOK_POINTS
    for folder, cells in TEST_CELLS.items():
        table = expected(folder)
        assert table["max_points"] == table["solution"] == {g: graded[g] for g in cells}, folder
        assert sorted(p.stem for p in (FIXTURES / folder).glob("*.py")) == sorted(table["fixtures"]), folder
        assert set(table["why"]) == set(table["fixtures"]), folder


def test_every_part_has_four_wrong_fixtures_and_a_refused_shortcut():
    for folder in TEST_CELLS:
        fixtures, full = expected(folder)["fixtures"], sum(expected(folder)["max_points"].values())
        assert sum(sum(points.values()) < full for points in fixtures.values()) >= 5, folder
        assert any(name in REFUSED for name in fixtures), folder


def test_the_grading_paragraphs_state_the_notebooks_points():
    text = " ".join(" ".join(cell.source for cell in _cells()).split())
    for points in (ch06.POINTS, ch06_vocab.POINTS):
        assert f"({sum(points.values())} points)" in text
    stated = {"test_shard_columns": "shard functions are graded on their own ({} + ",
              "test_column_parallel_linear": "({} for column,", "test_row_parallel_linear": "{} for row,",
              "test_tensor_parallel_mlp": "then the MLP ({}:",
              "test_tensor_parallel_mlp_traffic": "its traffic ({}:",
              "test_vocab_parallel_loss_values": "the loss ({})",
              "test_vocab_parallel_loss_gradients": "every rank's gradient ({})",
              "test_vocab_parallel_loss_traffic": "the traffic ({}):"}
    for grade_id, phrase in stated.items():
        assert phrase.format(POINTS[grade_id]) in text, (grade_id, phrase)


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(TEST_CELLS))
def test_the_solution_earns_full_marks(folder):
    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(folder, sources)
    assert points == expected(folder)["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("folder, fixture", CASES)
def test_each_wrong_submission_loses_exactly_its_points(folder, fixture):
    table = expected(folder)
    source = (FIXTURES / folder / f"{fixture}.py").read_text()
    # a right answer that warns (listed under "warns") holds only the cells it changes, over the solution's
    over = (list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
            if fixture in table.get("warns", ()) else [])
    points, messages = earned_points(folder, [*over, source])
    assert points == table["fixtures"][fixture], (
        f"{fixture} ({table['why'][fixture]}) earned {points}; failures:\n" + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert message.strip() and "hidden test seed" in message, (grade_id, message)
    if fixture in REFUSED:                    # every cell grading what it answers names the refusal
        answered = [g for g, (names, _) in TEST_CELLS[folder].items()
                    if all(f"def {n}(" in source or f"class {n}(" in source for n in names)]
        assert answered
        assert all(REFUSED[fixture] in messages[g] and "refuses" in messages[g] for g in answered)
    if fixture == "row_bias_every_rank":
        assert "output differs" in messages["test_row_parallel_linear"]
    if fixture == "missing_backward_all_reduce":
        assert "no collective at all" in messages["test_tensor_parallel_mlp_traffic"]
    if fixture == "no_value_error":
        assert "must raise ValueError" in messages["test_shard_columns"]
    if fixture == "shards_are_views":
        assert "one optimizer step on your shard changed the layer's weight" in messages["test_shard_rows"]
    if fixture == "ignores_upstream_gradient":
        assert "x the loss" in messages["test_vocab_parallel_loss_gradients"]
    if fixture == "gathers_the_logits":       # the drawing: both vocabularies' calls and the expected ones
        assert all(part in messages["test_vocab_parallel_loss_traffic"]
                   for part in ("all_gather of", "vocabulary", "expected: all-reduces"))
