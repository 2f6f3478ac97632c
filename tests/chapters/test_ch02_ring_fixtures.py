"""Chapter 02's hidden checks on the reference solution and on each known-wrong ring (no nbgrader).

Every fixture in autograde_tests/fixtures/ring/ must earn exactly the points expected_scores.json gives
it, test cell by test cell; the solution notebook's own cells must earn full marks.
"""

import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.notebook_cells import sources_by_id

ch02_prediction = instructor_checks("ch02_prediction")
ch02_ring = instructor_checks("ch02_ring")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures" / "ring"
EXPECTED = json.loads((FIXTURES / "expected_scores.json").read_text())
SOLUTION = ROOT / "solutions" / "02_collectives" / "02_collectives.ipynb"

# Test cell -> (the function it grades, the hidden check it calls), as in the notebook.
TEST_CELLS = {
    "test_ring_reduce_scatter": ("ring_reduce_scatter", ch02_ring.check_ring_reduce_scatter_hidden),
    "test_ring_all_gather": ("ring_all_gather", ch02_ring.check_ring_all_gather_hidden),
    "test_ring_all_reduce_values": ("ring_all_reduce", ch02_ring.check_ring_all_reduce_hidden),
    "test_ring_all_reduce_traffic": ("ring_all_reduce", ch02_ring.check_ring_all_reduce_traffic_hidden),
    "test_ring_all_reduce_no_collectives": ("ring_all_reduce",
                                            ch02_ring.check_ring_all_reduce_no_collectives_hidden),
    "test_ring_all_reduce_no_deadlock": ("ring_all_reduce",
                                         ch02_ring.check_ring_all_reduce_no_deadlock_hidden),
    "test_predict_gloo_all_reduce": ("predict_gloo_all_reduce", ch02_prediction.check_predict_hidden),
    "test_predict_gloo_own_formula": ("predict_gloo_all_reduce", ch02_prediction.check_predict_own_formula),
}
POINTS = {**ch02_ring.POINTS, **ch02_prediction.POINTS}


def solution_sources() -> list[str]:
    """The solution notebook's ring cells and its prediction cell."""
    import nbformat

    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    predict = [c.source for c in cells
               if c.metadata.get("nbgrader", {}).get("grade_id") == "predict_gloo_all_reduce"]
    return sources_by_id(SOLUTION, ch02_ring.EXERCISE_CELLS) + predict


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    points, messages = {}, {}
    for grade_id, (name, check) in TEST_CELLS.items():
        try:
            check(StudentFunction(name, sources=sources))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = POINTS[grade_id]
    return points, messages


def test_points_table_matches_the_notebook_and_the_fixture_table():
    import nbformat

    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
              for c in cells if c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == POINTS == EXPECTED["max_points"]
    assert set(TEST_CELLS) == set(graded)
    assert sorted(p.stem for p in FIXTURES.glob("*.py")) == sorted(EXPECTED["fixtures"])


def test_the_grading_paragraph_states_the_notebooks_points():
    import nbformat

    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    text = " ".join(" ".join(cell.source for cell in cells).split())
    stated = {"test_ring_reduce_scatter": "reduce-scatter ({} points)",
              "test_ring_all_gather": "all-gather ({})",
              "test_ring_all_reduce_values": "in place ({})",
              "test_ring_all_reduce_traffic": "traffic ({}:",
              "test_ring_all_reduce_no_collectives": "using no collective ({})",
              "test_ring_all_reduce_no_deadlock": "deadlocking ({})"}
    for grade_id, phrase in stated.items():
        assert phrase.format(ch02_ring.POINTS[grade_id]) in text, (grade_id, phrase)


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    points, messages = earned_points(solution_sources())
    assert points == EXPECTED["solution"], messages


# A ring that deadlocks never finishes, so its points and words do not depend on the timeout: its runs get
# 6 s instead of the checks' 10 (enough for the ranks to block in dist.send, which the words show).
DEADLOCKS_S = {"deadlocks": 6}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", sorted(EXPECTED["fixtures"]))
def test_each_wrong_ring_loses_exactly_its_points(fixture, monkeypatch):
    if fixture in DEADLOCKS_S:
        monkeypatch.setattr(ch02_ring, "TIMEOUT_S", DEADLOCKS_S[fixture])
    points, messages = earned_points([(FIXTURES / f"{fixture}.py").read_text()])
    assert points == EXPECTED["fixtures"][fixture], (
        f"{fixture} ({EXPECTED['why'][fixture]}) earned {points}; failures:\n"
        + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert message.strip() and ("hidden test seed" in message or grade_id not in ch02_ring.POINTS), (
            grade_id, message)
    if fixture == "deadlocks":
        assert "deadlock" in messages["test_ring_all_gather"]
        assert "dist.send" in messages["test_ring_all_gather"]
    if fixture == "uses_all_reduce":
        assert "dist.all_reduce is not allowed" in messages["test_ring_all_reduce_values"]
    if fixture == "not_in_place":
        assert "in place" in messages["test_ring_all_reduce_values"]
    if fixture == "wrong_neighbour":
        assert "right neighbour" in messages["test_ring_all_reduce_traffic"]
        assert "textbook ring" in messages["test_predict_gloo_all_reduce"]
    if fixture == "uses_all_reduce":
        assert "import course_lib.sim" in messages["test_predict_gloo_own_formula"]
        assert "refuses" in messages["test_predict_gloo_all_reduce"]
    if fixture == "one_segment_in_flight":   # the old reference answer, each segment waiting for the last
        for cell in ("test_predict_gloo_all_reduce", "test_predict_gloo_own_formula"):
            assert "one segment in flight" in messages[cell], messages[cell]
    if fixture == "reads_course_schedule":
        for cell in ("test_ring_reduce_scatter", "test_ring_all_gather", "test_ring_all_reduce_values"):
            assert "refuses" in messages[cell] and "course_lib" in messages[cell], messages[cell]


def test_the_cell_reader_reads_the_exercise_cells_and_names_a_wrong_notebook(tmp_path):
    import nbformat

    sources = sources_by_id(SOLUTION, ch02_ring.EXERCISE_CELLS, answers_only=True)
    assert [s.split("(")[0] for s in sources] == [f"def {name}" for name in ch02_ring.EXERCISE_CELLS]
    other = tmp_path / "other.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), other)
    with pytest.raises(KeyError, match="ring_reduce_scatter"):
        sources_by_id(other, ch02_ring.EXERCISE_CELLS)
