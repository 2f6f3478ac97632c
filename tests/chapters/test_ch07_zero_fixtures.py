"""Chapter 07's hidden checks on the reference solution and on each known-wrong answer (no nbgrader).

Every fixture in autograde_tests/fixtures/zero/ answers only the cells it gets wrong; with the solution's
other cells it must earn exactly the points expected_scores.json gives it, test cell by test cell. Those
listed under graded_through_nbgrader go through the whole grading pipeline instead
(autograde_tests/test_grading_chapters.py); the shortcut fixtures' feedback must name what was refused.
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
from course_lib.notebook_cells import lesson_imports

ch07_fsdp = instructor_checks("ch07_fsdp")
ch07_optimizer = instructor_checks("ch07_optimizer")
ch07_zero = instructor_checks("ch07_zero")
CHECKS = load_registry(read_settings(CODE_ROOT).registry)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "zero"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "07_zero_fsdp" / "07_zero_fsdp.ipynb"
RELEASE = ROOT / "notebooks" / "07_zero_fsdp" / "07_zero_fsdp.ipynb"
POINTS = {**ch07_zero.POINTS, **ch07_optimizer.POINTS, **ch07_fsdp.POINTS}
MODULES = {"ShardedOptimizer": ch07_optimizer, "FSDP": ch07_fsdp}   # the other cells answer part 1
CHECKED_HERE = sorted(set(EXPECTED["fixtures"]) - set(EXPECTED["graded_through_nbgrader"]))


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def _solution() -> dict[str, str]:
    return fixtures.solution_sources(nbformat.read(str(SOLUTION), as_version=4))


def earned_points(answers: dict[str, str], grade_ids) -> tuple[dict, dict]:
    """Points per test cell (of ``grade_ids``), and the failure message of each failing cell; the answers
    run after the release's own import lines, as the judge runs them."""
    prelude = lesson_imports(nbformat.read(str(RELEASE), as_version=4))
    points, messages = {}, {}
    for grade_id in grade_ids:
        entry = CHECKS[("07_zero_fsdp", grade_id)]
        module = next(m for m in (ch07_zero, ch07_optimizer, ch07_fsdp) if grade_id in m.POINTS)
        check = getattr(module, entry.check.split(":")[1])
        try:
            check(StudentFunction(entry.functions[0], sources=list(answers.values()), prelude=prelude))
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
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(names) and set(EXPECTED["refused"]) <= set(names)


def test_every_part_has_a_shortcut_fixture_scoring_below_full_marks():
    for module in (ch07_zero, ch07_optimizer, ch07_fsdp):
        shortcuts = [name for name in EXPECTED["refused"]
                     if any(EXPECTED["fixtures"][name][g] < points for g, points in module.POINTS.items())]
        assert shortcuts, module.__name__


def test_the_grading_paragraphs_state_the_notebooks_points():
    text = " ".join(" ".join(cell.source for cell in _cells()).split())
    stated = {"test_shard_parameters": "`shard_parameters` ({} points)", "test_gather_parameters":
              "`gather_parameters` ({})", "test_reduce_scatter_gradients": "`reduce_scatter_gradients` ({})",
              "test_sharded_optimizer_values": "Values ({} points): 10 AdamW",
              "test_sharded_optimizer_memory": "Memory and traffic ({})",
              "test_sharded_optimizer_api": "Torch behaviour ({})",
              "test_fsdp_values": "Values ({} points): 3 SGD",
              "test_fsdp_memory": "Memory ({}): what your process really holds",
              "test_fsdp_traffic": "Traffic ({})", "test_fsdp_mixed_precision": "Mixed precision ({})"}
    for grade_id, phrase in stated.items():
        assert phrase.format(POINTS[grade_id]) in text, (grade_id, phrase)


def test_each_fixture_answers_only_cells_of_one_part():
    """A wrong fixture answers one part; a right answer that makes torch warn (listed under "warns") may
    answer every part: one submission carries the chapter's warnings through nbgrader."""
    solution_cells = set(_solution())
    for name in EXPECTED["fixtures"]:
        answered = set(fixtures.load_py_fixture(FIXTURES / f"{name}.py"))
        assert answered and answered <= solution_cells, (name, answered)
        if name in EXPECTED.get("warns", ()):
            assert EXPECTED["fixtures"][name] == EXPECTED["solution"], name
            continue
        classes = answered & set(MODULES)
        assert not classes or answered == classes and len(classes) == 1, name


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(_solution(), POINTS)
    assert points == EXPECTED["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", CHECKED_HERE)
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
    refused = EXPECTED["refused"].get(fixture)
    for grade_id, message in messages.items():
        if refused:   # the feedback names what was refused, and why
            named = f"which this exercise refuses: it is PyTorch's own implementation ({refused})"
            assert named in message, (grade_id, message)
        else:
            assert "hidden test seed" in message, (grade_id, message)
