"""Hidden test cells load the instructor's checks through course_lib.grading's ``instructor_checks``: from
the folders nbgrader_config.py names, or those a grading run passes in COURSE_HIDDEN_CHECKS."""

import sys

import pytest

from course_lib.grading import instructor_checks
from course_lib.grading.attempt import hidden_checks
from course_lib.grading.settings import CODE_ROOT, HIDDEN_CHECKS_ENV, read_settings


def test_the_course_config_names_the_instructor_folders():
    settings = read_settings(CODE_ROOT)
    assert settings.hidden_checks == (CODE_ROOT / "instructor" / "checks",)
    assert settings.registry == CODE_ROOT / "instructor" / "registry.py"
    assert settings.course_id == "distributed-training" and settings.cell_timeout == 120


def test_loads_the_instructors_checks_without_touching_sys_path():
    before = list(sys.path)
    module = instructor_checks("ch02_prediction")
    assert callable(module.check_predict_hidden) and module.POINTS["test_predict_gloo_all_reduce"] == 3
    assert sys.path == before and module.__name__ == f"{hidden_checks.PACKAGE}.ch02_prediction"
    assert instructor_checks("ch07_fsdp").checked_runs is instructor_checks("ch07_zero").checked_runs


def test_a_grading_run_points_the_loader_elsewhere(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("ANSWER = 42\n")
    monkeypatch.setenv(HIDDEN_CHECKS_ENV, str(tmp_path))
    monkeypatch.delitem(sys.modules, hidden_checks.PACKAGE, raising=False)
    assert instructor_checks("mine").ANSWER == 42
    assert hidden_checks.resolve_check("mine:ANSWER") == 42
    monkeypatch.delitem(sys.modules, f"{hidden_checks.PACKAGE}.mine")


def test_an_unknown_module_says_where_it_looked():
    with pytest.raises(ModuleNotFoundError, match="instructor/checks"):
        instructor_checks("no_such_chapter")


def test_grading_processes_import_this_course_lib():
    """Run from its own checkout, a grader's children import the same course_lib: no path to add."""
    from course_lib.grading.settings import code_root_for_fresh_pythons

    assert code_root_for_fresh_pythons() is None
