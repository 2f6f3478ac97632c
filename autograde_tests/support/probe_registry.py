"""The course's registry plus the probe assignment's (see probe_course.py), for the grading tests.

Loaded by path, like the course's own registry: the probe's check sits in hidden_checks/ beside this file.
A ChainMap keeps the course's registry lazy: each judge imports only its own chapter's hidden checks, as
under `make grade` (merging the two into one dict imported all twenty exercises, about 2.5 s, in every
judge of the shared grading run).
"""

from collections import ChainMap

from course_lib.grading.autograder.judge import IsolatedCheck, load_registry
from course_lib.grading.settings import CODE_ROOT, read_settings

PROBE_CHECKS = {
    ("probe", "test_scale"): IsolatedCheck("probe:check_scale", ("scale",)),
    ("probe", "test_ring_pass"): IsolatedCheck("probe:check_ring_pass", ("ring_pass",)),
}
CHECKS = ChainMap(PROBE_CHECKS, load_registry(read_settings(CODE_ROOT).registry))
