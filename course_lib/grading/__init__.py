"""Grading, by role: ``checks`` (each chapter's visible checks, what notebooks import), ``attempt`` (how a
check runs student code), ``sandbox`` (the cage), ``autograder`` (``make grade``), ``slurm`` (the array).

Hidden test cells call ``instructor_checks("chNN_...")``. Import paths from before this layout keep
working for one term (course_lib/moved_modules.py).
"""

from course_lib import moved_modules
from course_lib.grading.attempt.hidden_checks import instructor_checks

moved_modules.install(__name__)

__all__ = ["instructor_checks"]
