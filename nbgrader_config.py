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
# `nbgrader collect` takes a submission's time from the file system, not from the name and timestamp.txt
# the student's own `nbgrader submit` wrote (docs/grading.md, "What a hostile student tries").
c.ExchangeFactory.collect = "course_lib.grading.autograder.exchange_collect.TrustedCollect"
# `nbgrader export` writes under grading/ (mode 0700, hidden from student code), never beside the course
# where a grading sandbox could read it (a grades.csv left at the root is hidden from it as well).
c.CsvExportPlugin.to = os.path.join(ROOT, "grading", "export.csv")

# Late submissions (docs/instructors.md, "Due dates and late submissions"): the due date is the assignment's
# in grading/gradebook.db (`nbgrader db assignment add ID --duedate=...`); a submission's time is when the
# exchange or the zip reached the grader. What being late costs, applied by `make grade` to the final
# scores: "none" (recorded, nothing taken off) or "zero"; or a plugin class of your own, e.g.
# c.AssignLatePenalties.plugin_class = "my_penalties.TenPercentPerDay"
c.LateSubmissionPlugin.penalty_method = "none"

# The grading run's settings (course_lib.grading.settings reads them; nbgrader ignores them): where the
# instructor-only hidden checks are (searched in order), the registry of the test cells the isolated judge
# re-checks, what student code must not see besides solutions/ and grading/ (the wrong-answer fixtures are
# near-solutions), and the plausible mistake `make grade-demo` adds to a chapter's demo class.
c.CourseGrading.hidden_checks = ["instructor/checks"]
c.CourseGrading.registry = "instructor/registry.py"
c.CourseGrading.hidden_from_students = ["autograde_tests/fixtures"]
c.CourseGrading.demo_fixtures = {"02_collectives": "autograde_tests/fixtures/ring/wrong_neighbour.py"}
# An assignment whose cells need longer than ExecutePreprocessor.timeout on your machines, e.g.
# c.CourseGrading.cell_timeouts = {"09_on_the_cluster": 300}
