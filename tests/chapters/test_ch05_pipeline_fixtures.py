"""Chapter 05's hidden checks on the reference solution and on each known-wrong submission (no nbgrader).

Every fixture in autograde_tests/fixtures/pipeline/ (1F1B and the pipeline stage) and .../zero_bubble/
(ZB-H1) must earn exactly the points its expected_scores.json gives, test cell by test cell, run after the
lesson's own import lines as the judge runs it; the solution notebook's own cells earn full marks. A
shortcut's feedback names what was refused.
"""

import functools
import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources
from course_lib.notebook_cells import lesson_imports

ch05 = instructor_checks("ch05_pipeline")
ch05_zb = instructor_checks("ch05_zero_bubble")

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "autograde_tests" / "fixtures"
SOLUTION = ROOT / "solutions" / "05_pipeline_parallel" / "05_pipeline_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "05_pipeline_parallel" / "05_pipeline_parallel.ipynb"
PRELUDE = lesson_imports(RELEASE)


@functools.cache
def _lesson_imported() -> bool:
    """The lesson's imports, once in this process, so that every forked child inherits them."""
    exec(compile(PRELUDE, "<lesson imports, once in the parent>", "exec"), {})
    return True

# Test cell -> (the function it grades, the hidden check it calls), as in the notebook, per fixture folder.
TEST_CELLS = {
    "pipeline": {
        "test_one_f_one_b_dependencies": ("one_f_one_b", ch05.check_one_f_one_b_dependencies_hidden),
        "test_one_f_one_b_memory": ("one_f_one_b", ch05.check_one_f_one_b_memory_hidden),
        "test_one_f_one_b_makespan": ("one_f_one_b", ch05.check_one_f_one_b_makespan_hidden),
        "test_run_stage_gpipe": ("run_stage", ch05.check_run_stage_gpipe_hidden),
        "test_run_stage_1f1b": ("run_stage", ch05.check_run_stage_1f1b_hidden),
        "test_run_stage_traffic": ("run_stage", ch05.check_run_stage_traffic_hidden),
        "test_run_stage_mismatch": ("run_stage", ch05.check_run_stage_mismatch_hidden),
    },
    "zero_bubble": {
        "test_zero_bubble_h1_dependencies": ("zero_bubble_h1",
                                             ch05_zb.check_zero_bubble_h1_dependencies_hidden),
        "test_zero_bubble_h1_memory": ("zero_bubble_h1", ch05_zb.check_zero_bubble_h1_memory_hidden),
        "test_zero_bubble_h1_makespan": ("zero_bubble_h1", ch05_zb.check_zero_bubble_h1_makespan_hidden),
    },
}
POINTS = {**ch05.POINTS, **ch05_zb.POINTS}
CASES = [(folder, name) for folder in TEST_CELLS
         for name in json.loads((FIXTURES / folder / "expected_scores.json").read_text())["fixtures"]]
# What each shortcut's feedback must name.
REFUSED = {"copies_the_course_generator": "pipeline_schedule from course_lib",
           "asks_torch_for_the_order": "torch.distributed.pipelining"}


def expected(folder: str) -> dict:
    return json.loads((FIXTURES / folder / "expected_scores.json").read_text())


def earned_points(folder: str, sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell of ``folder``'s part, and the failure message of each failing cell."""
    _lesson_imported()
    points, messages = {}, {}
    for grade_id, (name, check) in TEST_CELLS[folder].items():
        try:
            check(StudentFunction(name, sources=sources, prelude=PRELUDE))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = POINTS[grade_id]
    return points, messages


def _graded_cells() -> dict:
    import nbformat

    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
            for c in cells if c.metadata.get("nbgrader", {}).get("grade")}


def test_points_tables_match_the_notebook_and_the_fixture_tables():
    graded = _graded_cells()
    assert graded == POINTS
    for folder, cells in TEST_CELLS.items():
        table = expected(folder)
        assert table["max_points"] == table["solution"] == {g: graded[g] for g in cells}, folder
        assert sorted(p.stem for p in (FIXTURES / folder).glob("*.py")) == sorted(table["fixtures"]), folder
        assert set(table["why"]) == set(table["fixtures"]), folder
        assert set(table.get("graded_through_nbgrader", [])) <= set(table["fixtures"]), folder


def test_every_part_has_four_wrong_fixtures_and_a_refused_shortcut():
    for folder in TEST_CELLS:
        fixtures = expected(folder)["fixtures"]
        full = sum(expected(folder)["max_points"].values())
        assert sum(sum(points.values()) < full for points in fixtures.values()) >= 5, folder
        assert any(name in REFUSED for name in fixtures), folder


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(TEST_CELLS))
def test_the_solution_earns_full_marks(folder):
    import nbformat

    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(folder, sources)
    assert points == expected(folder)["solution"], messages


@pytest.mark.slow
@pytest.mark.parametrize("folder, fixture", CASES)
def test_each_wrong_submission_loses_exactly_its_points(folder, fixture):
    table = expected(folder)
    source = (FIXTURES / folder / f"{fixture}.py").read_text()
    points, messages = earned_points(folder, [source])
    assert points == table["fixtures"][fixture], (
        f"{fixture} ({table['why'][fixture]}) earned {points}; failures:\n" + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert message.strip() and "hidden test seed" in message, (grade_id, message)
    if fixture in REFUSED:                    # every cell of the function it answers names the refusal
        answered = [g for g, (name, _) in TEST_CELLS[folder].items() if f"def {name}(" in source]
        assert answered
        assert all(REFUSED[fixture] in messages[g] and "refuses" in messages[g] for g in answered)
    if fixture == "w_right_after_its_b":      # the drawing: the student's timeline above ZB-H1's length
        assert "ZB-H1 |" in messages["test_zero_bubble_h1_makespan"] and "ends here" in messages[
            "test_zero_bubble_h1_makespan"]
