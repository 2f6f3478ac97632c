"""An interrupted `make grade` leaves a consistent gradebook, no process behind, and a re-run converges.

The class arrives as zip files (the documented <student>__<assignment>.zip pattern); the first run is
interrupted right after its first merge, before that student was recorded as graded (graded_record), so
the second grades everyone again, to the points a clean run gives.
"""

from __future__ import annotations

import csv
import io
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from autograde_tests.support import hostile_class, probe_course
from course_lib.grading.autograder import class_run, fixtures, scoring
from course_lib.grading.sandbox.policy import SandboxPolicy

pytestmark = pytest.mark.slow
CLASS = {"full": hostile_class.CASES["full"], "unanswered": {}}
POINTS = {"full": 3, "unanswered": 0}


def _zips(root: Path) -> Path:
    folder = root / "downloads"
    folder.mkdir()
    release = probe_course.release(root)
    for student, answers in CLASS.items():
        with zipfile.ZipFile(folder / f"{student}__probe.zip", "w") as bundle:
            notebook = fixtures.make_submission(release, answers)
            bundle.writestr("submission/probe.ipynb", nbformat.writes(notebook))
    return folder


def _sandbox_processes(first_uid: int, count: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and first_uid <= entry.stat().st_uid < first_uid + count:
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_interrupted_run_is_rerun_to_the_same_grades(tmp_path, monkeypatch):
    root = probe_course.build(tmp_path)
    downloads = _zips(root)
    policy = SandboxPolicy(uid=62000, gid=62000)
    run = class_run.GradingRun(course_root=root, jobs=2, stream=io.StringIO(),
                               course=replace(probe_course.PROBE_SETTINGS, cell_timeout=20), policy=policy,
                               check_reference=False)  # "full" is the reference; its own test checks that
    finish, merged = scoring.finish, []

    def finish_then_interrupt(*args):
        merged.append(finish(*args))
        raise KeyboardInterrupt

    monkeypatch.setattr(scoring, "finish", finish_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        class_run.grade(run, ["probe"], zips=downloads)
    assert len(merged) == 1 and not _sandbox_processes(policy.uid, len(CLASS))
    assert {p.name for p in (root / "grading" / "submitted").iterdir()} == set(CLASS)

    monkeypatch.setattr(scoring, "finish", finish)
    results = {r.student: r.score for r in class_run.grade(run, ["probe"])}
    assert results == POINTS
    with (root / "grading" / "grades.csv").open(newline="") as handle:
        assert {row["student_id"]: float(row["score"]) for row in csv.DictReader(handle)} == POINTS
    assert os.stat(root / "grading").st_mode & 0o077 == 0  # the grading folder is the grader's alone
