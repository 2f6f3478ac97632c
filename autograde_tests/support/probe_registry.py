"""The course's registry plus the probe assignment's (see probe_course.py), for the grading tests.

Loaded by path, like the course's own registry: the probe's check sits in hidden_checks/ beside this file.
"""

from course_lib.grading.autograder.judge import IsolatedCheck, load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings

CHECKS = {
    **load_registry(read_settings(CODE_ROOT).registry),
    ("probe", "test_scale"): IsolatedCheck("probe:check_scale", ("scale",)),
    ("probe", "test_ring_pass"): IsolatedCheck("probe:check_ring_pass", ("ring_pass",)),
}
