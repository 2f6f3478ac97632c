"""Chapter 08's checks (visible and hidden) on the solution notebook's answer and on each wrong mapping.

Without nbgrader: every fixture in autograde_tests/fixtures/mesh/ must pass or fail each check exactly as
expected_scores.json says; the checks on real ranks (init_device_mesh) are the slow ones.
"""

import json
from pathlib import Path

import nbformat
import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import load_py_fixture, solution_sources
from course_lib.grading.checks import ch08_mesh as mesh_checks

ch08_mesh = instructor_checks("ch08_mesh")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "mesh"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "08_nd_parallelism" / "08_nd_parallelism.ipynb"
FUNCTIONS = ("mesh_coordinates", "mesh_groups", "groups_inside_node")
# Test cell -> (the functions it grades, its visible check, its hidden check), as in the notebook.
PURE_CELLS = {
    "test_mesh_coordinates": (FUNCTIONS[:1], mesh_checks.check_mesh_coordinates,
                              ch08_mesh.check_mesh_coordinates_hidden),
    "test_mesh_groups": (FUNCTIONS[1:2], mesh_checks.check_mesh_groups, ch08_mesh.check_mesh_groups_hidden),
    "test_groups_inside_node": (FUNCTIONS[2:], mesh_checks.check_groups_inside_node,
                                ch08_mesh.check_groups_inside_node_hidden),
    "test_mesh_bad_shapes": (FUNCTIONS, mesh_checks.check_mesh_bad_shapes,
                             ch08_mesh.check_mesh_bad_shapes_hidden),
}


def _solution() -> dict:
    sources = solution_sources(nbformat.read(str(SOLUTION), as_version=4))
    return {name: sources[name] for name in FUNCTIONS}


def _answers(name: str) -> dict:
    return _solution() if name == "solution" else load_py_fixture(FIXTURES / f"{name}.py")


def _in_kernel(answers: dict) -> dict:
    namespace: dict = {}
    exec("import math\n" + "\n\n".join(answers[f] for f in FUNCTIONS), namespace)
    return {f: namespace[f] for f in FUNCTIONS}


def _passes(check, functions) -> bool:
    try:
        check(*functions)
    except AssertionError:
        return False
    return True


CASES = ["solution", *EXPECTED["fixtures"]]


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_pure_checks_score_each_answer_as_expected(name):
    answers = _answers(name)
    expected = EXPECTED["solution"] if name == "solution" else EXPECTED["fixtures"][name]
    kernel = _in_kernel(answers)
    isolated = {f: StudentFunction(f, sources=tuple(answers[f] for f in FUNCTIONS)) for f in FUNCTIONS}
    for cell, (names, visible, hidden) in PURE_CELLS.items():
        want = expected[cell] > 0
        assert _passes(visible, [kernel[f] for f in names]) == want, f"{name}: visible {cell}"
        assert _passes(hidden, [isolated[f] for f in names]) == want, f"{name}: hidden {cell}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["solution", "size_one_empty_group", "dims_swapped"])
def test_real_rank_check_agrees_with_init_device_mesh(name):
    answers = _answers(name)
    expected = EXPECTED["solution"] if name == "solution" else EXPECTED["fixtures"][name]
    isolated = [StudentFunction(f, sources=tuple(answers[f] for f in FUNCTIONS)) for f in FUNCTIONS[:2]]
    want = expected["test_mesh_matches_torch"] > 0
    assert _passes(ch08_mesh.check_mesh_matches_torch_hidden, isolated) == want


def test_shortcuts_through_torch_are_refused():
    def mesh_coordinates(mesh_shape, dim_names, rank):
        from torch.distributed.device_mesh import init_device_mesh
        return init_device_mesh

    with pytest.raises(AssertionError, match="init_device_mesh"):
        mesh_checks.refuse_shortcuts(mesh_coordinates)


def test_hidden_enumeration_is_torch_row_major_order():
    layout = ch08_mesh.enumerate_layout((2, 4), ("dp", "tp"))
    assert layout[6] == {"coordinates": {"dp": 1, "tp": 2}, "groups": {"dp": [2, 6], "tp": [4, 5, 6, 7]}}


def test_points_match_the_notebook():
    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    capstone = json.loads((ROOT / "autograde_tests" / "fixtures" / "capstone" / "expected_scores.json")
                          .read_text())
    assert EXPECTED["max_points"] == EXPECTED["solution"] and capstone["max_points"] == capstone["solution"]
    assert graded == {**EXPECTED["max_points"], **capstone["max_points"]}
