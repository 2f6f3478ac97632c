"""The late penalty of one submission in the class gradebook, as the course's nbgrader_config.py says.

nbgrader assigns it while ``nbgrader autograde`` runs (its ``AssignLatePenalties`` preprocessor, with the
plugin ``c.AssignLatePenalties.plugin_class``, by default ``LateSubmissionPlugin`` whose
``c.LateSubmissionPlugin.penalty_method`` is 'none' or 'zero'). A grading run autogrades each student in
a private course with a config of its own and then lowers scores (the isolated re-check), so the penalty
is assigned here instead, by that same preprocessor, on the class gradebook, after the final scores are
merged: it sees the assignment's due date and the student's extension there
(``SubmittedAssignment.duedate``), and the score the student actually gets.

The policy is read from the ``nbgrader_config.py`` of the course the gradebook belongs to
(``<course>/grading/gradebook.db``): the file every nbgrader command run in that course reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

from nbformat.v4 import new_notebook
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import AssignLatePenalties
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

CONFIG_FILE = "nbgrader_config.py"
LOG = logging.getLogger(__name__)   # nbgrader's "N seconds late" lines stay out of the grader's output
_loaded: dict[Path, tuple[int, Config]] = {}


def course_config_file(db_url: str) -> Path | None:
    """``<course>/nbgrader_config.py`` for a gradebook at ``<course>/grading/gradebook.db``; None for a
    gradebook elsewhere (a test's, a private course's): the folder above it is no course."""
    prefix = "sqlite:///"
    database = Path(db_url[len(prefix):]) if db_url.startswith(prefix) else None
    if database is None or database.parent.name != "grading":
        return None
    return database.parent.parent / CONFIG_FILE


def course_config(db_url: str) -> Config:
    """The course's nbgrader config (empty where it has none: nbgrader's default, no penalty), read again
    only when the file changes."""
    path = course_config_file(db_url)
    if path is None or not path.is_file():
        return Config()
    stamp = path.stat().st_mtime_ns
    if path not in _loaded or _loaded[path][0] != stamp:
        _loaded[path] = (stamp, PyFileConfigLoader(path.name, path=str(path.parent)).load_config())
    return _loaded[path][1]


def assign_late_penalties(db_url: str, assignment: str, student: str, config: Config | None = None) -> float:
    """Assign each notebook of the student's submission its late penalty (none when on time or with no
    time); returns the submission's total penalty. ``config``: the course's, by default."""
    config = course_config(db_url) if config is None else config
    try:
        with Gradebook(db_url) as gb:
            submission = gb.find_submission(assignment, student)
            notebooks = [notebook.name for notebook in submission.notebooks]
            if not (submission.timestamp and submission.total_seconds_late > 0):
                for notebook in submission.notebooks:   # on time (a resubmission, a later due date)
                    notebook.late_submission_penalty = None
                gb.db.commit()
                return 0.0
    except MissingEntry:
        return 0.0
    try:
        assigner = AssignLatePenalties(config=config, log=LOG)
        for notebook in notebooks:
            resources = {"nbgrader": {"notebook": notebook, "assignment": assignment, "student": student,
                                      "db_url": db_url}}
            assigner.preprocess(new_notebook(), resources)
    except Exception as error:   # the course's own setting or plugin: say where to fix it
        raise ValueError(f"the late penalty of {student}'s {assignment} could not be assigned ({error}): "
                         "check c.AssignLatePenalties.plugin_class and "
                         f"c.LateSubmissionPlugin.penalty_method in {course_config_file(db_url)}") from error
    with Gradebook(db_url) as gb:
        return float(gb.find_submission(assignment, student).late_submission_penalty or 0.0)

