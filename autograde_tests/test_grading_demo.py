"""`make grade-demo`'s command end to end: the generated class of four is graded, fed back and exported.

The class is chapter 06's, the cheapest to grade of the chapters with several answer cells (the partial
student answers all but one), so that the test measures the command rather than a lesson. The demo's own
chapter (02, which `demo_assignment` picks, held below) grades its reference, its release and its wrong
rings through the same pipeline in the shared grading run.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from autograde_tests.conftest import REPO
from course_lib.grading.autograder import demo
from course_lib.grading.sandbox.policy import running_as_root
from tests.support.site_install import copy_checkout

pytestmark = pytest.mark.slow


def test_demo_class_grades_full_partial_empty_and_broken(tmp_path):
    checkout, python, env, demo_root = REPO, sys.executable, None, tmp_path / "demo"
    if running_as_root():
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        checkout = copy_checkout(private)
        python = str(checkout / ".venv" / "bin" / "python")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}   # the clone's own course_lib
        demo_root = checkout / "grading" / "demo"
    command = [python, "-m", "course_lib.grading.cli", "demo", "--into", str(demo_root),
               "--assignment", "06_tensor_parallel", "--jobs", "2", "--first-uid", "63000"]
    run = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "reference solution scores full marks" in run.stdout
    with open(demo_root / "grading" / "grades.csv", newline="") as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"full_marks", "partial", "empty", "broken"}
    score = {student: float(row["score"]) for student, row in rows.items()}
    top = float(rows["full_marks"]["max_score"])
    assert score["full_marks"] == top > score["partial"] > 0
    assert score["empty"] == score["broken"] == 0
    assert "not a valid notebook" in rows["broken"]["review_notes"]
    assert (demo_root / "grading" / "feedback" / "full_marks").is_dir()
    assert "4 submissions graded" in run.stdout + run.stderr


def test_the_demo_grades_the_ring_chapter_when_the_course_has_it(tmp_path):
    assert demo.demo_assignment(REPO) == "02_collectives"
    (tmp_path / "solutions" / "01_mlp_by_hand").mkdir(parents=True)
    (tmp_path / "solutions" / "01_mlp_by_hand" / "01_mlp_by_hand.ipynb").write_text("{}")
    assert demo.demo_assignment(tmp_path) == "01_mlp_by_hand"
