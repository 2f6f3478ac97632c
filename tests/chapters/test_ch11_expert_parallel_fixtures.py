"""Chapter 11's hidden checks on the reference solution and on each known-wrong submission (no nbgrader).

Every fixture in autograde_tests/fixtures/expert_parallel/ must earn exactly the points its
expected_scores.json gives, test cell by test cell, with the failure the feedback must name; the solution
notebook's own answer cells earn full marks. (counts_not_exchanged also goes through nbgrader, in
autograde_tests/test_grading_chapters.py.)
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.refusals import LESSON_IMPORTS
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources
from course_lib.notebook_cells import lesson_imports

ch11 = instructor_checks("ch11_expert_parallel")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "expert_parallel"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
# The dispatch's fixtures (the DeepSeek-V3 part's, deepseek_*, and every fixture's cells of that part:
# test_ch11_deepseek_moe_fixtures.py).
OWN = sorted(name for name in EXPECTED["fixtures"] if not name.startswith("deepseek_"))
SOLUTION = ROOT / "solutions" / "11_expert_parallel" / "11_expert_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "11_expert_parallel" / "11_expert_parallel.ipynb"
# Answer cells run after the lesson's own import lines, as the judge runs them (the solution uses F); like
# the judge, import them once here, so that every forked rank finds them imported.
PRELUDE = lesson_imports(nbformat.read(str(RELEASE), as_version=4))
exec(compile(PRELUDE, LESSON_IMPORTS, "exec"), {"__name__": "lesson_imports"})

TEST_CELLS = {
    "test_expert_parallel_values": ch11.check_expert_parallel_values_hidden,
    "test_expert_parallel_gradients": ch11.check_expert_parallel_gradients_hidden,
    "test_expert_parallel_traffic": ch11.check_expert_parallel_traffic_hidden,
    "test_expert_parallel_capacity": ch11.check_expert_parallel_capacity_hidden,
}
# What the feedback of a fixture must say, per test cell it fails.
MESSAGES = {
    "gates_not_renormalised": {"test_expert_parallel_values": "output differs from the one-process MoE"},
    "combine_in_dispatch_order": {"test_expert_parallel_values": "output differs from the one-process MoE",
                                  "test_expert_parallel_gradients": "differs from the one-process MoE"},
    "backward_not_reversed": {"test_expert_parallel_gradients": "Split sizes doesn't match",
                              "test_expert_parallel_traffic": "Split sizes doesn't match"},
    "counts_not_exchanged": {"test_expert_parallel_values": "Exchange the counts first"},
    "broadcast_every_token": {"test_expert_parallel_traffic": "['all_gather', 'all_gather', 'all_gather', "
                                                              "'all_reduce']"},
    "capacity_drops_lowest_gates": {"test_expert_parallel_capacity": "capacity_factor="},
    "capacity_under_no_grad": {"test_expert_parallel_capacity": "no logits.grad (the router's gradient)"},
    "shortcut_functional_all_to_all": {cell: "all_to_all_single_autograd from "
                                             "torch.distributed._functional_collectives, which this exercise "
                                             "refuses" for cell in TEST_CELLS},
    "shortcut_course_gates": {cell: "ran gate_matrix from course_lib, which this exercise refuses: the "
                                    "answer may not use course_lib" for cell in TEST_CELLS},
    "warns_but_right": {},   # a right answer that warns on every rank: full marks (issue 40)
}


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, check in TEST_CELLS.items():
        try:
            check(StudentFunction("expert_parallel_forward", sources=sources, prelude=PRELUDE))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch11.POINTS[grade_id]
    return points, messages


def _cells():
    return nbformat.read(str(SOLUTION), as_version=4).cells


def test_points_table_matches_the_notebook_and_the_fixture_table():
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in _cells() if c.metadata.get("nbgrader", {}).get("grade")
              and c.metadata["nbgrader"]["grade_id"] in TEST_CELLS}
    assert graded == ch11.POINTS == {g: EXPECTED["max_points"][g] for g in TEST_CELLS} \
        == {g: EXPECTED["solution"][g] for g in TEST_CELLS}
    assert set(TEST_CELLS) == set(graded)
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])
    assert OWN == sorted(MESSAGES)
    assert set(EXPECTED["graded_through_nbgrader"]) <= set(EXPECTED["fixtures"])


def test_the_grading_paragraph_states_the_notebooks_points():
    text = " ".join(" ".join(cell.source for cell in _cells()).split())
    assert f"({sum(ch11.POINTS.values())} points)" in text
    for grade_id, part in (("test_expert_parallel_values", "values"), ("test_expert_parallel_gradients",
                           "gradients"), ("test_expert_parallel_traffic", "traffic"),
                           ("test_expert_parallel_capacity", "capacity")):
        assert f"{part} ({ch11.POINTS[grade_id]})" in text, (grade_id, part)


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(sources)
    assert points == {g: EXPECTED["solution"][g] for g in TEST_CELLS}, messages


@pytest.mark.slow
@pytest.mark.parametrize("fixture", OWN)
def test_each_wrong_submission_loses_exactly_its_points(fixture):
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()])
    assert points == {g: EXPECTED["fixtures"][fixture][g] for g in TEST_CELLS}, (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert "hidden test seed" in message, (grade_id, message)
    for grade_id, words in MESSAGES[fixture].items():   # a hang and a killed rank word it differently
        assert words.lower() in messages[grade_id].lower(), (grade_id, messages[grade_id])
