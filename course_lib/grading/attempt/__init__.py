"""How a check runs a student's code: on real ranks or in one isolated child, from a function or from the
notebook's answer cells (read by course_lib.notebook_cells), and how instructor-only hidden checks are found.
"""

from course_lib import moved_modules

moved_modules.install(__name__)
