"""Chapter 04's stage-split hidden checks on the reference solution and on each known-wrong submission (no
nbgrader).

Every fixture in autograde_tests/fixtures/stage_split/ must earn exactly the points its
expected_scores.json gives, test cell by test cell, run after the lesson's own import lines as the judge
runs it; the solution notebook's own cell earns full marks. The shortcut's feedback names what was refused.
"""

import functools
import json
from pathlib import Path

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt.student_function import StudentFunction
from course_lib.grading.autograder.fixtures import solution_sources
from course_lib.notebook_cells import lesson_imports

ch04 = instructor_checks("ch04_stage_split")

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "autograde_tests" / "fixtures" / "stage_split"
SOLUTION = ROOT / "solutions" / "04_model_parallel" / "04_model_parallel.ipynb"
RELEASE = ROOT / "notebooks" / "04_model_parallel" / "04_model_parallel.ipynb"
PRELUDE = lesson_imports(RELEASE)
TEST_CELLS = {
    "test_split_stages_balance": ch04.check_split_stages_balance_hidden,
    "test_split_stages_memory": ch04.check_split_stages_memory_hidden,
    "test_split_stages_fitting_step": ch04.check_split_stages_fitting_step_hidden,
    "test_split_stages_large": ch04.check_split_stages_large_hidden,
    "test_split_stages_real_run": ch04.check_split_stages_real_run_hidden,
}
TABLE = json.loads((FOLDER / "expected_scores.json").read_text())
REFUSED = {"uses_the_course_split": "import course_lib.sim.search.published",
           "reads_the_simulators_split": "split_layers from course_lib",
           "uses_the_checks_model": "import course_lib.grading.checks.ch04_stage_split"}


@functools.cache
def _lesson_imported() -> bool:
    """The lesson's imports, once in this process, so that every forked child inherits them."""
    exec(compile(PRELUDE, "<lesson imports, once in the parent>", "exec"), {})
    return True


def earned_points(sources: list[str]) -> tuple[dict, dict]:
    """Points per test cell, and the failure message of each failing cell."""
    _lesson_imported()
    points, messages = {}, {}
    for grade_id, check in TEST_CELLS.items():
        try:
            check(StudentFunction("split_stages", sources=sources, prelude=PRELUDE))
        except AssertionError as error:
            points[grade_id], messages[grade_id] = 0, str(error)
        else:
            points[grade_id] = ch04.POINTS[grade_id]
    return points, messages


def _graded_cells() -> dict:
    import nbformat

    cells = nbformat.read(str(SOLUTION), as_version=4).cells
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"]
            for c in cells if c.metadata.get("nbgrader", {}).get("grade")}


def test_points_tables_match_the_notebook_and_the_fixture_table():
    graded = _graded_cells()
    assert graded == ch04.POINTS == {g: graded[g] for g in TEST_CELLS}
    assert TABLE["max_points"] == TABLE["solution"] == ch04.POINTS
    assert sorted(p.stem for p in FOLDER.glob("*.py")) == sorted(TABLE["fixtures"])
    assert set(TABLE["why"]) == set(TABLE["fixtures"])
    assert set(TABLE["graded_through_nbgrader"]) <= set(TABLE["fixtures"])


def test_four_plausible_wrong_fixtures_and_a_refused_shortcut():
    full = sum(TABLE["max_points"].values())
    wrong = [n for n, points in TABLE["fixtures"].items() if sum(points.values()) < full and n not in REFUSED]
    assert len(wrong) >= 4 and set(REFUSED) <= set(TABLE["fixtures"])
    assert all(sum(TABLE["fixtures"][n].values()) == 0 for n in REFUSED)
    assert {"minmax_forward_plus_backward", "balances_forwards_only", "brute_force"} <= set(wrong)
    assert TABLE["fixtures"]["brute_force"] == {**ch04.POINTS, "test_split_stages_large": 0}
    assert len(TABLE["graded_through_nbgrader"]) <= 1


@pytest.mark.slow
def test_the_solution_earns_full_marks():
    import nbformat

    sources = list(solution_sources(nbformat.read(str(SOLUTION), as_version=4)).values())
    points, messages = earned_points(sources)
    assert points == TABLE["solution"], messages


# A search that tries every split never answers a large case (C(79, 15) splits), so its points and words do
# not depend on the large part's limit: its runs get 10 s instead of the checks' 40.
NEVER_ANSWERS_LARGE_S = {"brute_force": 10}


@pytest.mark.slow
@pytest.mark.parametrize("fixture", list(TABLE["fixtures"]))
def test_each_wrong_submission_loses_exactly_its_points(fixture, monkeypatch):
    if fixture in NEVER_ANSWERS_LARGE_S:
        monkeypatch.setattr(ch04, "LARGE_TIMEOUT_S", NEVER_ANSWERS_LARGE_S[fixture])
    source = (FOLDER / f"{fixture}.py").read_text()
    points, messages = earned_points([source])
    assert points == TABLE["fixtures"][fixture], (
        f"{fixture} ({TABLE['why'][fixture]}) earned {points}; failures:\n" + "\n\n".join(messages.values()))
    for grade_id, message in messages.items():
        assert message.strip() and "hidden test seed" in message, (grade_id, message)
    if fixture in REFUSED:
        assert all(REFUSED[fixture] in m and "refuses" in m for m in messages.values()), messages
    if fixture == "ignores_memory":          # the feedback shows the stage that overflows
        assert "OVER THE LIMIT" in messages["test_split_stages_memory"]
    if fixture == "brute_force":             # stopped at the large part's limit, the rest graded
        assert f"did not return within {ch04.LARGE_TIMEOUT_S:g} s" in messages["test_split_stages_large"]
    if fixture in ("minmax_forward_plus_backward", "balances_forwards_only"):   # a longer step is named
        assert "the best split that fits takes" in messages["test_split_stages_balance"]


def test_the_registry_holds_the_hidden_checks_rows():
    """The module's ROWS (what issue 37's registry collects) and instructor/registry.py's rows agree."""
    from course_lib.grading.autograder.judge import load_registry
    from course_lib.grading.settings import CODE_ROOT, read_settings

    registry = load_registry(read_settings(CODE_ROOT).registry)
    assert set(ch04.ROWS) == set(ch04.POINTS)
    for grade_id, (check, answers) in ch04.ROWS.items():
        row = registry[("04_model_parallel", grade_id)]
        assert row.check == f"ch04_stage_split:{check.__name__}" and tuple(row.functions) == answers
