"""The course's registry plus the probe assignment's (see probe_course.py), for the grading tests."""

from autograde_tests.registry import CHECKS as COURSE_CHECKS
from course_lib.grading.judge import IsolatedCheck

CHECKS = {
    **COURSE_CHECKS,
    ("probe", "test_scale"): IsolatedCheck("autograde_tests.checks.probe:check_scale", ("scale",)),
    ("probe", "test_ring_pass"): IsolatedCheck("autograde_tests.checks.probe:check_ring_pass",
                                               ("ring_pass",)),
}
