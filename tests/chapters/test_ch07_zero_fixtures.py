"""Chapter 07's hidden checks on the reference solution and on each known-wrong answer (no nbgrader).

Every fixture in autograde_tests/fixtures/zero/ answers only the cells it gets wrong; with the solution's
other cells it must earn exactly the points expected_scores.json gives it, test cell by test cell.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder import fixtures
from course_lib.grading.autograder.judge import load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings

ch07_fsdp = instructor_checks("ch07_fsdp")
ch07_optimizer = instructor_checks("ch07_optimizer")
ch07_zero = instructor_checks("ch07_zero")
CHECKS = load_registry(read_settings(CODE_ROOT).registry)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "zero"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "07_zero_fsdp" / "07_zero_fsdp.ipynb"
POINTS = {**ch07_zero.POINTS, **ch07_optimizer.POINTS, **ch07_fsdp.POINTS}
MODULES = {"ShardedOptimizer": ch07_optimizer, "FSDP": ch07_fsdp}   # the other cells answer part 1


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def _solution() -> dict[str, str]:
    return fixtures.solution_sources(nbformat.read(str(SOLUTION), as_version=4))


def earned_points(answers: dict[str, str], grade_ids) -> tuple[dict, dict]:
    """Points per test cell (of ``grade_ids``), and the failure message of each failing cell."""
    sources = ["import torch.nn as nn", *answers.values()]
    points, messages = {}, {}
    for grade_id in grade_ids:
        entry = CHECKS[("07_zero_fsdp", grade_id)]
        module = next(m for m in (ch07_zero, ch07_optimizer, ch07_fsdp) if grade_id in m.POINTS)
        check = getattr(module, entry.check.split(":")[1])
        try:
            check(StudentFunction(entry.functions[0], sources=sources))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = POINTS[grade_id]
    return points, messages


def test_points_table_matches_the_notebook_the_registry_and_the_fixture_table():
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in _cells() if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == POINTS == EXPECTED["max_points"] == EXPECTED["solution"]
    assert {key for key in CHECKS if key[0] == "07_zero_fsdp"} == {("07_zero_fsdp", g) for g in graded}
    names = sorted(EXPECTED["fixtures"])
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == names == sorted(EXPECTED["why"])


def test_the_grading_paragraphs_state_the_notebooks_points():
    text = " ".join(" ".join(cell.source for cell in _cells()).split())
    stated = {"test_shard_parameters": "`shard_parameters` ({} points)", "test_gather_parameters":
              "`gather_parameters` ({})", "test_reduce_scatter_gradients": "`reduce_scatter_gradients` ({})",
              "test_sharded_optimizer_values": "Values ({} points)", "test_sharded_optimizer_memory":
              "Memory ({})", "test_sharded_optimizer_api": "Torch behaviour ({})",
              "test_fsdp_values": "Values ({} points): 3 SGD",
              "test_fsdp_memory": "Memory ({}): the parameter",
              "test_fsdp_traffic": "Traffic ({})", "test_fsdp_mixed_precision": "Mixed precision ({})"}
    for grade_id, phrase in stated.items():
        assert phrase.format(POINTS[grade_id]) in text, (grade_id, phrase)


def test_each_fixture_answers_only_cells_of_one_part():
    solution_cells = set(_solution())
    for name in EXPECTED["fixtures"]:
        answered = set(fixtures.load_py_fixture(FIXTURES / f"{name}.py"))
        assert answered and answered <= solution_cells, (name, answered)
        classes = answered & set(MODULES)
        assert not classes or answered == classes and len(classes) == 1, name


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(_solution(), POINTS)
    assert points == EXPECTED["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_wrong_answer_loses_exactly_its_points(fixture):
    """Only the checks of the fixture's own part run: the other part's cells are the solution's, whose
    full marks the test above shows."""
    answers = fixtures.load_py_fixture(FIXTURES / f"{fixture}.py")
    part = tuple(MODULES.get(next(iter(answers)), ch07_zero).POINTS)
    points, messages = earned_points({**_solution(), **answers}, part)
    expected = {grade_id: EXPECTED["fixtures"][fixture][grade_id] for grade_id in part}
    assert points == expected, (f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
                                + "\n\n".join(messages.values()))
    untouched = set(POINTS) - set(part)
    assert all(EXPECTED["fixtures"][fixture][g] == POINTS[g] for g in untouched), fixture
    for grade_id, message in messages.items():
        assert "hidden test seed" in message, (grade_id, message)
