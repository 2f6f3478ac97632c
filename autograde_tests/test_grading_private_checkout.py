"""Grading from a checkout whose parent folder other users cannot enter (root's home, `mktemp -d`): one
the sandbox cannot reach is refused with the fix (test_grading_demo.py grades the demo class from such a
checkout as root), and a reference solution short of full marks stops the run before anyone is graded.
"""

from __future__ import annotations

import io
import os
import subprocess
from dataclasses import replace

import nbformat
import pytest

from autograde_tests.support import probe_course
from course_lib.grading.autograder import class_run, fixtures
from course_lib.grading.autograder.preflight import GradingRefused
from course_lib.grading.sandbox.policy import SandboxPolicy, running_as_root
from tests.support.site_install import copy_checkout as clone_with_venv


@pytest.mark.slow
def test_a_reference_solution_short_of_full_marks_stops_the_run_before_anyone_is_graded(tmp_path):
    root = probe_course.build(tmp_path)
    source_file = root / "solutions" / "probe" / "probe.ipynb"
    source = nbformat.read(source_file, as_version=4)
    for cell in source.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "scale":
            cell.source = cell.source.replace("v * factor", "v + factor")
    nbformat.write(source, source_file)
    release = probe_course.release(root)
    fixtures.write_submission(root / "grading" / "submitted" / "ada" / "probe", "probe",
                              fixtures.make_submission(release, {}))
    run = class_run.GradingRun(course_root=root, jobs=1, stream=io.StringIO(),
                               course=replace(probe_course.PROBE_SETTINGS, cell_timeout=20),
                               policy=SandboxPolicy(uid=62100, gid=62100))
    with pytest.raises(GradingRefused) as refused:
        class_run.grade(run, ["probe"])
    message = str(refused.value)
    assert "before grading anyone" in message and "reference solution" in message
    assert "probe/test_scale" in message, message
    assert not (root / "grading" / "autograded").exists()
    assert not (root / "grading" / "grades.csv").exists()


@pytest.mark.slow
def test_a_checkout_the_sandbox_cannot_read_is_refused_with_the_fix(tmp_path):
    if not running_as_root():
        pytest.skip("only root grading drops to another uid, which file modes could lock out")
    clone = clone_with_venv(tmp_path)
    os.chmod(clone / "course_lib", 0o700)  # a copy, not a hard link: the original keeps its mode
    command = [str(clone / ".venv" / "bin" / "python"), "-m", "course_lib.grading.cli", "demo",
               "--assignment", "01_mlp_by_hand", "--students", "1", "--into", str(clone / "grading" / "demo"),
               "--first-uid", "63100"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(command, cwd=clone, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode != 0
    assert "stopped before grading anyone" in run.stderr and "cannot start this course's Python" in run.stderr
    assert f"{clone / 'course_lib'}\n" in run.stderr and "chmod -R o+rX" in run.stderr, run.stderr[-3000:]
    assert not (clone / "grading" / "demo" / "grading" / "autograded").exists()
