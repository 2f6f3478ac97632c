"""`make grade-demo`'s command end to end: the generated class of four is graded, fed back and exported."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from autograde_tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_demo_class_grades_full_partial_empty_and_broken(tmp_path):
    demo_root = tmp_path / "demo"
    run = subprocess.run([sys.executable, "-m", "course_lib.grading.cli", "demo", "--into", str(demo_root),
                          "--jobs", "2"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
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
