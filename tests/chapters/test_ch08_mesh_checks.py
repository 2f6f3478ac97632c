"""Chapter 08's mapping checks (visible and hidden) on the solution notebook's answer and on each wrong one.

Without nbgrader: every fixture in autograde_tests/fixtures/mesh/ not sent through the grading pipeline
must earn exactly the points expected_scores.json gives it, cell by cell (a cell's points need its visible
and its hidden check); the shortcut's feedback names what was refused. The checks on real ranks are the
slow ones.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import load_py_fixture, solution_sources
from course_lib.grading.checks.ch08_mesh import nodes as node_checks
from course_lib.grading.checks.ch08_mesh import visible as mesh_checks

ch08_mesh = instructor_checks("ch08_mesh")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "mesh"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "08_nd_parallelism" / "08_nd_parallelism.ipynb"
FUNCTIONS = ("mesh_coordinates", "mesh_groups", "groups_inside_node")
# Test cell -> (the functions it grades, its visible check, its hidden check), as in the notebook.
CELLS = {
    "test_mesh_coordinates": (FUNCTIONS[:1], mesh_checks.check_mesh_coordinates,
                              ch08_mesh.check_mesh_coordinates_hidden),
    "test_mesh_groups": (FUNCTIONS[1:2], mesh_checks.check_mesh_groups, ch08_mesh.check_mesh_groups_hidden),
    "test_mesh_matches_torch": (FUNCTIONS[:2], mesh_checks.check_mesh_matches_torch,
                                ch08_mesh.check_mesh_matches_torch_hidden),
    "test_groups_inside_node": (FUNCTIONS[2:], node_checks.check_groups_inside_node,
                                ch08_mesh.check_groups_inside_node_hidden),
    "test_mesh_bad_shapes": (FUNCTIONS, node_checks.check_mesh_bad_shapes,
                             ch08_mesh.check_mesh_bad_shapes_hidden),
}
CHECKED_HERE = ["solution", *sorted(set(EXPECTED["fixtures"]) - set(EXPECTED["graded_through_nbgrader"]))]


def _answers(name: str) -> dict:
    """A fixture's answers; a warning fixture holds only what it changes, over the reference's others."""
    sources = solution_sources(nbformat.read(str(SOLUTION), as_version=4))
    solution = {f: sources[f] for f in FUNCTIONS}
    if name == "solution":
        return solution
    own = load_py_fixture(FIXTURES / f"{name}.py")
    return {**solution, **own} if name in EXPECTED.get("warns", ()) else own


def _outcome(check, functions) -> str | None:
    try:
        check(*functions)
    except AssertionError as error:
        return str(error)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", CHECKED_HERE)
def test_each_answer_earns_exactly_its_points(name):
    answers = _answers(name)
    expected = EXPECTED["solution"] if name == "solution" else EXPECTED["fixtures"][name]
    sources = ("import math", *dict.fromkeys(answers.values()))
    points, failures = {}, {}
    for cell, (names, visible, hidden) in CELLS.items():
        functions = [StudentFunction(f, sources=sources) for f in names]
        failed = [m for m in (_outcome(visible, functions), _outcome(hidden, functions)) if m]
        points[cell] = 0 if failed else EXPECTED["max_points"][cell]
        failures[cell] = failed
    assert points == expected, (name, {c: f[0][:600] for c, f in failures.items() if f})


@pytest.mark.slow
def test_the_shortcut_is_refused_and_the_feedback_names_torchs_device_mesh():
    answers = _answers("device_mesh_mapping")
    functions = [StudentFunction(f, sources=("import math", *answers.values())) for f in FUNCTIONS[:1]]
    message = _outcome(mesh_checks.check_mesh_coordinates, functions)
    assert message and "which this exercise refuses" in message
    assert "(torch.distributed.device_mesh)" in message


def test_every_fixture_answers_the_three_functions_with_a_placement_argument():
    """(A right answer that warns, listed under "warns", holds only the functions it changes, the
    capstone's too: its other cells are the solution's.)"""
    for name in EXPECTED["fixtures"]:
        answers = _answers(name)
        if name in EXPECTED.get("warns", ()):
            answers = {f: source for f, source in answers.items() if f in FUNCTIONS}
            assert answers and all("placement=None" in source for source in answers.values()), name
            continue
        assert set(answers) == set(FUNCTIONS), name
        assert all("placement=None" in answers[f] for f in FUNCTIONS), name


def test_hidden_enumeration_is_torch_row_major_by_default_and_follows_a_placement():
    layout = ch08_mesh.enumerate_layout((2, 4), ("dp", "tp"))
    assert layout[6] == {"coordinates": {"dp": 1, "tp": 2}, "groups": {"dp": [2, 6], "tp": [4, 5, 6, 7]}}
    placed = ch08_mesh.enumerate_layout((2, 4), ("dp", "tp"), ("dp", "tp"))
    assert [r["coordinates"] for r in placed] == mesh_checks.PLACED_COORDINATES
    assert [r["groups"] for r in placed] == mesh_checks.PLACED_GROUPS
    assert ch08_mesh.rank_tensor((2, 4), ("dp", "tp"), ("dp", "tp")).tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_visible_checks_hold_no_layout_code_only_data_and_torch():
    source = Path(mesh_checks.__file__).read_text() + Path(node_checks.__file__).read_text()
    assert "divmod" not in source and "unravel" not in source and "strides" not in source


def test_points_match_the_notebook():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    capstone = json.loads((ROOT / "autograde_tests" / "fixtures" / "capstone" / "expected_scores.json")
                          .read_text())
    assert EXPECTED["max_points"] == EXPECTED["solution"] and capstone["max_points"] == capstone["solution"]
    assert graded == {**EXPECTED["max_points"], **capstone["max_points"]}
