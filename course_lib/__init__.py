"""Shared library of the distributed-training course.

Subpackages: ``sim`` (virtual-clock cluster simulator), ``real`` (real multi-process runs),
``viz`` (drawings and widgets), ``examples`` (one runnable entry point per strategy),
``grading`` (checks the exercises share). ``models`` holds the course's running examples.
``course_lib.dist``, the old name of ``real``, works with a warning until moved_modules.UNTIL.
"""

from course_lib import moved_modules

__version__ = "0.1.0"

moved_modules.install(__name__)
