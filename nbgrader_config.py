"""nbgrader configuration: solutions/ is the instructor source, notebooks/ the student release.

Everything a grading run produces (submissions, autograded copies, feedback, the gradebook) lives
under grading/, which git ignores.
"""

import os

c = get_config()  # noqa: F821  (injected by traitlets when nbgrader loads this file)

ROOT = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.root = ROOT
c.CourseDirectory.course_id = "distributed-training"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = os.path.join("grading", "submitted")
c.CourseDirectory.autograded_directory = os.path.join("grading", "autograded")
c.CourseDirectory.feedback_directory = os.path.join("grading", "feedback")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(ROOT, "grading", "gradebook.db")
# Files a chapter folder may carry next to its notebook (data, images) are released too.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".*"]

# A student's cell that loops forever must not stop the grading of the class.
c.ExecutePreprocessor.timeout = 120
c.ExecutePreprocessor.interrupt_on_timeout = True
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Where the grader finds the instructor-only hidden checks (searched in order) and the registry of the
# test cells the isolated judge re-checks (course_lib.grading.settings reads these; nbgrader ignores them).
c.CourseGrading.hidden_checks = ["instructor/checks"]
c.CourseGrading.registry = "instructor/registry.py"
