"""Hidden test cells load the instructor's checks through course_lib.grading.hidden, from the repository."""

import pytest

from course_lib.grading.hidden import instructor_checks


def test_loads_the_instructors_checks_beside_course_lib():
    module = instructor_checks("ch02_predict")
    assert callable(module.check_predict_hidden) and module.POINTS["test_predict_gloo_all_reduce"] == 3


def test_an_unknown_module_says_where_it_looked():
    with pytest.raises(ModuleNotFoundError, match="autograde_tests/checks"):
        instructor_checks("no_such_chapter")
