"""nbgrader on the course hub, for every server it starts (students', instructors' and formgrader's): the
exchange the hub set up, with one folder per course in it, and the course.

The hub passes COURSE_HUB_EXCHANGE and COURSE_HUB_COURSE_ID to those servers (jupyterhub_config.py);
users/nbgrader_config.py adds what only users' servers need.
"""

import os

c = get_config()  # noqa: F821  (injected by traitlets when nbgrader loads this file)

c.Exchange.root = os.environ["COURSE_HUB_EXCHANGE"]
c.Exchange.path_includes_course = True
c.CourseDirectory.course_id = os.environ["COURSE_HUB_COURSE_ID"]
