"""Registry of the probe assignment (see probe_course.py): the isolated judge's view of its tests."""

from course_lib.grading.judge import IsolatedCheck

CHECKS = {
    ("probe", "test_scale"): IsolatedCheck("autograde_tests.checks.probe:check_scale", ("scale",)),
    ("probe", "test_ring_pass"): IsolatedCheck("autograde_tests.checks.probe:check_ring_pass",
                                               ("ring_pass",)),
}
